"""The commitlog's written end, shared between the broker and its dispatch worker."""

from __future__ import annotations

import mmap
import os
import struct


class PositionCell:
    """An 8-byte shared memory cell (a memfd both processes map): the commitlog's written end."""

    _Q = struct.Struct("q")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.mm = mmap.mmap(fd, 8)

    @classmethod
    def create(cls) -> "PositionCell":
        fd = os.memfd_create("rocketmesh-commit-position")
        os.ftruncate(fd, 8)
        return cls(fd)

    def __getitem__(self, _i: int) -> int:
        return self._Q.unpack_from(self.mm, 0)[0]

    def __setitem__(self, _i: int, value: int) -> None:
        self._Q.pack_into(self.mm, 0, value)

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)
