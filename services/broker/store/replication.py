"""A master's view of its slave: how far the slave has the commitlog, and waiting for it (SYNC_MASTER).

RocketMQ's HAService and GroupTransferService, master side. The ha service
(``rocketmesh.ha``) pulls commitlog bytes for a slave; each pull names the
offset the slave has everything below, which is the slave's acknowledgement.
A put under SYNC_MASTER waits here until the slave has acknowledged its end:
one acknowledgement releases every put below it, so many producers' sends
share one replication round.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Optional

from rocketmesh.broker.store.results import PutMessageStatus


@dataclass(frozen=True, slots=True)
class SlaveProgress:
    """What the master knows of its slave (for broker-status and cluster-list)."""

    address: str
    #: The slave has the master's commitlog below this offset.
    acked_offset: int
    #: Seconds since the ha service last asked for bytes for this slave.
    silent_s: float
    connected: bool


class ReplicaTracker:
    """Acknowledged offsets of the slaves that replicate from this master."""

    def __init__(self, housekeeping_ms: int, max_gap_not_in_sync: int) -> None:
        #: A slave whose ha service has not asked for bytes this long counts as gone.
        self.housekeeping_s = housekeeping_ms / 1000
        self.max_gap = max_gap_not_in_sync
        self._cond = threading.Condition()
        #: slave address -> (acked offset, monotonic time of its last request)
        self._slaves: dict[str, tuple[int, float]] = {}
        self._acked = 0

    def ack(self, slave: str, offset: int) -> None:
        """The ha service of ``slave`` asked for bytes from ``offset``: the slave has all below it."""
        now = time.monotonic()
        with self._cond:
            self._slaves[slave] = (offset, now)
            best = max(o for o, seen in self._slaves.values() if now - seen < self.housekeeping_s)
            if best > self._acked:
                self._acked = best
                self._cond.notify_all()

    def gone(self, slave: str) -> None:
        """``slave``'s ha service disconnected: it acknowledges nothing until it asks again."""
        with self._cond:
            self._slaves.pop(slave, None)
            self._acked = max((o for o, _ in self._slaves.values()), default=0)

    def in_sync(self, master_end: int) -> bool:
        """True when a connected slave is within haMaxGapNotInSync of ``master_end``."""
        now = time.monotonic()
        with self._cond:
            return any(now - seen < self.housekeeping_s and master_end - offset <= self.max_gap
                       for offset, seen in self._slaves.values())

    def wait_acked(self, offset: int, timeout_s: float) -> PutMessageStatus:
        """Wait until a slave has everything below ``offset``: PUT_OK, or FLUSH_SLAVE_TIMEOUT."""
        if self._acked >= offset:
            return PutMessageStatus.PUT_OK
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._acked < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
                self._cond.wait(left)
        return PutMessageStatus.PUT_OK

    def progress(self) -> list[SlaveProgress]:
        now = time.monotonic()
        with self._cond:
            return [SlaveProgress(addr, offset, round(now - seen, 3), now - seen < self.housekeeping_s)
                    for addr, (offset, seen) in sorted(self._slaves.items())]

    @property
    def acked_offset(self) -> Optional[int]:
        """The best acknowledged offset of a connected slave, None without one."""
        connected = [p.acked_offset for p in self.progress() if p.connected]
        return max(connected) if connected else None
