"""The store checkpoint: how far the commitlog, consume queues and index are safely on disk.

Layout (big-endian longs): physicMsgTimestamp @0, logicsMsgTimestamp @8 and
indexMsgTimestamp @16 as in RocketMQ, then dispatchedPhyOffset @24 (commitlog
offset up to which consume queues and index are built and fsynced) and
physicFlushedOffset @32 (commitlog offset fsynced at the last flush).
"""

from __future__ import annotations

import os
import struct
import threading

_LAYOUT = struct.Struct(">qqqqq")
_FILE_SIZE = 4096


class StoreCheckpoint:
    """Read at start-up; rewritten whole (pwrite + fdatasync) by :meth:`flush`.

    The commitlog's flusher sets the physic fields, the consume queues' flusher the
    logics ones; each then flushes, and a flush writes every field's current value.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.dispatched_phy_offset = 0
        self.physic_flushed_offset = 0
        self._lock = threading.Lock()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        raw = os.pread(self._fd, _LAYOUT.size, 0)
        if len(raw) == _LAYOUT.size:
            (self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
             self.dispatched_phy_offset, self.physic_flushed_offset) = _LAYOUT.unpack(raw)
        if os.fstat(self._fd).st_size < _FILE_SIZE:
            os.ftruncate(self._fd, _FILE_SIZE)

    def flush(self) -> None:
        """Write every field and fdatasync."""
        with self._lock:
            if self._fd < 0:
                return
            os.pwrite(self._fd, _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp,
                                             self.index_msg_timestamp, self.dispatched_phy_offset,
                                             self.physic_flushed_offset), 0)
            os.fdatasync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
