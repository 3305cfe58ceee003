"""RemotingServer: a ROUTER socket that dispatches commands to registered handlers.

Threads: one I/O thread owns the socket. It reads requests, runs cheap
handlers inline and hands the others to the executor they were registered
with. Responses from other threads (executor workers, a long-poll waker, a
push) come back to the I/O thread through a Mailbox; nothing but the I/O
thread touches the socket.

Frames on the socket are ``[identity, command]``: ZeroMQ's ROUTER puts
the connection's identity first, then the codec's one frame.
A RemotingClient's sync-call connections have identities
``<client identity> NUL <n>``; the client identity (what ``push`` wants) is
the part before the NUL, while responses go back on the connection the
request came from.

Liveness: a RemotingClient opens every connection with an empty probe
message (ZMQ_PROBE_ROUTER), which tells the server the connection's socket
descriptor; a socket monitor tells it when a descriptor's connection was
accepted and when it closed (see ``connections.py``). Once a client identity has had no connection open
for ``disconnect_grace_ms``, the callbacks given to ``on_disconnect`` hear of
it: a peer that died is known at once, not after a silence expiry. Peers
that send no probe (not a RemotingClient) are never reported.

Doors: the processor table is a Dispatcher (``dispatch.py``) the server shares with its other doors (the
RocketMQ TCP door, ``tcp_door.py``): a request meets the same handlers whichever door it came by.
``push`` and ``invoke_client`` to a client of another door go through that door.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import zmq

from rocketmesh.remoting.addr import join_addr
from rocketmesh.remoting.errors import (
    ProtocolError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from rocketmesh.remoting.protocol.codes import ResponseCode
from rocketmesh.remoting.protocol.command import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingCommand,
    decode,
)
from rocketmesh.remoting.protocol.frames import readable, recv_routed, send_routed
from rocketmesh.remoting.transport.connections import ClosedRoute, ConnectionTable
from rocketmesh.remoting.transport.dispatch import Dispatcher
from rocketmesh.remoting.transport.mailbox import Mailbox
from rocketmesh.remoting.transport.monitor import (
    EVENT_ACCEPTED,
    EVENT_DISCONNECTED,
    close_monitor,
    open_monitor,
    read_events,
)
from rocketmesh.remoting.transport.options import SocketOptions
from rocketmesh.remoting.transport.pending import PendingRequest, PendingTable, settle
from rocketmesh.runtime.log import get_logger

Handler = Callable[[RemotingCommand, "RequestContext"], RemotingCommand | None]
#: ``callback(identity)``: the client with this identity has no connection open any more.
DisconnectCallback = Callable[[bytes], object]

#: How long a client must stay without a connection before it counts as gone: a peer whose connection
#: broke and that redials at once (ZeroMQ reconnects after 100 ms) is not reported.
DEFAULT_DISCONNECT_GRACE_MS = 1000

#: Messages read per socket wake-up before the loop looks at its mailbox again.
_RECV_BATCH = 512
#: How long a gracefully stopping server keeps connections open after its last answer.
_SETTLE_S = 0.3
#: How often expired pushes are looked for, in seconds.
_SCAN_INTERVAL = 0.1
#: Peer descriptions remembered before the cache starts over.
_MAX_PEERS = 65_536


@dataclass(slots=True, eq=False)
class RequestContext:
    """Where a request came from, and how to answer it later.

    ``identity`` is the client's ZeroMQ identity (use it with
    ``RemotingServer.push``), ``remote`` a printable ``identity@ip``,
    ``enqueued_at`` the ``time.monotonic()`` at which the request was read.
    A request that came by the TCP door has its own context (``TcpRequestContext``): ``identity``
    ``b"tcp:ip:port"``, ``remote`` ``ip:port``.
    """

    server: RemotingServer
    identity: bytes
    remote: str
    request: RemotingCommand
    enqueued_at: float
    #: The identity of the connection the request came on; the response goes there.
    route: bytes = b""
    #: Told the response once it is sent (a traced request's span ends there).
    on_respond: Callable[[RemotingCommand], object] | None = None
    # One token; whoever pops it sends the response. list.pop is atomic, so a
    # response races safely between, say, a long-poll waker and its timeout.
    _token: list = field(default_factory=lambda: [True])
    #: True for a request that came by a TCP door (RocketMQ's own clients): a handler answers such a
    #: client with the addresses it can reach (the brokers' TCP doors, not their ZeroMQ sockets).
    over_tcp: ClassVar[bool] = False

    @property
    def peer_language(self) -> str | None:
        """The language the requester said it is written in (RocketMQ's LanguageCode name), None when its
        protocol does not say (the mesh's own ZeroMQ requests: the SDK's)."""
        return None

    @property
    def peer_version(self) -> int | None:
        """The RocketMQ version code the requester's frame carried, None when its protocol does not say."""
        return None

    def backlogged_ms(self) -> float:
        """How long the I/O thread has been reading without finding the socket empty, in ms: 0 while
        it keeps up with its clients, growing under sustained load (infinite when asked off the I/O
        thread, where it cannot be known). An inline handler can do its work at once while the
        server keeps up, and hand it on where its waiting is measured once it does not."""
        return self.server._backlogged_ms()

    @property
    def waited_ms(self) -> float:
        """Milliseconds since the request was read off the socket."""
        return (time.monotonic() - self.enqueued_at) * 1000.0

    @property
    def responded(self) -> bool:
        """True once a response was sent (or the request was oneway and answered with None)."""
        return not self._token

    def respond(self, response: RemotingCommand) -> bool:
        """Send ``response`` to the requester, from any thread.

        Opaque and the response bit are filled in here. Returns False (and
        sends nothing) when a response already went out or the request was
        oneway.
        """
        try:
            self._token.pop()
        except IndexError:
            return False
        req = self.request
        if req.flag & ONEWAY_FLAG:
            return False
        observe = self.server.response_observer
        if observe is not None:
            observe(req.code, response.code, self.enqueued_at)
        response.opaque = req.opaque
        response.flag |= RESPONSE_FLAG
        self._send(response)
        if self.on_respond is not None:
            self.on_respond(response)
        return True

    def _send(self, response: RemotingCommand) -> None:
        """Put the filled-in ``response`` on the wire of the door the request came by: here the ROUTER socket,
        through the server's I/O thread (another door's context overrides this)."""
        try:
            frames = response.encode()
        except ProtocolError as exc:
            frames = RemotingCommand(
                ResponseCode.SYSTEM_ERROR, response.opaque, RESPONSE_FLAG, f"cannot encode response: {exc}"
            ).encode()
        server = self.server
        if threading.get_ident() == server._io_ident:
            server._send(self.route, frames, None)
        else:
            server._mailbox.put((self.route, frames, None))


class Door(Protocol):
    """Another way into a server than its ROUTER socket (the RocketMQ TCP door): it serves requests through
    the server's dispatcher and carries the server's pushes to the clients connected through it."""

    def serves(self, identity: bytes) -> bool:
        """True while the client with ``identity`` is connected through this door (any thread)."""
        ...

    def push(self, identity: bytes, cmd: RemotingCommand) -> None:
        """As ``RemotingServer.push``, for a client of this door."""
        ...

    def invoke_client(self, identity: bytes, cmd: RemotingCommand, timeout_ms: int = 3000) -> Future[RemotingCommand]:
        """As ``RemotingServer.invoke_client``, for a client of this door."""
        ...


class RemotingServer:
    """A ROUTER socket on ``bind_addr`` ("host:port", port 0 picks a free one).

    Register handlers with ``register`` (before or after ``start``), then
    ``start()``; ``stop()`` shuts it down. ``port`` and ``address`` tell the
    port actually bound once started.

    ``busy_poll_us`` (> 0): after handling requests, the I/O thread keeps
    looking for the next one this long, yielding the CPU between looks,
    before it sleeps in poll. A request-response peer's next request then
    finds the thread awake: where waking a sleeping thread is slow (a virtual
    CPU that halts when idle), that is a large part of a sync round trip.
    The thread spins only while the waits it sees are short (at most twice
    ``busy_poll_us``), so an idle or lightly loaded server does not spin.

    ``disconnect_grace_ms``: how long a client stays without a connection
    before ``on_disconnect`` callbacks hear it is gone.
    """

    def __init__(
        self,
        bind_addr: str,
        name: str,
        *,
        options: SocketOptions | None = None,
        context: zmq.Context | None = None,
        busy_poll_us: int = 0,
        disconnect_grace_ms: int = DEFAULT_DISCONNECT_GRACE_MS,
    ) -> None:
        host, _, port = bind_addr.rpartition(":")
        if not host or not port.isdigit():
            raise RemotingError(f"bad bind address {bind_addr!r}: expected host:port")
        self._bind_host = host.strip("[]")
        self._bind_port = int(port)
        self.name = name
        self.options = options or SocketOptions()
        if busy_poll_us < 0:
            raise RemotingError(f"busy_poll_us must be >= 0, got {busy_poll_us}")
        if disconnect_grace_ms < 0:
            raise RemotingError(f"disconnect_grace_ms must be >= 0, got {disconnect_grace_ms}")
        self._busy_poll_s = busy_poll_us / 1e6
        self._disconnect_grace_s = disconnect_grace_ms / 1000.0
        self._ctx = context or zmq.Context.instance()
        self._log = get_logger("remoting", server=name)
        #: The processor table, shared with the server's other doors (``add_door``).
        self.dispatcher = Dispatcher(name)
        self._doors: list[Door] = []
        self._mailbox: Mailbox[tuple[bytes, list, PendingRequest | None]] = Mailbox()
        self._pending = PendingTable()
        self._opaque = itertools.count(1)
        self._peers: dict[bytes, tuple[bytes, str]] = {}
        self._sock: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        # Liveness, on the I/O thread only: open connections, and clients left without one (identity ->
        # when they count as gone).
        self._connections = ConnectionTable()
        self._gone_at: dict[bytes, float] = {}
        self._srcfd_failed = False
        self._disconnect_callbacks: list[DisconnectCallback] = []
        self._after_reads: list[Callable[[], None]] = []
        self._notifier: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._io_ident = -1
        self._accepting = False
        self._stop_deadline: float | None = None
        self._settle = False
        self._port = 0
        self._malformed_logged_at = 0.0
        self._malformed_suppressed = 0
        #: When the I/O thread last began reading without having found the socket empty since (None: it
        #: found it empty at its last read).
        self._backlog_since: float | None = None
        #: ``(request code, response code, enqueued_at)`` for each response, on the responding thread (metrics).
        self.response_observer: Callable[[int, int, float], None] | None = None

    @property
    def request_hook(self) -> Handler | None:
        """``hook(cmd, ctx)`` before each request's handler, on the handler's thread (the ACL check); it
        refuses a request by raising RequestError, which is the answer. It sees the requests of every door."""
        return self.dispatcher.request_hook

    @request_hook.setter
    def request_hook(self, hook: Handler | None) -> None:
        self.dispatcher.request_hook = hook

    # -- set-up ---------------------------------------------------------

    def register(
        self,
        code: int,
        handler: Handler,
        executor: Executor | None = None,
        queue_capacity: int = 0,
    ) -> None:
        """Route requests with ``code`` to ``handler(cmd, ctx) -> RemotingCommand | None``.

        Without ``executor`` the handler runs on the I/O thread and must be
        cheap. With one it runs there, and when ``queue_capacity`` (> 0)
        requests of this code are already queued or running, a new one is
        answered SYSTEM_BUSY at once. A handler returning None answers later
        through ``ctx.respond``; one raising RequestError answers with its
        code; any other exception answers SYSTEM_ERROR with its text.
        """
        self.dispatcher.register(code, handler, executor, queue_capacity)

    def after_reads(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the I/O thread after each round of reading (every request waiting,
        up to a batch, handled) and before it waits for more: where work that inline handlers put off
        to share among the round's requests is done (the broker's group commit). It must be quick
        when there is nothing to do; one that raises is logged. It is called from the next round on."""
        self._after_reads.append(callback)

    def run_after_reads(self) -> None:
        """Call the ``after_reads`` callbacks, here: each I/O thread (this server's and its doors') does after
        each round of reading, so work its inline handlers put off is done on the thread that put it off."""
        for callback in self._after_reads:
            try:
                callback()
            except Exception:  # noqa: BLE001 - the I/O loop must outlive a bad callback
                self._log.exception("after_reads_callback_failed")

    def register_default(self, handler: Handler) -> None:
        """Handle every code nothing is registered for (inline, on the I/O thread)."""
        self.dispatcher.default_handler = handler

    def add_door(self, door: Door) -> None:
        """Let ``push`` and ``invoke_client`` reach the clients of ``door`` (a door calls this itself)."""
        self._doors.append(door)

    def remove_door(self, door: Door) -> None:
        """Forget ``door`` (once it stopped)."""
        if door in self._doors:
            self._doors.remove(door)

    def on_disconnect(self, callback: DisconnectCallback) -> None:
        """Call ``callback(identity)`` when a client's last connection has closed (and it did not come
        back within ``disconnect_grace_ms``): it was shut down, killed, or its host went away.

        ``identity`` is the client identity, as ``RequestContext.identity`` gives it (a client of another
        door, such as the TCP door, is reported by that door when its connection closes). Callbacks run one
        at a time on a thread of the server's own, in the order clients went, never on the I/O thread;
        one that raises is logged. A client that hangs with its connections open is not reported:
        silence expiry stays the caller's business. Register before ``start`` to miss nobody.
        """
        if self._notifier is None:
            self._notifier = ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-disconnect")
        self._disconnect_callbacks.append(callback)

    @property
    def port(self) -> int:
        """The bound TCP port (after ``start``)."""
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` as bound (after ``start``)."""
        return join_addr(self._bind_host, self._port)

    def start(self) -> RemotingServer:
        """Bind and start the I/O thread; raises RemotingError when the address cannot be bound."""
        if self._thread is not None:
            raise RemotingError("server already started")
        sock = self._ctx.socket(zmq.ROUTER)
        try:
            self.options.apply(sock, server=True)
        except ValueError:  # CURVE configured without a server key: refuse to serve in plain text
            sock.close(0)
            raise
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        # A client that reconnects under the identity it had (after a restart)
        # takes its identity over instead of being refused.
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._monitor = self._open_monitor(sock)
        host = "*" if self._bind_host in ("", "*", "0.0.0.0") else self._bind_host
        port = "*" if self._bind_port == 0 else str(self._bind_port)
        if ":" in host:
            sock.setsockopt(zmq.IPV6, 1)
            host = f"[{host}]"
        try:
            sock.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as exc:
            self._close_monitor(sock)
            sock.close(0)
            raise RemotingError(f"cannot bind {self._bind_host}:{self._bind_port}: {exc}") from exc
        endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._port = int(endpoint.rsplit(":", 1)[1])
        self._sock = sock
        self._accepting = True
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-remoting-io", daemon=True)
        self._thread.start()
        self._log.info("remoting_server_listening", address=self.address)
        return self

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop reading requests, give executor handlers ``grace_s`` to answer, then close.

        Requests still queued in ZeroMQ and answers still owed after the grace
        period are dropped (their senders time out). Joins the I/O thread.
        """
        if self._thread is None or self._stop_deadline is not None:
            return
        # Answers still owed when the stop begins get a moment to be read before the connections close.
        self._settle = bool(len(self._mailbox)) or self.dispatcher.busy()
        self._stop_deadline = time.monotonic() + grace_s
        self._accepting = False
        self._mailbox.wake()
        if threading.get_ident() == self._io_ident:
            return  # called from an inline handler: the loop ends after it returns
        self._thread.join(grace_s + 2.0)
        if self._thread.is_alive():
            self._log.warning("remoting I/O thread did not stop in time")
        else:
            self._mailbox.close()

    # -- pushes to clients ------------------------------------------------

    def push(self, identity: bytes, cmd: RemotingCommand) -> None:
        """Send ``cmd`` as a oneway request to the client with ``identity`` (any thread).

        Best effort: a client that is not connected is skipped (logged at debug).
        """
        door = self.door_of(identity)
        if door is not None:
            door.push(identity, cmd)
            return
        cmd.opaque = next(self._opaque)
        cmd.flag = (cmd.flag | ONEWAY_FLAG) & ~RESPONSE_FLAG
        frames = cmd.encode()
        self._mailbox.put((identity, frames, None))

    def invoke_client(
        self, identity: bytes, cmd: RemotingCommand, timeout_ms: int = 3000
    ) -> Future[RemotingCommand]:
        """Send ``cmd`` to the client with ``identity`` and get its response as a Future.

        The future fails with RemotingTimeoutError after ``timeout_ms`` and
        with RemotingSendRequestError when the client is not connected.
        """
        door = self.door_of(identity)
        if door is not None:
            return door.invoke_client(identity, cmd, timeout_ms)
        cmd.opaque = next(self._opaque)
        cmd.flag &= ~(ONEWAY_FLAG | RESPONSE_FLAG)
        frames = cmd.encode()
        fut: Future[RemotingCommand] = Future()
        entry = PendingRequest(cmd.opaque, identity, timeout_ms, time.monotonic() + timeout_ms / 1000.0, fut)
        self._mailbox.put((identity, frames, entry))
        return fut

    def door_of(self, identity: bytes) -> Door | None:
        """The door the client with ``identity`` is connected through, None for a ZeroMQ client (or one not
        connected). RocketMQ's own clients answer some calls (CHECK_TRANSACTION_STATE) with a request of
        their own instead of a response: a caller that knows this pushes to them."""
        for door in self._doors:
            if door.serves(identity):
                return door
        return None

    # -- I/O thread -------------------------------------------------------

    def _send(self, identity: bytes, frames: list, entry: PendingRequest | None) -> None:
        sock = self._sock
        if sock is None or sock.closed:
            return
        try:
            send_routed(sock, identity, frames)
        except zmq.Again:
            self._log.warning("peer queue full, message dropped", peer=self._describe(identity))
            if entry is not None:
                settle(entry.future, None, RemotingSendRequestError(f"queue to {self._describe(identity)} is full"))
            return
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                self._log.debug("peer not connected, message dropped", peer=self._describe(identity))
            else:
                self._log.warning("send_failed", peer=self._describe(identity), error=str(exc))
            if entry is not None:
                settle(
                    entry.future,
                    None,
                    RemotingSendRequestError(f"client {self._describe(identity)} is not connected"),
                )
            return
        if entry is not None:
            entry.sent = True
            self._pending.add(entry)

    def _run(self) -> None:
        self._io_ident = threading.get_ident()
        sock = self._sock
        assert sock is not None
        mbfd = self._mailbox.fd
        monitor = self._monitor
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(mbfd, zmq.POLLIN)
        if monitor is not None:
            poller.register(monitor, zmq.POLLIN)
        reading = True
        busy_poll_s = self._busy_poll_s
        spin_worthwhile_s = 2 * busy_poll_s
        spin = False
        clock = time.perf_counter
        after_reads = self._after_reads
        next_scan = time.monotonic() + _SCAN_INTERVAL
        try:
            while True:
                if not self._accepting:
                    if reading:
                        poller.unregister(sock)
                        reading = False
                    if self._draining_done():
                        break
                idle_since = clock()
                if spin and reading:
                    self._busy_poll(sock, busy_poll_s)
                events = poller.poll(100)
                # Spin before the next wait only if this one was short: a peer in a request-response loop.
                spin = busy_poll_s > 0 and bool(events) and clock() - idle_since <= spin_worthwhile_s
                for obj, _ in events:
                    if obj is sock:
                        self._drain_socket(sock)
                    elif obj is monitor:
                        self._drain_monitor(monitor)
                    else:
                        self._drain_mailbox()
                if after_reads:
                    self.run_after_reads()
                now = time.monotonic()
                if now >= next_scan:
                    next_scan = now + _SCAN_INTERVAL
                    self._pending.expire(now, self._expire_push)
                    if self._gone_at:
                        self._report_gone(now)
        except Exception:  # pragma: no cover - a bug here must not go unseen
            self._log.exception("remoting I/O loop crashed")
        finally:
            self._drain_mailbox()
            for entry in self._pending.drain():
                settle(entry.future, None, RemotingSendRequestError("server stopped"))
            # A graceful stop keeps the connections open a moment after the last answer:
            # a peer that has not read it yet when the connection drops can lose it.
            linger = self.options.linger_ms
            if self._stop_deadline is not None:
                left = self._stop_deadline - time.monotonic()
                if left > 0 and self._settle:
                    time.sleep(min(_SETTLE_S, left))
                    self._drain_mailbox()
                linger = max(linger, int((self._stop_deadline - time.monotonic()) * 1000))
            self._close_monitor(sock)
            sock.close(linger)
            if self._notifier is not None:
                self._notifier.shutdown(wait=False, cancel_futures=True)
            self._log.info("remoting_server_stopped", address=self.address)

    def _busy_poll(self, sock: zmq.Socket, seconds: float) -> None:
        """Look for a request or a queued response until one is there or ``seconds`` pass.

        sched_yield lets the ZeroMQ I/O thread and our other threads (which need the GIL, released
        across it) run in between: the spin keeps the CPU from idling without taking it from them.
        """
        mailbox = self._mailbox
        clock = time.perf_counter
        end = clock() + seconds
        while not readable(sock) and not len(mailbox) and clock() < end:
            os.sched_yield()

    def _draining_done(self) -> bool:
        if self._stop_deadline is not None and time.monotonic() >= self._stop_deadline:
            return True
        return not self.dispatcher.busy() and not len(self._mailbox)

    def _backlogged_ms(self) -> float:
        if threading.get_ident() != self._io_ident:
            return float("inf")
        since = self._backlog_since
        return 0.0 if since is None else (time.monotonic() - since) * 1000.0

    def _drain_mailbox(self) -> None:
        send = self._send
        for identity, frames, entry in self._mailbox.drain():
            send(identity, frames, entry)

    def _drain_socket(self, sock: zmq.Socket) -> None:
        peers = self._peers
        dispatch = self.dispatcher.dispatch
        if self._backlog_since is None:
            self._backlog_since = time.monotonic()
        for i in range(_RECV_BATCH):
            if i and not readable(sock):
                self._backlog_since = None
                return
            try:
                first, frames = recv_routed(sock)
            except zmq.Again:
                self._backlog_since = None
                return
            route = first.bytes
            if len(frames) == 1 and not frames[0]:
                self._on_probe(route, first)  # a RemotingClient's new connection (ZMQ_PROBE_ROUTER)
                continue
            peer = peers.get(route)
            if peer is None:
                peer = self._learn_peer(route, first)
            try:
                cmd = decode(frames, self.options.max_header_size)
            except ProtocolError as exc:
                self._on_malformed(route, peer[1], exc)
                continue
            if cmd.flag & RESPONSE_FLAG:
                # Only the client a request was pushed to may answer it.
                entry = self._pending.get(cmd.opaque)
                if entry is not None and entry.peer == peer[0]:
                    self._pending.pop(cmd.opaque)
                    settle(entry.future, cmd, None)
                continue
            dispatch(cmd, RequestContext(self, peer[0], peer[1], cmd, time.monotonic(), route))

    def _expire_push(self, entry: PendingRequest) -> None:
        settle(
            entry.future,
            None,
            RemotingTimeoutError(
                f"no response from client {self._describe(entry.peer)} within {entry.timeout_ms} ms"
            ),
        )

    def _learn_peer(self, route: bytes, frame: zmq.Frame) -> tuple[bytes, str]:
        try:
            ip = frame.get("Peer-Address")
        except zmq.ZMQError:
            ip = "?"
        identity = route.partition(b"\x00")[0] or route
        peer = (identity, f"{self._describe(identity)}@{ip}")
        if len(self._peers) >= _MAX_PEERS:
            self._peers.clear()
        self._peers[route] = peer
        return peer

    # -- liveness (I/O thread) ------------------------------------------------

    def _open_monitor(self, sock: zmq.Socket) -> zmq.Socket | None:
        """Watch ``sock``'s connections come and go; None (and no disconnect reports) where ZeroMQ cannot."""
        try:
            return open_monitor(self._ctx, sock, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        except zmq.ZMQError as exc:
            self._log.warning("socket monitor unavailable; closed connections are not reported", error=str(exc))
            return None

    def _close_monitor(self, sock: zmq.Socket) -> None:
        monitor, self._monitor = self._monitor, None
        close_monitor(sock, monitor)

    def _drain_monitor(self, monitor: zmq.Socket) -> None:
        for event, fd in read_events(monitor):
            if event == EVENT_ACCEPTED:
                closed = self._connections.accepted(fd)
            elif event == EVENT_DISCONNECTED:
                closed = self._connections.disconnected(fd)
            else:
                continue
            if closed is not None:
                self._route_closed(closed)

    def _on_probe(self, route: bytes, frame: zmq.Frame) -> None:
        # A new connection: describe it afresh (its address may have changed), and track it.
        monitor = self._monitor
        if monitor is not None:
            # Every event sent before the probe first (see connections.py): its connection's ACCEPTED,
            # and the DISCONNECTED of whoever had its descriptor before.
            self._drain_monitor(monitor)
        identity = self._learn_peer(route, frame)[0]
        if monitor is None:
            return
        try:
            fd = frame.get(zmq.SRCFD)
        except zmq.ZMQError as exc:  # pragma: no cover - a libzmq without ZMQ_SRCFD
            if not self._srcfd_failed:
                self._srcfd_failed = True
                self._log.warning("connection descriptors unavailable; closed connections are not reported",
                                  error=str(exc))
            return
        for closed in self._connections.opened(route, identity, fd):
            self._route_closed(closed)
        if self._connections.connected(identity):
            self._gone_at.pop(identity, None)  # back within the grace: it never went

    def _route_closed(self, closed: ClosedRoute) -> None:
        self._peers.pop(closed.route, None)
        if closed.last and self._disconnect_callbacks:
            self._gone_at[closed.identity] = time.monotonic() + self._disconnect_grace_s

    def _report_gone(self, now: float) -> None:
        notifier = self._notifier
        if notifier is None:  # nobody registered a callback: nobody went either
            return
        due = [identity for identity, at in self._gone_at.items() if at <= now]
        for identity in due:
            del self._gone_at[identity]
            if self._connections.connected(identity):
                continue
            self.notify_disconnected(identity)

    def notify_disconnected(self, identity: bytes) -> None:
        """Tell the ``on_disconnect`` callbacks that the client with ``identity`` is gone (any thread: a door
        calls it when a connection of its own closed). Nothing when no callback is registered."""
        notifier = self._notifier
        if notifier is None:
            return
        self._log.debug("client_disconnected", peer=self._describe(identity))
        for callback in self._disconnect_callbacks:
            try:
                notifier.submit(self._notify_gone, callback, identity)
            except RuntimeError:  # stopping: nobody to tell
                return

    def _notify_gone(self, callback: DisconnectCallback, identity: bytes) -> None:
        try:
            callback(identity)
        except Exception:
            self._log.exception("disconnect_callback_failed", peer=self._describe(identity))

    @staticmethod
    def _describe(identity: object) -> str:
        if isinstance(identity, bytes):
            text = identity.decode("ascii", "replace")
            return text if text.isprintable() and "\ufffd" not in text else identity.hex()
        return str(identity)

    def _on_malformed(self, identity: bytes, remote: str, exc: ProtocolError) -> None:
        now = time.monotonic()
        if now - self._malformed_logged_at >= 1.0:
            self._log.warning(
                "malformed_message",
                peer=remote,
                error=str(exc),
                suppressed=self._malformed_suppressed,
            )
            self._malformed_logged_at = now
            self._malformed_suppressed = 0
        else:
            self._malformed_suppressed += 1
        if exc.opaque is None or (exc.flag or 0) & (RESPONSE_FLAG | ONEWAY_FLAG):
            return
        response = RemotingCommand(ResponseCode.SYSTEM_ERROR, exc.opaque, RESPONSE_FLAG, f"malformed request: {exc}")
        self._send(identity, response.encode(), None)
