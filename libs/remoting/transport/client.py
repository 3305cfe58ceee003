"""RemotingClient: DEALER sockets to any number of servers, one I/O thread.

Callers on any thread hand encoded requests to the I/O thread through a
Mailbox; the I/O thread owns every socket, sends, reads responses, matches
them to futures by ``opaque`` and fails the ones whose timeout passed (a
scan every 100 ms). One DEALER per remote address, created on first use.

Sockets use ZMQ_IMMEDIATE: a request to an address with no live connection
is not queued inside ZeroMQ but held in a per-address backlog until the
connection is up, so it can fail with RemotingConnectError at its deadline
instead of being delivered long after its caller gave up.

``invoke_sync`` takes a shorter road: each calling thread gets its own
DEALER per address and sends and waits on it itself, which saves two thread
hand-offs per round trip (about half the cost of a sync call on two cores).
``invoke_from_loop`` does the same for a request awaited on an event loop: the
loop gets its own DEALER per address and reads it through ``add_reader``
(see ``loop_socket``).
``invoke_oneway`` uses the same socket once it is connected. A sync call
still fails at once when the I/O thread's connection to its server closes
(the server died or restarted), as the I/O thread's requests do. Those sockets'
identity is ``<client identity> NUL <n>``; servers treat the part before the
NUL as the client's identity, so pushes still reach the I/O thread's
sockets. Consequence: sync and oneway requests are not ordered with respect
to async requests, nor to requests from other threads; one thread's sync
and oneway calls are ordered among themselves. A request made from a
callback on the I/O thread is sent there at once, after the requests other
threads had handed over before it: async requests leave in the order they
were made, whichever thread made them.

Every socket announces each connection it makes with an empty message
(ZMQ_PROBE_ROUTER), so that a server can tell when this client's last
connection closed (``RemotingServer.on_disconnect``).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import zmq

from rocketmesh.remoting.addr import tcp_endpoint
from rocketmesh.remoting.errors import (
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from rocketmesh.remoting.protocol.codes import ResponseCode, code_name
from rocketmesh.remoting.protocol.command import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingCommand,
    decode,
    response_to,
)
from rocketmesh.remoting.protocol.frames import readable, recv_frames, send_frames
from rocketmesh.remoting.transport.loop_socket import LoopSocket
from rocketmesh.remoting.transport.mailbox import Mailbox
from rocketmesh.remoting.transport.monitor import EVENT_DISCONNECTED, close_monitor, open_monitor, read_events
from rocketmesh.remoting.transport.options import SocketOptions
from rocketmesh.remoting.transport.pending import CallbackSink, PendingRequest, PendingTable, settle
from rocketmesh.runtime.log import get_logger

#: ``on_request(addr, cmd)``: handles a request the server pushed; its return value is the response.
PushHandler = Callable[[str, RemotingCommand], RemotingCommand | None]
#: ``callback(future)``: told when an async request completes.
InvokeCallback = Callable[["Future[RemotingCommand]"], None]
#: ``hook(cmd)``: called with each request just before it is encoded (RocketMQ's RPCHook.doBeforeRequest);
#: it may change ``cmd.ext`` (the ACL signer adds AccessKey, Timestamp and Signature).
RpcHook = Callable[[RemotingCommand], None]

DEFAULT_TIMEOUT_MS = 3000
_RECV_BATCH = 512
_SCAN_INTERVAL = 0.1
#: How often an invoke_sync waiting for its answer looks whether its server's connections closed (ms).
_CLOSE_CHECK_MS = 100
_seq = itertools.count(1)


@dataclass(slots=True, eq=False, weakref_slot=True)
class _DirectSocket:
    """One calling thread's socket to one address, for invoke_sync."""

    addr: str
    sock: zmq.Socket
    pollin: zmq.Poller
    pollout: zmq.Poller
    # Held while the owning thread uses the socket, so that close() from
    # another thread never closes it under a call.
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close(0)


class _DirectSockets:
    """The per-thread table addr -> _DirectSocket; closes them when its thread ends."""

    def __init__(self) -> None:
        self.by_addr: dict[str, _DirectSocket] = {}

    def __del__(self) -> None:
        for ds in self.by_addr.values():
            if ds.lock.acquire(blocking=False):
                ds.close()
                ds.lock.release()


