"""The commitlog's written end, shared between the broker and its dispatch worker.

Two 8-byte slots in a memfd both processes map: the written end, and a flag
the worker raises before it sleeps. A put that finds the flag raised signals
an eventfd, so an idle worker wakes at once instead of polling; a busy worker
costs the put nothing more than the store of the end.
"""

from __future__ import annotations

import mmap
import os
import select
import struct

_Q = struct.Struct("q")
_END, _ASLEEP = 0, 8


class PositionCell:
    """See the module docstring. ``cell[0]`` reads or sets the end without waking anyone."""

    def __init__(self, fd: int, wake_fd: int) -> None:
        self.fd = fd
        self.wake_fd = wake_fd
        self.mm = mmap.mmap(fd, 16)

    @classmethod
    def create(cls) -> PositionCell:
        fd = os.memfd_create("rocketmesh-commit-position")
        os.ftruncate(fd, 16)
        return cls(fd, os.eventfd(0, os.EFD_NONBLOCK))

    def __getitem__(self, _i: int) -> int:
        return _Q.unpack_from(self.mm, _END)[0]

    def __setitem__(self, _i: int, value: int) -> None:
        _Q.pack_into(self.mm, _END, value)

    def publish(self, end: int) -> None:
        """Broker: the commitlog now ends at ``end``; wake the worker if it sleeps."""
        mm = self.mm
        _Q.pack_into(mm, _END, end)
        if _Q.unpack_from(mm, _ASLEEP)[0]:
            _Q.pack_into(mm, _ASLEEP, 0)
            os.eventfd_write(self.wake_fd, 1)

    def wait_beyond(self, offset: int, other_fd: int, timeout_s: float) -> None:
        """Worker: sleep until the end passes ``offset``, ``other_fd`` is readable, or ``timeout_s``.

        The timeout bounds a wake-up lost to the two processes' stores and loads crossing.
        """
        mm = self.mm
        _Q.pack_into(mm, _ASLEEP, 1)
        if _Q.unpack_from(mm, _END)[0] <= offset:
            select.select([self.wake_fd, other_fd], [], [], timeout_s)
        _Q.pack_into(mm, _ASLEEP, 0)
        try:
            os.eventfd_read(self.wake_fd)
        except BlockingIOError:
            pass

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)
        os.close(self.wake_fd)
