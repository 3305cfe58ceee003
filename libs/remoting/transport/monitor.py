"""ZeroMQ socket monitors: which connections of a socket opened and closed.

Both ends use them to notice a lost peer at once, as RocketMQ notices a
closed channel: the server to drop a client whose connection closed, the
client to fail requests whose connection closed before their answer came.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator

import zmq

from rocketmesh.remoting.protocol.frames import readable, recv_frames

#: ZeroMQ's v1 monitor event frame: uint16 event, uint32 value (a socket descriptor for the events we ask
#: for), native order.
_EVENT_FRAME = struct.Struct("=HI")
EVENT_ACCEPTED = int(zmq.EVENT_ACCEPTED)
EVENT_CONNECTED = int(zmq.EVENT_CONNECTED)
EVENT_DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
_seq = itertools.count(1)


def open_monitor(ctx: zmq.Context, sock: zmq.Socket, events: int) -> zmq.Socket:
    """A PAIR socket receiving ``sock``'s ``events``; raises zmq.ZMQError where ZeroMQ cannot monitor."""
    addr = f"inproc://rocketmesh-monitor-{os.getpid()}-{next(_seq)}"
    monitor = ctx.socket(zmq.PAIR)
    # Unbounded: ZeroMQ's I/O thread sends events blocking, so a full pipe would stall every socket.
    monitor.setsockopt(zmq.RCVHWM, 0)
    monitor.setsockopt(zmq.LINGER, 0)
    try:
        sock.monitor(addr, events)
        # Connected before the bind: no event can be sent while nobody is there to read it.
        monitor.connect(addr)
    except zmq.ZMQError:
        monitor.close(0)
        raise
    return monitor


def close_monitor(sock: zmq.Socket, monitor: zmq.Socket | None) -> None:
    """Stop monitoring ``sock`` and close ``monitor`` (either may already be gone)."""
    if monitor is None:
        return
    try:
        sock.disable_monitor()
    except zmq.ZMQError:
        pass
    monitor.close(0)


def read_events(monitor: zmq.Socket) -> Iterator[tuple[int, int]]:
    """The ``(event, socket descriptor)`` pairs waiting on ``monitor``, without blocking."""
    while readable(monitor):
        try:
            frames = recv_frames(monitor)
        except zmq.Again:
            return
        if len(frames[0]) >= _EVENT_FRAME.size:
            yield _EVENT_FRAME.unpack_from(frames[0])
