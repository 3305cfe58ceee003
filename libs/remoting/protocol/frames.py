"""Non-blocking multipart send and receive, minus pyzmq's per-call Python overhead.

``Socket.send_multipart`` type-checks every part and builds its flags with
enum arithmetic; on the hot path that costs more than the send itself. These
helpers call pyzmq's low-level (Cython) socket methods with plain int flags.
Semantics are the same: a multipart message is queued whole or not at all
(ZeroMQ checks the high-water mark on the first part only), and
``zmq.Again`` means "nothing to read" or "cannot queue now".
"""

from __future__ import annotations

import zmq
from zmq.backend import Socket as _LowLevelSocket

_send = _LowLevelSocket.send
_recv = _LowLevelSocket.recv
_get = _LowLevelSocket.get

NOBLOCK = int(zmq.NOBLOCK)
_MORE_NOBLOCK = int(zmq.SNDMORE) | NOBLOCK
_RCVMORE = int(zmq.RCVMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)


def send_frames(sock: zmq.Socket, frames: list) -> None:
    """Queue ``frames`` as one message without blocking (raises zmq.Again / ZMQError)."""
    last = len(frames) - 1
    for i in range(last):
        _send(sock, frames[i], _MORE_NOBLOCK)
    _send(sock, frames[last], NOBLOCK)


def send_routed(sock: zmq.Socket, route: bytes, frames: list) -> None:
    """Queue ``[route, *frames]`` on a ROUTER socket without blocking."""
    _send(sock, route, _MORE_NOBLOCK)
    send_frames(sock, frames)


def recv_frames(sock: zmq.Socket) -> list[bytes]:
    """Read one whole message without blocking (raises zmq.Again when none is queued)."""
    frames = [_recv(sock, NOBLOCK)]
    while _get(sock, _RCVMORE):
        frames.append(_recv(sock, NOBLOCK))
    return frames


def recv_routed(sock: zmq.Socket) -> tuple[zmq.Frame, list[bytes]]:
    """Read one message from a ROUTER: the route frame (a zmq.Frame, for its metadata) and the rest."""
    first = _recv(sock, NOBLOCK, False)
    frames: list[bytes] = []
    while _get(sock, _RCVMORE):
        frames.append(_recv(sock, NOBLOCK))
    return first, frames


def readable(sock: zmq.Socket) -> bool:
    """A whole message is waiting: cheaper than a read that ends in zmq.Again (an exception per drain)."""
    # EVENTS is an int option: pyzmq types get() as int | bytes for every option.
    return bool(_get(sock, _EVENTS) & _POLLIN)  # type: ignore[operator]
