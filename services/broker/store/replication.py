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
from collections.abc import Callable
from dataclasses import dataclass

from rocketmesh.broker.store.results import PutMessageStatus
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="replication")


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
    """Acknowledged offsets of the slaves that replicate from this master, and the puts waiting for them."""

    def __init__(self, housekeeping_ms: int, max_gap_not_in_sync: int) -> None:
        #: A slave whose ha service has not asked for bytes this long counts as gone.
        self.housekeeping_s = housekeeping_ms / 1000
        self.max_gap = max_gap_not_in_sync
        self._cond = threading.Condition()
        #: slave address -> (acked offset, monotonic time of its last request)
        self._slaves: dict[str, tuple[int, float]] = {}
        self._acked = 0
        #: (offset, deadline, callback), offsets growing with each put.
        self._waiters: list[tuple[int, float, Callable[[PutMessageStatus], None]]] = []
        self._timer: threading.Thread | None = None

    def ack(self, slave: str, offset: int) -> None:
        """The ha service of ``slave`` asked for bytes from ``offset``: the slave has all below it."""
        now = time.monotonic()
        with self._cond:
            self._slaves[slave] = (offset, now)
            best = max(o for o, seen in self._slaves.values() if now - seen < self.housekeeping_s)
            if best <= self._acked:
                return
            self._acked = best
            done = [w for w in self._waiters if w[0] <= best]
            if done:
                self._waiters = [w for w in self._waiters if w[0] > best]
        for _, _, callback in done:
            _call(callback, PutMessageStatus.PUT_OK)

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

    def when_acked(self, offset: int, callback: Callable[[PutMessageStatus], None], timeout_s: float) -> None:
        """Call ``callback(PUT_OK)`` once a slave has everything below ``offset``, or
        ``callback(FLUSH_SLAVE_TIMEOUT)`` after ``timeout_s``: one acknowledgement releases every put
        below it."""
        with self._cond:
            if self._acked < offset:
                deadline = time.monotonic() + timeout_s
                # The timer sleeps until the earliest deadline: wake it only for an earlier one (not for
                # every put: that would be a thread wake-up per send).
                earlier = not self._waiters or deadline < self._waiters[0][1]
                self._waiters.append((offset, deadline, callback))
                if self._timer is None:
                    self._timer = threading.Thread(target=self._expire_loop, name="HaGroupTransfer", daemon=True)
                    self._timer.start()
                elif earlier:
                    self._cond.notify_all()
                return
        _call(callback, PutMessageStatus.PUT_OK)

    def _expire_loop(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                expired = [w for w in self._waiters if w[1] <= now]
                if expired:
                    self._waiters = [w for w in self._waiters if w[1] > now]
                else:
                    self._cond.wait(min((w[1] for w in self._waiters), default=now + 1.0) - now)
                    continue
            for _, _, callback in expired:
                _call(callback, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    def progress(self) -> list[SlaveProgress]:
        now = time.monotonic()
        with self._cond:
            return [SlaveProgress(addr, offset, round(now - seen, 3), now - seen < self.housekeeping_s)
                    for addr, (offset, seen) in sorted(self._slaves.items())]


def _call(callback: Callable[[PutMessageStatus], None], status: PutMessageStatus) -> None:
    try:
        callback(status)
    except Exception:  # noqa: BLE001 - one waiter must not stop the others
        log.exception("replica_callback_failed")
