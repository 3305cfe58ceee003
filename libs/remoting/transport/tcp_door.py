"""TcpDoor: RocketMQ 4.x's remoting protocol on a plain TCP port, a second door onto a RemotingServer.

RocketMQ's own clients (Java, C++, Go, Node) speak length-prefixed frames over TCP (see
``protocol/rocketmq_wire.py``), not ZeroMQ. A TcpDoor listens for them and runs every request they send
through the server's :class:`Dispatcher`: the same handlers, executors, queue bounds, request hook and
error answers as the ZeroMQ door. A response goes back over the connection its request came on, its header
written as the request's was (JSON or ROCKETMQ), with the request's opaque and the response flag; a oneway
request (flag bit 1) gets nothing back.

Threads: one I/O thread owns the listening socket and every connection (non-blocking sockets, one
``selectors`` loop). It reads, cuts frames (FrameDecoder), runs cheap handlers inline and hands the others
to their executors. An answer is written by the thread that gives it, under the connection's lock, straight
into the socket; what the socket does not take waits in the connection's write buffer, which the I/O thread
drains as the peer reads. Two frames never interleave. A peer that leaves more than ``max_write_buffer``
bytes unread is closed: a slow reader holds nobody else up.

Liveness: a connection that closes, or that the door closes (bytes that are not a frame, a peer that does
not read), is a peer gone at once: the server's ``on_disconnect`` callbacks hear its identity,
``b"tcp:" + "ip:port"``, unique to the connection. Its requests' ``RequestContext.identity`` is the same, so
``RemotingServer.push`` and ``invoke_client`` with it reach the client over its own connection (the broker
calling a client back: CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED ...).

Inline handlers run on this door's I/O thread, beside the ZeroMQ door's, so they must be safe on two threads
at once. ``ctx.backlogged_ms()`` measures this thread's own backlog, and the server's ``after_reads`` callbacks
(the broker's group commit) run here too after each round, as on the ZeroMQ door's thread.
"""

from __future__ import annotations

import itertools
import selectors
import socket
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from rocketmesh.remoting.addr import join_addr
from rocketmesh.remoting.errors import (
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    WireFormatError,
)
from rocketmesh.remoting.protocol.codes import ResponseCode
from rocketmesh.remoting.protocol.command import ONEWAY_FLAG, RESPONSE_FLAG, RemotingCommand
from rocketmesh.remoting.protocol.rocketmq_wire import (
    MAX_FRAME_SIZE,
    Decoded,
    FrameDecoder,
    SerializeType,
    WireInfo,
    encode,
)
from rocketmesh.remoting.transport.mailbox import Mailbox
from rocketmesh.remoting.transport.pending import PendingRequest, PendingTable, settle
from rocketmesh.remoting.transport.server import RemotingServer, RequestContext
from rocketmesh.runtime.log import get_logger

#: What every TCP peer's identity starts with: ``b"tcp:127.0.0.1:53412"``.
TCP_IDENTITY_PREFIX = b"tcp:"
#: Bytes a peer may leave unread (beyond the frame being written) before it is closed.
DEFAULT_MAX_WRITE_BUFFER = 16 * 1024 * 1024

#: Bytes read from one connection per wake-up: a busy connection does not starve the others.
_RECV_SIZE = 256 * 1024
#: Connections accepted per wake-up of the listening socket.
_ACCEPT_BATCH = 64
#: How often expired calls to clients are looked for, in seconds (also the longest select wait).
_SCAN_INTERVAL = 0.1
_READ = selectors.EVENT_READ
_WRITE = selectors.EVENT_WRITE
_OPAQUE_MASK = 0x7FFFFFFF


def door_frame_size(max_message_size: int) -> int:
    """The largest frame a door takes for a service whose ZeroMQ door takes ``max_message_size`` bytes (a
    frame less its total length): that plus the length field, and never over RocketMQ's 16 MiB."""
    return min(MAX_FRAME_SIZE, max_message_size + 4)