@dataclass(slots=True, eq=False)
class _Connection:
    addr: str
    sock: zmq.Socket
    backlog: collections.deque = field(default_factory=collections.deque)
    pollout: bool = False
    #: Tells when ``sock``'s connection closes (None where ZeroMQ cannot monitor).
    monitor: zmq.Socket | None = None


class RemotingClient:
    """Sends requests to RemotingServers at "host:port" addresses.

    ``identity`` is this client's ZeroMQ identity on every connection (servers
    push to it); by default a unique one is generated. ``on_request`` handles
    requests servers push; it runs on a small worker pool, never on the I/O
    thread. ``rpc_hook(cmd)`` sees every request before it is encoded (the
    ACL signer). Use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        identity: str | bytes | None = None,
        on_request: PushHandler | None = None,
        *,
        options: SocketOptions | None = None,
        context: zmq.Context | None = None,
        push_workers: int = 2,
        name: str = "client",
        rpc_hook: RpcHook | None = None,
    ) -> None:
        if identity is None:
            identity = f"{name}-{os.getpid()}-{next(_seq)}-{secrets.token_hex(3)}"
        self.identity = identity.encode() if isinstance(identity, str) else bytes(identity)
        # NUL is reserved: it separates the identity from the suffix of the
        # per-thread sync sockets (see the module docstring).
        if not 0 < len(self.identity) <= 240 or b"\x00" in self.identity:
            raise RemotingError("identity must be 1..240 bytes without NUL bytes")
        self.options = options or SocketOptions()
        self._on_request = on_request
        self._rpc_hook = rpc_hook
        self._ctx = context or zmq.Context.instance()
        self._log = get_logger("remoting", client=self.identity.decode("utf-8", "replace"))
        self._mailbox: Mailbox[tuple[str, list | None, PendingRequest | None]] = Mailbox()
        self._pending = PendingTable()
        self._opaque = itertools.count(1)
        self._endpoints: dict[str, str] = {}
        self._conns: dict[str, _Connection] = {}
        self._by_socket: dict[zmq.Socket, _Connection] = {}
        self._by_monitor: dict[zmq.Socket, _Connection] = {}
        self._poller = zmq.Poller()
        self._push_pool = ThreadPoolExecutor(max(1, push_workers), thread_name_prefix=f"{name}-push")
        self._callback_pool = ThreadPoolExecutor(1, thread_name_prefix=f"{name}-callback")
        self._local = threading.local()
        self._direct: weakref.WeakSet[_DirectSocket] = weakref.WeakSet()
        self._direct_seq = itertools.count(1)
        #: event loop -> addr -> its LoopSocket (invoke_from_loop)
        self._loop_sockets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, LoopSocket]] = (
            weakref.WeakKeyDictionary())
        #: addr -> how many times the I/O thread's connection to it closed (read by invoke_sync's waits).
        self._closes: dict[str, int] = {}
        self._closed = False
        self._io_ident = -1
        self._thread = threading.Thread(target=self._run, name=f"{name}-remoting-io", daemon=True)
        self._thread.start()

    # -- public API ---------------------------------------------------------

    def invoke_async(
        self,
        addr: str,
        cmd: RemotingCommand,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        callback: InvokeCallback | None = None,
    ) -> Future[RemotingCommand]:
        """Send ``cmd`` to ``addr`` and return a Future of the response (any thread).

        The future fails with RemotingTimeoutError when no response came
        within ``timeout_ms``, RemotingConnectError when no connection came up
        in that time, RemotingSendRequestError when the client closed.
        ``callback(future)`` runs on the client's callback thread, so it may
        block or call ``invoke_sync``; done-callbacks added to the future
        directly run on the I/O thread and must be short and never block.
        Raises RemotingConnectError at once for a malformed address and
        RemotingSendRequestError for a frame over ``max_message_size``.
        """
        cmd.opaque = next(self._opaque)
        cmd.flag &= ~(ONEWAY_FLAG | RESPONSE_FLAG)
        fut: Future[RemotingCommand] = Future()
        if callback is not None:
            fut.add_done_callback(lambda f: self._run_callback(callback, f))
        self._post(addr, cmd, timeout_ms, fut)
        return fut

    def invoke_with_callback(
        self,
        addr: str,
        cmd: RemotingCommand,
        timeout_ms: int,
        fn: Callable[[RemotingCommand | None, BaseException | None], None],
    ) -> None:
        """Like :meth:`invoke_async`, but ``fn(response, None)`` or ``fn(None, error)`` is called instead of
        completing a Future: cheaper for a caller that completes a Future of its own. ``fn`` runs on the
        I/O thread (short, never blocking). Raises like :meth:`invoke_async`."""
        cmd.opaque = next(self._opaque)
        cmd.flag &= ~(ONEWAY_FLAG | RESPONSE_FLAG)
        self._post(addr, cmd, timeout_ms, CallbackSink(fn))

    def invoke_sync(self, addr: str, cmd: RemotingCommand, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and wait for the response.

        Raises RemotingTimeoutError, RemotingConnectError (bad address, or no
        connection within ``timeout_ms``) or RemotingSendRequestError (client
        closed, request too large). Runs on the calling thread's own socket
        (see the module docstring); must not be called on the I/O thread.
        """
        if threading.get_ident() == self._io_ident:
            raise RemotingError("invoke_sync on the remoting I/O thread would stall every other request")
        if self._closed:
            raise RemotingSendRequestError("client is closed")
        deadline = time.monotonic() + timeout_ms / 1000.0
        cmd.opaque = opaque = next(self._opaque)
        cmd.flag &= ~(ONEWAY_FLAG | RESPONSE_FLAG)
        frames = self._encode(cmd)
        ds = self._direct_socket(addr)
        with ds.lock:
            if ds.closed:
                raise RemotingSendRequestError("client is closed")
            try:
                return self._direct_call(ds, frames, opaque, deadline, timeout_ms)
            finally:
                if self._closed:
                    ds.close()

    async def invoke_from_loop(self, addr: str, cmd: RemotingCommand,
                               timeout_ms: int = DEFAULT_TIMEOUT_MS) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` from the running event loop and await the response, without blocking
        the loop: ``invoke_sync``'s errors and bounds. The request and its answer go through the loop's own
        socket to ``addr`` (see the module docstring), not through the I/O thread; one loop's requests to
        one address leave in the order they were made."""
        if self._closed:
            raise RemotingSendRequestError("client is closed")
        loop = asyncio.get_running_loop()
        cmd.opaque = opaque = next(self._opaque)
        cmd.flag &= ~(ONEWAY_FLAG | RESPONSE_FLAG)
        frames = self._encode(cmd)
        return await self._loop_socket(loop, addr).call(frames, opaque, timeout_ms)

    def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        """Send ``cmd`` to ``addr`` wanting no response (any thread).

        Best effort: it is dropped when no connection to ``addr`` comes up
        within ``timeout_ms``. Like ``invoke_sync`` it goes out on the calling
        thread's own socket when that is connected, so oneway requests of one
        thread are ordered among themselves, not with its other requests.
        """
        cmd.opaque = next(self._opaque)
        cmd.flag = (cmd.flag | ONEWAY_FLAG) & ~RESPONSE_FLAG
        if self._closed or threading.get_ident() == self._io_ident:
            self._post(addr, cmd, timeout_ms, None)
            return
        # Straight out of the calling thread's own socket when its connection is up; the I/O
        # thread (which waits for a connection, within the timeout) otherwise.
        frames = self._encode(cmd)
        ds = self._direct_socket(addr)
        if ds.lock.acquire(blocking=False):
            try:
                if not ds.closed:
                    send_frames(ds.sock, frames)
                    return
            except zmq.ZMQError:
                pass
            finally:
                ds.lock.release()
        entry = PendingRequest(cmd.opaque, addr, timeout_ms, time.monotonic() + timeout_ms / 1000.0, None)
        self._mailbox.put((addr, frames, entry))

    @property
    def pending_requests(self) -> int:
        """Requests still awaiting their answer or deadline: async and callback ones (on the I/O thread's
        connections) and awaited ones (on event loops' sockets); sync calls are not counted."""
        on_loops = sum(ls.waiting for table in list(self._loop_sockets.values()) for ls in list(table.values()))
        return len(self._pending) + on_loops

    def close(self, timeout_s: float = 2.0) -> None:
        """Fail everything pending with RemotingSendRequestError, close the sockets, join the threads."""
        if self._closed:
            return
        self._closed = True
        self._mailbox.wake()
        if threading.get_ident() != self._io_ident:
            self._thread.join(timeout_s)
        self._fail_mailbox()
        for ds in list(self._direct):
            # A socket in use is closed by its own thread when its call returns.
            if ds.lock.acquire(blocking=False):
                ds.close()
                ds.lock.release()
        self._close_loop_sockets()
        self._push_pool.shutdown(wait=False, cancel_futures=True)
        self._callback_pool.shutdown(wait=False, cancel_futures=True)
        if not self._thread.is_alive():
            self._mailbox.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- caller side ----------------------------------------------------------

    def _encode(self, cmd: RemotingCommand) -> list:
        if self._rpc_hook is not None:
            self._rpc_hook(cmd)
        frames = cmd.encode()
        size = len(frames[0])
        limit = self.options.max_message_size
        if limit >= 0 and size > limit:
            raise RemotingSendRequestError(
                f"request of {size} bytes ({len(cmd.body)} body bytes) exceeds the {limit} byte limit")
        header_size = size - 4 - len(cmd.body)
        if header_size > self.options.max_header_size:
            raise RemotingSendRequestError(f"request header of {header_size} bytes is too large")
        return frames

    def _connect_hint(self) -> str:
        curve = self.options.curve
        return "" if curve is None else curve.connect_hint()

    def _endpoint(self, addr: str) -> str:
        endpoint = self._endpoints.get(addr)
        if endpoint is None:
            endpoint = self._endpoints[addr] = tcp_endpoint(addr)
        return endpoint

    def _new_socket(self, addr: str, identity: bytes) -> zmq.Socket:
        sock = self._ctx.socket(zmq.DEALER)
        self.options.apply(sock)
        sock.setsockopt(zmq.IDENTITY, identity)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        # An empty message first on every (re)connection: the server learns which of its connections
        # is ours, so it can tell when the last one closed (RemotingServer.on_disconnect).
        sock.setsockopt(zmq.PROBE_ROUTER, 1)
        sock.setsockopt(zmq.RECONNECT_IVL, self.options.reconnect_ivl_ms)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, self.options.reconnect_ivl_max_ms)
        endpoint = self._endpoint(addr)
        if endpoint.startswith("tcp://["):
            sock.setsockopt(zmq.IPV6, 1)
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as exc:
            sock.close(0)
            raise RemotingConnectError(f"cannot connect to {addr}: {exc}") from exc
        return sock

    def _direct_socket(self, addr: str) -> _DirectSocket:
        table: _DirectSockets | None = getattr(self._local, "table", None)
        if table is None:
            table = self._local.table = _DirectSockets()
        ds = table.by_addr.get(addr)
        if ds is None or ds.closed:
            sock = self._own_socket(addr)
            pollin = zmq.Poller()
            pollin.register(sock, zmq.POLLIN)
            pollout = zmq.Poller()
            pollout.register(sock, zmq.POLLOUT)
            ds = table.by_addr[addr] = _DirectSocket(addr, sock, pollin, pollout)
            self._direct.add(ds)
        return ds

    def _own_socket(self, addr: str) -> zmq.Socket:
        """A new socket to ``addr`` for one caller (a thread's, a loop's), named ``<identity> NUL <n>``.

        The I/O thread connects to ``addr`` too, if it has not: its connection is where the server's pushes
        arrive, and its close is what fails the caller's waiting requests (``_closes``)."""
        self._endpoint(addr)  # a bad address fails here, before any socket exists
        sock = self._new_socket(addr, self.identity + b"\x00" + str(next(self._direct_seq)).encode())
        self._mailbox.put((addr, None, None))
        return sock

    def _loop_socket(self, loop: asyncio.AbstractEventLoop, addr: str) -> LoopSocket:
        table = self._loop_sockets.get(loop)
        if table is None:
            table = self._loop_sockets[loop] = {}
        ls = table.get(addr)
        if ls is None or ls.closed:
            closes = self._closes
            ls = table[addr] = LoopSocket(loop, addr, self._own_socket(addr), self.options.max_header_size,
                                          lambda: closes.get(addr, 0), self._on_push, self._connect_hint())
        return ls

    def _close_loop_sockets(self) -> None:
        """Close every loop's sockets on their loops' threads (here, for a loop closed or this thread's)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, table in list(self._loop_sockets.items()):
            for ls in list(table.values()):
                if loop is running or loop.is_closed():
                    ls.close()
                    continue
                try:
                    loop.call_soon_threadsafe(ls.close)
                except RuntimeError:  # closed meanwhile
                    ls.close()

    def _direct_call(
        self, ds: _DirectSocket, frames: list, opaque: int, deadline: float, timeout_ms: int
    ) -> RemotingCommand:
        sock = ds.sock
        closes = self._closes.get(ds.addr, 0)  # connections that closed before this call are not its business
        while True:
            try:
                send_frames(sock, frames)
                break
            except zmq.Again:
                # ZMQ_IMMEDIATE: no connection yet (or the queue is full).
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not ds.pollout.poll(max(1, int(remaining * 1000))):
                    raise RemotingConnectError(
                        f"no connection to {ds.addr} within {timeout_ms} ms{self._connect_hint()}") from None
            except zmq.ZMQError as exc:
                raise RemotingSendRequestError(f"send to {ds.addr} failed: {exc}") from exc
        max_header = self.options.max_header_size
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RemotingTimeoutError(
                    f"no response from {ds.addr} within {timeout_ms} ms (opaque {opaque})"
                )
            if not ds.pollin.poll(max(1, min(int(remaining * 1000), _CLOSE_CHECK_MS))):
                # The server's connections closing (the I/O thread's monitor saw its own close) fails the
                # call at once, as the I/O thread fails its requests (RocketMQ's failFast of a closed
                # channel): a dead server's answer can no longer come.
                if self._closes.get(ds.addr, 0) != closes:
                    raise RemotingConnectError(
                        f"the connection to {ds.addr} closed before the response (opaque {opaque}); "
                        "the server went away or restarted")
                continue
            try:
                reply = recv_frames(sock)
            except zmq.Again:
                continue
            try:
                cmd = decode(reply, max_header)
            except ProtocolError as exc:
                self._log.warning("malformed_message", addr=ds.addr, error=str(exc))
                continue
            if cmd.flag & RESPONSE_FLAG:
                if cmd.opaque == opaque:
                    return cmd
                continue  # the late response of an earlier call that timed out
            self._on_push(ds.addr, cmd)

    def _post(self, addr: str, cmd: RemotingCommand, timeout_ms: int,
              fut: Future[RemotingCommand] | CallbackSink | None) -> None:
        if self._closed:
            raise RemotingSendRequestError("client is closed")
        self._endpoint(addr)
        frames = self._encode(cmd)
        entry = PendingRequest(cmd.opaque, addr, timeout_ms, time.monotonic() + timeout_ms / 1000.0, fut)
        if threading.get_ident() == self._io_ident:
            # A callback's request: sent at once, with no wake-up, but after what other threads handed over
            # before it, so that one sender's requests leave in the order it made them whichever thread
            # makes them (the auto-batch accumulator sends from completions and from its callers).
            if len(self._mailbox):
                self._drain_mailbox()
            self._send(addr, frames, entry)
            return
        self._mailbox.put((addr, frames, entry))
        if self._closed and not self._thread.is_alive():
            # close() raced with this call and the I/O thread will not see it.
            self._fail_mailbox()

    def _run_callback(self, callback: InvokeCallback, fut: Future) -> None:
        try:
            self._callback_pool.submit(self._call_safely, callback, fut)
        except RuntimeError:  # pool shut down: the client is closing
            self._call_safely(callback, fut)

    def _call_safely(self, callback: InvokeCallback, fut: Future) -> None:
        try:
            callback(fut)
        except Exception:
            self._log.exception("invoke_callback_failed")

    def _fail_mailbox(self) -> None:
        for _, _, entry in self._mailbox.drain():
            if entry is not None and entry.future is not None:
                settle(entry.future, None, RemotingSendRequestError("client is closed"))

    # -- I/O thread -------------------------------------------------------------

    def _run(self) -> None:
        self._io_ident = threading.get_ident()
        poller = self._poller
        mbfd = self._mailbox.fd
        poller.register(mbfd, zmq.POLLIN)
        by_socket = self._by_socket
        next_scan = time.monotonic() + _SCAN_INTERVAL
        try:
            while not self._closed:
                for obj, events in poller.poll(100):
                    if obj == mbfd:
                        self._drain_mailbox()
                        continue
                    conn = by_socket.get(obj)
                    if conn is None:
                        self._on_monitor_event(self._by_monitor[obj], obj)
                        continue
                    if events & zmq.POLLIN:
                        self._drain_socket(conn)
                    if events & zmq.POLLOUT:
                        self._flush_backlog(conn)
                now = time.monotonic()
                if now >= next_scan:
                    next_scan = now + _SCAN_INTERVAL
                    self._scan(now)
        except Exception:  # pragma: no cover - a bug here must not go unseen
            self._log.exception("remoting client I/O loop crashed")
        finally:
            self._closed = True
            self._fail_mailbox()
            for entry in self._pending.drain():
                settle(entry.future, None, RemotingSendRequestError("client is closed"))
            for conn in self._conns.values():
                close_monitor(conn.sock, conn.monitor)
                conn.sock.close(0)
            self._conns.clear()
            self._by_socket.clear()
            self._by_monitor.clear()

    def _drain_mailbox(self) -> None:
        send = self._send
        for addr, frames, entry in self._mailbox.drain():
            if frames is None or entry is None:  # only "be connected to addr"
                if addr not in self._conns:
                    try:
                        self._connection(addr)
                    except RemotingConnectError as exc:
                        self._log.warning("cannot_connect", addr=addr, error=str(exc))
                continue
            send(addr, frames, entry)

    def _connection(self, addr: str) -> _Connection:
        sock = self._new_socket(addr, self.identity)
        conn = _Connection(addr, sock)
        self._conns[addr] = conn
        self._by_socket[sock] = conn
        self._poller.register(sock, zmq.POLLIN)
        try:
            conn.monitor = open_monitor(self._ctx, sock, zmq.EVENT_DISCONNECTED)
        except zmq.ZMQError as exc:
            self._log.warning("socket monitor unavailable; requests wait out their timeout when a connection "
                              "closes", addr=addr, error=str(exc))
        else:
            self._by_monitor[conn.monitor] = conn
            self._poller.register(conn.monitor, zmq.POLLIN)
        return conn

    def _on_monitor_event(self, conn: _Connection, monitor: zmq.Socket) -> None:
        """Fail the requests sent on a connection that closed: their answers can no longer come (RocketMQ's
        failFast of a closed channel), so a long-polling pull to a killed broker does not wait out its hold."""
        if not any(event == EVENT_DISCONNECTED for event, _ in read_events(monitor)):
            return
        self._drain_socket(conn)  # answers that arrived before the connection closed
        addr = conn.addr
        self._closes[addr] = self._closes.get(addr, 0) + 1
        lost = self._pending.pop_where(lambda e: e.sent and e.peer == addr)
        if lost:
            self._log.debug("connection_closed_requests_failed", addr=addr, requests=len(lost))
        for entry in lost:
            settle(entry.future, None, RemotingConnectError(
                f"the connection to {addr} closed before the response (opaque {entry.opaque}); "
                "the server went away or restarted"))

    def _send(self, addr: str, frames: list, entry: PendingRequest) -> None:
        conn = self._conns.get(addr)
        if conn is None:
            try:
                conn = self._connection(addr)
            except RemotingConnectError as exc:
                if entry.future is not None:
                    settle(entry.future, None, exc)
                else:
                    self._log.warning("oneway_request_dropped", addr=addr, error=str(exc))
                return
        if entry.future is not None:
            self._pending.add(entry)
        if conn.backlog:
            conn.backlog.append((frames, entry))
            return
        try:
            send_frames(conn.sock, frames)
        except zmq.Again:
            conn.backlog.append((frames, entry))
            if not conn.pollout:
                conn.pollout = True
                self._poller.modify(conn.sock, zmq.POLLIN | zmq.POLLOUT)
            return
        except zmq.ZMQError as exc:
            self._fail_send(entry, exc)
            return
        entry.sent = True

    def _flush_backlog(self, conn: _Connection) -> None:
        backlog = conn.backlog
        pending = self._pending
        now = time.monotonic()
        sock = conn.sock
        while backlog:
            frames, entry = backlog[0]
            if (entry.future is not None and entry.opaque not in pending) or (
                entry.future is None and entry.deadline <= now
            ):
                backlog.popleft()  # expired while waiting
                continue
            try:
                send_frames(sock, frames)
            except zmq.Again:
                return
            except zmq.ZMQError as exc:
                backlog.popleft()
                self._fail_send(entry, exc)
                continue
            backlog.popleft()
            entry.sent = True
        conn.pollout = False
        self._poller.modify(conn.sock, zmq.POLLIN)

    def _fail_send(self, entry: PendingRequest, exc: zmq.ZMQError) -> None:
        error = RemotingSendRequestError(f"send to {entry.peer} failed: {exc}")
        if entry.future is not None and self._pending.pop(entry.opaque) is not None:
            settle(entry.future, None, error)
        elif entry.future is None:
            self._log.warning("oneway_request_dropped", addr=entry.peer, error=str(exc))

    def _drain_socket(self, conn: _Connection) -> None:
        sock = conn.sock
        pop = self._pending.pop
        max_header = self.options.max_header_size
        for i in range(_RECV_BATCH):
            if i and not readable(sock):
                return
            try:
                frames = recv_frames(sock)
            except zmq.Again:
                return
            try:
                cmd = decode(frames, max_header)
            except ProtocolError as exc:
                self._log.warning("malformed_message", addr=conn.addr, error=str(exc))
                continue
            if cmd.flag & RESPONSE_FLAG:
                entry = pop(cmd.opaque)
                if entry is not None:
                    settle(entry.future, cmd, None)
            else:
                self._on_push(conn.addr, cmd)

    def _on_push(self, addr: str, cmd: RemotingCommand) -> None:
        on_request = self._on_request
        if on_request is None:
            if not cmd.flag & ONEWAY_FLAG:
                resp = response_to(
                    cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "this client takes no requests"
                )
                self._mailbox.put((addr, resp.encode(), self._reply_entry(addr, resp)))
            return
        try:
            self._push_pool.submit(self._handle_push, on_request, addr, cmd)
        except RuntimeError:  # pool shut down: closing
            pass

    def _handle_push(self, on_request: PushHandler, addr: str, cmd: RemotingCommand) -> None:
        try:
            resp = on_request(addr, cmd)
        except Exception as exc:
            self._log.exception("push_handler_failed", addr=addr, code=code_name(cmd.code, False))
            resp = response_to(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if resp is None or cmd.flag & ONEWAY_FLAG or self._closed:
            return
        resp.opaque = cmd.opaque
        resp.flag |= RESPONSE_FLAG
        try:
            frames = resp.encode()
        except ProtocolError as exc:
            frames = response_to(cmd, ResponseCode.SYSTEM_ERROR, f"cannot encode response: {exc}").encode()
        self._mailbox.put((addr, frames, self._reply_entry(addr, resp)))

    @staticmethod
    def _reply_entry(addr: str, resp: RemotingCommand) -> PendingRequest:
        return PendingRequest(
            resp.opaque, addr, DEFAULT_TIMEOUT_MS, time.monotonic() + DEFAULT_TIMEOUT_MS / 1000.0, None
        )

    def _scan(self, now: float) -> None:
        self._pending.expire(now, self._expire)
        for conn in self._conns.values():
            backlog = conn.backlog
            # Entries queue in deadline order per timeout value only, so this
            # trims what it can from the front; _flush_backlog skips the rest.
            while backlog:
                entry = backlog[0][1]
                if entry.future is None and entry.deadline > now:
                    break
                if entry.future is not None and entry.opaque in self._pending:
                    break
                backlog.popleft()

    def _expire(self, entry: PendingRequest) -> None:
        if entry.sent:
            error: RemotingError = RemotingTimeoutError(
                f"no response from {entry.peer} within {entry.timeout_ms} ms (opaque {entry.opaque})"
            )
        else:
            error = RemotingConnectError(
                f"no connection to {entry.peer} within {entry.timeout_ms} ms{self._connect_hint()}")
        settle(entry.future, None, error)
