"""LoopSocket: an event loop's own DEALER to one server, for requests awaited on that loop.

A request awaited through the client's I/O thread crosses two threads: the loop hands it to the I/O
thread, and the I/O thread hands the answer back to the loop. A LoopSocket saves both, as the calling
thread's own socket does for ``invoke_sync``: the loop's thread sends on it (the requests made in one
turn of the loop together, at the end of the turn), and reads the answers itself when the socket's
descriptor turns readable (``loop.add_reader``).

ZeroMQ's descriptor is edge-triggered and tells only that the socket's state may have changed: the
reader takes what is waiting (a few messages a turn of the loop, then it comes back in the next turn
for the rest), and a send (which may consume the edge) is followed by a look for answers that came
meanwhile. Deadlines and closed connections are checked by one timer a socket, every
100 ms while anything waits, as the I/O thread scans its requests.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable

import zmq

from rocketmesh.remoting.errors import (
    ProtocolError,
    RemotingConnectError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from rocketmesh.remoting.protocol.command import RESPONSE_FLAG, RemotingCommand, decode
from rocketmesh.remoting.protocol.frames import readable, recv_frames, send_frames
from rocketmesh.runtime.log import get_logger

#: How often deadlines and closed connections are checked while requests wait (s).
SCAN_INTERVAL_S = 0.1
#: How long a send waits before it tries again while there is no connection yet (ZMQ_IMMEDIATE) (s).
_CONNECT_RETRY_S = 0.005
#: Messages read in one turn of the loop: each answer resumes a task (whose next request is sent in the
#: next turn), so a burst of answers is spread over turns instead of holding the loop for all of them.
_READ_BATCH = 8

log = get_logger("remoting", component="loop_socket")


class LoopSocket:
    """One DEALER used only on ``loop``'s thread: :meth:`call` sends a request and awaits its answer.

    ``closes()`` counts how often the client's own connection to ``addr`` closed (the I/O thread watches
    it): a request waiting across such a close fails at once, since a dead server's answer cannot come.
    ``on_push(addr, cmd)`` takes a request the server sent on this socket.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, addr: str, sock: zmq.Socket, max_header_size: int,
                 closes: Callable[[], int], on_push: Callable[[str, RemotingCommand], None],
                 connect_hint: str = "") -> None:
        self.loop = loop
        self.addr = addr
        self.sock = sock
        self.closed = False
        self._max_header = max_header_size
        self._closes = closes
        self._on_push = on_push
        self._connect_hint = connect_hint
        #: opaque -> (future, deadline, timeout ms, closes when it left; None while in the outbox)
        self._waiting: dict[int, tuple[asyncio.Future[RemotingCommand], float, int, int | None]] = {}
        #: (opaque, frames) of the requests not sent yet, in the order they were made
        self._outbox: collections.deque[tuple[int, list]] = collections.deque()
        self._flushing: asyncio.Handle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._read_again: asyncio.Handle | None = None
        self._fd: int = sock.getsockopt(zmq.FD)  # type: ignore[assignment]  # an int option (pyzmq types every option int | bytes)
        loop.add_reader(self._fd, self._read)

    @property
    def waiting(self) -> int:
        """Requests made and not answered, failed or given up yet."""
        return len(self._waiting)

    async def call(self, frames: list, opaque: int, timeout_ms: int) -> RemotingCommand:
        """Send the encoded request ``frames`` (whose opaque is ``opaque``) and await its answer; raises
        RemotingConnectError (no connection within ``timeout_ms``, or it closed while waiting),
        RemotingTimeoutError or RemotingSendRequestError. Loop thread only.

        The request leaves when the loop next runs :meth:`_flush`, with every other request made in the
        same turn: ZeroMQ wakes its I/O thread once for all of them, and no task pays for the others'."""
        if self.closed:
            raise RemotingSendRequestError("client is closed")
        loop = self.loop
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        self._waiting[opaque] = (fut, time.monotonic() + timeout_ms / 1000.0, timeout_ms, None)
        self._outbox.append((opaque, frames))
        if self._flushing is None:
            self._flushing = loop.call_soon(self._flush)
        if self._timer is None:
            self._timer = loop.call_later(SCAN_INTERVAL_S, self._scan)
        try:
            return await fut
        finally:
            self._waiting.pop(opaque, None)

    def _flush(self) -> None:
        """Send what waits in the outbox, in order; without a connection yet (ZMQ_IMMEDIATE), try again
        shortly (the scan fails what is still unsent at its deadline)."""
        self._flushing = None
        outbox = self._outbox
        waiting = self._waiting
        sock = self.sock
        while outbox and not self.closed:
            opaque, frames = outbox[0]
            entry = waiting.get(opaque)
            if entry is None or entry[0].done():  # given up before it left
                outbox.popleft()
                continue
            try:
                send_frames(sock, frames)
            except zmq.Again:
                self._flushing = self.loop.call_later(_CONNECT_RETRY_S, self._flush)
                break
            except zmq.ZMQError as exc:
                outbox.popleft()
                waiting.pop(opaque, None)
                entry[0].set_exception(RemotingSendRequestError(f"send to {self.addr} failed: {exc}"))
                continue
            outbox.popleft()
            # From now on a closed connection means its answer cannot come (not one closed before it left).
            waiting[opaque] = (entry[0], entry[1], entry[2], self._closes())
        if self._read_again is None and not self.closed and readable(sock):
            # A send may have taken the descriptor's edge for an answer already queued.
            self._read_again = self.loop.call_soon(self._read)

    def _read(self) -> None:
        """Take up to ``_READ_BATCH`` messages waiting on the socket (and come back in the next turn of the
        loop for more): answers complete their futures, requests are pushes."""
        self._read_again = None
        sock = self.sock
        waiting = self._waiting
        for _ in range(_READ_BATCH):
            if self.closed or not readable(sock):
                return
            try:
                reply = recv_frames(sock)
            except zmq.Again:
                return
            try:
                cmd = decode(reply, self._max_header)
            except ProtocolError as exc:
                log.warning("malformed_message", addr=self.addr, error=str(exc))
                continue
            if cmd.flag & RESPONSE_FLAG:
                entry = waiting.pop(cmd.opaque, None)
                if entry is not None and not entry[0].done():
                    entry[0].set_result(cmd)
                # else: the late answer of a request that timed out or was cancelled
                continue
            self._on_push(self.addr, cmd)
        if not self.closed and readable(sock):
            self._read_again = self.loop.call_soon(self._read)

    def _scan(self) -> None:
        """Fail the requests past their deadline, and those whose connection closed since they were sent."""
        self._timer = None
        if self.closed:
            return
        now = time.monotonic()
        closes = self._closes()
        for opaque, (fut, deadline, timeout_ms, closes_then) in list(self._waiting.items()):
            if fut.done():
                self._waiting.pop(opaque, None)
                continue
            if now < deadline and closes_then in (None, closes):
                continue  # not due; a connection that closed before it left is not its business
            if closes_then is None:
                error: Exception = RemotingConnectError(
                    f"no connection to {self.addr} within {timeout_ms} ms{self._connect_hint}")
            elif closes != closes_then:
                error = RemotingConnectError(
                    f"the connection to {self.addr} closed before the response (opaque {opaque}); "
                    "the server went away or restarted")
            else:
                error = RemotingTimeoutError(f"no response from {self.addr} within {timeout_ms} ms (opaque {opaque})")
            self._waiting.pop(opaque, None)
            fut.set_exception(error)
        if self._waiting:
            self._timer = self.loop.call_later(SCAN_INTERVAL_S, self._scan)

    def close(self) -> None:
        """Fail what waits with RemotingSendRequestError and close the socket. Loop thread only."""
        if self.closed:
            return
        self.closed = True
        for handle in (self._timer, self._read_again, self._flushing):
            if handle is not None:
                handle.cancel()
        self._timer = self._read_again = self._flushing = None
        try:
            self.loop.remove_reader(self._fd)
        except (RuntimeError, ValueError, OSError):  # the loop is closed already
            pass
        for fut, _, _, _ in self._waiting.values():
            if not fut.done():
                fut.set_exception(RemotingSendRequestError("client is closed"))
        self._waiting.clear()
        self._outbox.clear()
        self.sock.close(0)