@dataclass(slots=True, eq=False)
class _Connection:
    """One accepted TCP connection."""

    sock: socket.socket
    identity: bytes
    #: The peer's ``ip:port``.
    remote: str
    decoder: FrameDecoder
    #: Guards ``out``, ``open``, ``owed`` and every write to ``sock``.
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Bytes written but not yet taken by the socket.
    out: bytearray = field(default_factory=bytearray)
    #: Writes accepted; False once the connection is closed or condemned (see ``reason``).
    open: bool = True
    #: Why a thread other than the I/O thread condemned the connection.
    reason: str = ""
    #: Requests read and not yet answered (oneway ones not counted).
    owed: int = 0
    #: How the peer's last request was serialized: the door's own requests to it go the same way.
    serialize_type: SerializeType = SerializeType.JSON
    #: The selector interest (I/O thread only; 0: not registered).
    events: int = 0
    #: The socket is closed (I/O thread only).
    closed: bool = False


def _send_some(conn: _Connection, data: bytes | bytearray) -> int:
    """Write into ``conn``'s socket as much of ``data`` as it takes now; the caller holds ``conn.lock``. A send
    that fails condemns the connection, and counts as all written (nothing is left to retry)."""
    try:
        return conn.sock.send(data)
    except (BlockingIOError, InterruptedError):
        return 0
    except OSError as exc:
        conn.open = False
        conn.reason = f"send failed: {exc}"
        return len(data)


class TcpRequestContext(RequestContext):
    """A request that came through a TcpDoor: its answer goes back over the same connection."""

    __slots__ = ("_conn", "_door", "_wire")
    over_tcp = True

    def __init__(self, server: RemotingServer, request: RemotingCommand, enqueued_at: float, door: TcpDoor,
                 conn: _Connection, wire: WireInfo) -> None:
        RequestContext.__init__(self, server, conn.identity, conn.remote, request, enqueued_at, conn.identity)
        self._door = door
        self._conn = conn
        self._wire = wire

    @property
    def peer_language(self) -> str | None:
        """The language the request's frame named (RocketMQ's client: JAVA, CPP ...); None for one RocketMQ
        does not list."""
        language = self._wire.language
        return None if language is None else language.name

    @property
    def peer_version(self) -> int | None:
        """The version code the request's frame carried."""
        return self._wire.version

    def _send(self, response: RemotingCommand) -> None:
        self._door._answer(self._conn, response, self._wire.serialize_type)

    def backlogged_ms(self) -> float:
        """As ``RequestContext.backlogged_ms``, measured on the door's own I/O thread."""
        return self._door._backlogged_ms()


class TcpDoor:
    """RocketMQ's remoting protocol on ``bind_addr`` ("host:port", port 0 picks a free one), served by
    ``server``'s handlers.

    ``start()`` binds and starts the I/O thread, ``stop()`` closes everything; ``port`` and ``address`` tell
    the port bound. A frame larger than ``max_frame_size`` (its length field included) closes its
    connection, as does a peer leaving more than ``max_write_buffer`` bytes unread. Stop the door before its
    server: the server's executors and ``on_disconnect`` callbacks serve the door's connections too.
    """

    def __init__(self, server: RemotingServer, bind_addr: str, *, max_frame_size: int = MAX_FRAME_SIZE,
                 max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER) -> None:
        host, _, port = bind_addr.rpartition(":")
        if not host or not port.isdigit():
            raise RemotingError(f"bad bind address {bind_addr!r}: expected host:port")
        if max_frame_size < 8:
            raise RemotingError(f"max_frame_size must be at least 8 bytes, got {max_frame_size}")
        if max_write_buffer < 0:
            raise RemotingError(f"max_write_buffer must be >= 0, got {max_write_buffer}")
        self.server = server
        self.max_frame_size = max_frame_size
        self.max_write_buffer = max_write_buffer
        self._bind_host = host.strip("[]")
        self._bind_port = int(port)
        self._port = 0
        self._log = get_logger("remoting", server=server.name, door="tcp")
        self._dispatcher = server.dispatcher
        #: Connections by identity: written by the I/O thread, read by any (``serves``, ``push``).
        self._conns: dict[bytes, _Connection] = {}
        #: From other threads to the I/O thread: ``(conn, None, None)`` asks it to look at ``conn`` (a write
        #: left bytes over, or the connection was condemned); ``(conn, frame, entry)`` is a request of ours.
        self._mailbox: Mailbox[tuple[_Connection, bytes | None, PendingRequest | None]] = Mailbox()
        self._pending = PendingTable()
        self._opaque = itertools.count(1)
        self._selector: selectors.BaseSelector | None = None
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._io_ident = -1
        #: When the I/O thread last began a round of serving without having found nothing to do since (None:
        #: it found nothing at its last look), as the ZeroMQ door's read loop keeps it.
        self._backlog_since: float | None = None
        self._stop_deadline: float | None = None
        self._stopping = False

    # -- set-up -----------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound TCP port (after ``start``)."""
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` as bound (after ``start``)."""
        return join_addr(self._bind_host, self._port)

    def start(self) -> TcpDoor:
        """Bind and start the I/O thread; raises RemotingError when the address cannot be bound."""
        if self._thread is not None:
            raise RemotingError("door already started")
        host = "" if self._bind_host in ("", "*", "0.0.0.0") else self._bind_host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            listener = socket.create_server((host, self._bind_port), family=family, backlog=1024)
        except OSError as exc:
            raise RemotingError(f"cannot bind {self._bind_host}:{self._bind_port}: {exc}") from exc
        listener.setblocking(False)
        self._port = listener.getsockname()[1]
        self._listener = listener
        selector = self._selector = selectors.DefaultSelector()
        selector.register(listener, _READ)
        selector.register(self._mailbox.fd, _READ)
        self.server.add_door(self)
        self._thread = threading.Thread(target=self._run, name=f"{self.server.name}-tcp-io", daemon=True)
        self._thread.start()
        self._log.info("tcp_door_listening", address=self.address)
        return self

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop accepting and reading, give answers still owed ``grace_s`` to be written, then close every
        connection (each reported to ``on_disconnect``) and join the I/O thread."""
        if self._thread is None or self._stop_deadline is not None:
            return
        self._stop_deadline = time.monotonic() + grace_s
        self._mailbox.wake()
        if threading.get_ident() == self._io_ident:
            return  # called from an inline handler: the loop ends after it returns
        self._thread.join(grace_s + 2.0)
        if self._thread.is_alive():
            self._log.warning("tcp_door_stop_timed_out", address=self.address)
        else:
            self._mailbox.close()

    # -- requests to clients (any thread) -------------------------------------------------------------

    def serves(self, identity: bytes) -> bool:
        """True while the client with ``identity`` is connected through this door."""
        return identity in self._conns

    def push(self, identity: bytes, cmd: RemotingCommand) -> None:
        """Send ``cmd`` as a oneway request over the connection of ``identity``; best effort (a peer not
        connected is skipped)."""
        cmd.flag = (cmd.flag | ONEWAY_FLAG) & ~RESPONSE_FLAG
        self._call(identity, cmd, None)

    def invoke_client(self, identity: bytes, cmd: RemotingCommand, timeout_ms: int = 3000) -> Future[RemotingCommand]:
        """Send ``cmd`` over the connection of ``identity`` and get the peer's response as a Future: it fails
        with RemotingTimeoutError after ``timeout_ms``, with RemotingSendRequestError when the peer is not
        connected or its connection closes first."""
        cmd.flag &= ~(ONEWAY_FLAG | RESPONSE_FLAG)
        fut: Future[RemotingCommand] = Future()
        self._call(identity, cmd, fut, timeout_ms)
        return fut

    def _call(self, identity: bytes, cmd: RemotingCommand, fut: Future[RemotingCommand] | None,
              timeout_ms: int = 0) -> None:
        conn = self._conns.get(identity)
        if conn is None or self._stop_deadline is not None:
            self._log.debug("tcp_peer_not_connected", peer=identity.decode("ascii", "replace"))
            settle(fut, None, RemotingSendRequestError(f"client {identity.decode('ascii', 'replace')} is not "
                                                       f"connected"))
            return
        cmd.opaque = next(self._opaque) & _OPAQUE_MASK
        try:
            frame = encode(cmd, conn.serialize_type)
        except WireFormatError as exc:
            self._log.warning("tcp_request_not_encodable", peer=conn.remote, error=str(exc))
            settle(fut, None, RemotingSendRequestError(f"cannot encode request: {exc}"))
            return
        entry = None
        if fut is not None:
            entry = PendingRequest(cmd.opaque, identity, timeout_ms, time.monotonic() + timeout_ms / 1000.0, fut)
        # Through the I/O thread, which owns the pending table: the entry is there before the answer can be.
        self._mailbox.put((conn, frame, entry))

    # -- writing (any thread) ---------------------------------------------------------------------------

    def _answer(self, conn: _Connection, response: RemotingCommand, serialize_type: SerializeType) -> None:
        """Write ``response`` (opaque and flag filled in) as the answer to one of ``conn``'s requests."""
        try:
            frame = encode(response, serialize_type)
        except WireFormatError as exc:
            frame = encode(RemotingCommand(ResponseCode.SYSTEM_ERROR, response.opaque, RESPONSE_FLAG,
                                           f"cannot encode response: {exc}"), serialize_type)
        self._write(conn, frame, answer=True)

    def _write(self, conn: _Connection, frame: bytes, answer: bool = False) -> None:
        """Write one whole frame to ``conn``: into the socket as far as it takes it, the rest buffered for the
        I/O thread. Condemns a connection whose peer leaves too much unread, or whose socket fails."""
        look = False
        with conn.lock:
            if answer:
                conn.owed -= 1
            if not conn.open:
                return
            out = conn.out
            if out:
                # Bytes already wait: this frame goes behind them, whole, unless the peer has left more than
                # the bound unread (one frame may always be buffered, however large).
                if len(out) > self.max_write_buffer:
                    conn.open = False
                    conn.reason = f"the peer leaves over {self.max_write_buffer} bytes unread"
                    look = True
                else:
                    out += frame
            else:
                sent = _send_some(conn, frame)
                if not conn.open:
                    look = True
                elif sent < len(frame):
                    out += memoryview(frame)[sent:]
                    look = True
        if look:
            if threading.get_ident() == self._io_ident:
                self._look_at(conn)
            else:
                self._mailbox.put((conn, None, None))

    # -- I/O thread -------------------------------------------------------------------------------------

    def _run(self) -> None:
        self._io_ident = threading.get_ident()
        server = self.server
        selector = self._selector
        listener = self._listener
        assert selector is not None and listener is not None
        mbfd = self._mailbox.fd
        next_scan = time.monotonic() + _SCAN_INTERVAL
        try:
            while True:
                if self._stop_deadline is not None:
                    if not self._stopping:
                        self._begin_stop(selector, listener)
                    if self._stopped():
                        break
                events = selector.select(0)
                if not events:
                    self._backlog_since = None
                    events = selector.select(_SCAN_INTERVAL)
                if events and self._backlog_since is None:
                    self._backlog_since = time.monotonic()
                for key, mask in events:
                    conn = key.data
                    if conn is not None:
                        if conn.closed:
                            continue
                        if mask & _WRITE:
                            self._flush(conn)
                        if mask & _READ and not conn.closed and not self._stopping:
                            self._read(conn)
                    elif key.fd == mbfd:
                        self._drain_mailbox()
                    else:
                        self._accept(listener, selector)
                if events:
                    server.run_after_reads()
                now = time.monotonic()
                if now >= next_scan:
                    next_scan = now + _SCAN_INTERVAL
                    self._pending.expire(now, self._expire_call)
        except Exception:  # pragma: no cover - a bug here must not go unseen
            self._log.exception("tcp_door_loop_crashed")
        finally:
            self._drain_mailbox()
            for conn in list(self._conns.values()):
                self._close(conn, "the door stopped")
            for entry in self._pending.drain():
                settle(entry.future, None, RemotingSendRequestError("server stopped"))
            if not self._stopping:
                selector.unregister(listener)
                listener.close()
            selector.close()
            self.server.remove_door(self)
            self._log.info("tcp_door_stopped", address=self.address)

    def _begin_stop(self, selector: selectors.BaseSelector, listener: socket.socket) -> None:
        """Accept and read no more; keep writing what is owed."""
        self._stopping = True
        selector.unregister(listener)
        listener.close()
        for conn in list(self._conns.values()):
            self._set_events(conn, _WRITE if conn.out else 0)

    def _stopped(self) -> bool:
        """True once every answer owed was written (or the grace period is over)."""
        deadline = self._stop_deadline
        if deadline is not None and time.monotonic() >= deadline:
            return True
        if len(self._mailbox):
            return False
        return not any(conn.owed > 0 or conn.out for conn in self._conns.values() if conn.open)

    def _accept(self, listener: socket.socket, selector: selectors.BaseSelector) -> None:
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: the next wake-up tries again
                self._log.warning("tcp_accept_failed", error=str(exc))
                return
            sock.setblocking(False)
            # Answers are whole frames written at once: Nagle would only hold them back.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            remote = join_addr(addr[0], addr[1])
            identity = TCP_IDENTITY_PREFIX + remote.encode()
            conn = _Connection(sock, identity, remote, FrameDecoder(self.max_frame_size))
            old = self._conns.get(identity)
            if old is not None:  # the same address again: the old connection must be gone
                self._close(old, "its address connected again")
            self._conns[identity] = conn
            self._set_events(conn, _READ)
            self._log.debug("tcp_connection_accepted", peer=remote)

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(_RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"receive failed: {exc}")
            return
        if not data:
            if conn.decoder.buffered:
                # A frame cut short by the peer's close is bad input like any other: logged as one.
                self._log.warning("tcp_bad_frame", peer=conn.remote,
                                  error=f"closed by the peer {conn.decoder.buffered} bytes into a frame")
            self._close(conn, "closed by the peer")
            return
        try:
            decoded = conn.decoder.feed(data)
        except WireFormatError as exc:
            self._log.warning("tcp_bad_frame", peer=conn.remote, error=str(exc))
            self._close(conn, "bad frame")
            return
        if decoded:
            self._serve(conn, decoded)

    def _serve(self, conn: _Connection, decoded: list[Decoded]) -> None:
        server = self.server
        dispatch = self._dispatcher.dispatch
        now = time.monotonic()
        for cmd, wire in decoded:
            if cmd.flag & RESPONSE_FLAG:
                # Only the peer a request of ours went to may answer it.
                entry = self._pending.get(cmd.opaque)
                if entry is not None and entry.peer == conn.identity:
                    self._pending.pop(cmd.opaque)
                    settle(entry.future, cmd, None)
                continue
            conn.serialize_type = wire.serialize_type
            if not cmd.flag & ONEWAY_FLAG:
                with conn.lock:
                    conn.owed += 1
            dispatch(cmd, TcpRequestContext(server, cmd, now, self, conn, wire))

    def _flush(self, conn: _Connection) -> None:
        """Write what waits in ``conn``'s buffer, as far as the socket takes it."""
        with conn.lock:
            out = conn.out
            if conn.open and out:
                del out[:_send_some(conn, out)]
            done = not out
        if not conn.open:
            self._close(conn, conn.reason)
        elif done:
            self._set_events(conn, 0 if self._stopping else _READ)

    def _look_at(self, conn: _Connection) -> None:
        """A writer left bytes over or condemned ``conn``: watch it for writing, or close it."""
        if conn.closed:
            return
        if not conn.open:
            self._close(conn, conn.reason)
        elif conn.out:
            self._set_events(conn, _WRITE if self._stopping else _READ | _WRITE)

    def _drain_mailbox(self) -> None:
        for conn, frame, entry in self._mailbox.drain():
            if frame is None:
                self._look_at(conn)
                continue
            if conn.closed or not conn.open:
                settle(entry.future if entry is not None else None, None,
                       RemotingSendRequestError(f"client {conn.remote} is not connected"))
                continue
            if entry is not None:
                entry.sent = True
                self._pending.add(entry)
            self._write(conn, frame)

    def _backlogged_ms(self) -> float:
        if threading.get_ident() != self._io_ident:
            return float("inf")
        since = self._backlog_since
        return 0.0 if since is None else (time.monotonic() - since) * 1000.0

    def _set_events(self, conn: _Connection, events: int) -> None:
        selector = self._selector
        if selector is None or conn.events == events:
            return
        if not conn.events:
            selector.register(conn.sock, events, conn)
        elif not events:
            selector.unregister(conn.sock)
        else:
            selector.modify(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: _Connection, reason: str) -> None:
        """Close ``conn``, fail the requests of ours it had not answered, and report its peer gone."""
        if conn.closed:
            return
        with conn.lock:
            conn.open = False
            conn.closed = True
            conn.out.clear()
        self._set_events(conn, 0)
        conn.sock.close()
        if self._conns.get(conn.identity) is conn:
            del self._conns[conn.identity]
        if len(self._pending):
            for entry in self._pending.pop_where(lambda e: e.peer == conn.identity):
                settle(entry.future, None,
                       RemotingSendRequestError(f"the connection of client {conn.remote} closed ({reason})"))
        self._log.debug("tcp_connection_closed", peer=conn.remote, reason=reason)
        self.server.notify_disconnected(conn.identity)

    def _expire_call(self, entry: PendingRequest) -> None:
        peer = entry.peer.decode("ascii", "replace") if isinstance(entry.peer, bytes) else str(entry.peer)
        settle(entry.future, None,
               RemotingTimeoutError(f"no response from client {peer} within {entry.timeout_ms} ms"))
