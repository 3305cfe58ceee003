"""Queue locks for orderly consumers (RocketMQ's RebalanceLockManager).

An orderly consumer may only consume a queue while it holds that queue's lock
on the broker, so that during a rebalance two clients never process the same
queue at once. A lock lives ``lock_max_live_ms`` (RocketMQ's
``rocketmq.broker.rebalance.lockMaxLiveTime``, 60 s) after it was last taken
or renewed; clients renew theirs every 20 s by locking again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rocketmesh.model.message import MessageQueue
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="rebalance_lock")

#: RocketMQ's default REBALANCE_LOCK_MAX_LIVE_TIME (ms).
DEFAULT_LOCK_MAX_LIVE_MS = 60_000


@dataclass
class LockEntry:
    """Who holds one queue's lock, and when they last took or renewed it (clock seconds)."""

    client_id: str
    last_update: float


class RebalanceLockManager:
    """Per group, which client holds each queue; thread-safe.

    ``clock`` returns seconds (``time.monotonic`` by default; tests pass a fake).
    A lock is expired once more than ``lock_max_live_ms`` passed since its last
    update; an expired lock is free for anyone.
    """

    def __init__(self, lock_max_live_ms: int = DEFAULT_LOCK_MAX_LIVE_MS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lock_max_live_s = lock_max_live_ms / 1000
        self.clock = clock
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}
        self._lock = threading.Lock()

    def _expired(self, entry: LockEntry, now: float) -> bool:
        return now - entry.last_update > self.lock_max_live_s

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock what can be locked of ``mqs`` for ``client_id``; returns the queues it now holds.

        A queue is granted when it is free, when its lock expired, or when
        ``client_id`` already holds it (the lock is then renewed). Queues held
        by another live client are left alone and missing from the answer.
        """
        if not client_id:
            raise ValueError("client_id is empty")
        now = self.clock()
        locked: set[MessageQueue] = set()
        taken: list[tuple[MessageQueue, str | None]] = []  # (queue, the holder whose lock had expired)
        refused: list[tuple[MessageQueue, str]] = []
        with self._lock:
            entries = self._table.setdefault(group, {})
            for mq in mqs:
                entry = entries.get(mq)
                if entry is None:
                    entries[mq] = LockEntry(client_id, now)
                    taken.append((mq, None))
                elif entry.client_id == client_id and not self._expired(entry, now):
                    entry.last_update = now  # a renewal: not news
                elif entry.client_id == client_id or self._expired(entry, now):
                    taken.append((mq, entry.client_id))
                    entry.client_id = client_id
                    entry.last_update = now
                else:
                    refused.append((mq, entry.client_id))
                    continue
                locked.add(mq)
            if not entries:
                del self._table[group]
        for mq, expired_holder in taken:
            if expired_holder is not None:
                log.info("queue_lock_expired", group=group, mq=str(mq), client_id=expired_holder)
            log.info("queue_locked", group=group, mq=str(mq), client_id=client_id)
        for mq, holder in refused:
            log.info("lock_held_by_other", group=group, mq=str(mq), holder=holder, client_id=client_id)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release those of ``mqs`` that ``client_id`` holds; locks of other clients stay."""
        with self._lock:
            entries = self._table.get(group)
            if entries is None:
                return
            released = []
            for mq in mqs:
                entry = entries.get(mq)
                if entry is not None and entry.client_id == client_id:
                    del entries[mq]
                    released.append(mq)
            if not entries:
                del self._table[group]
        for mq in released:
            log.info("queue_unlocked", group=group, mq=str(mq), client_id=client_id)

    def unlock_all(self, group: str, client_id: str) -> int:
        """Release every lock ``client_id`` holds in ``group`` (it left); returns how many."""
        with self._lock:
            entries = self._table.get(group)
            if entries is None:
                return 0
            mine = [mq for mq, e in entries.items() if e.client_id == client_id]
            for mq in mine:
                del entries[mq]
            if not entries:
                del self._table[group]
        for mq in mine:
            log.info("queue_unlocked", group=group, mq=str(mq), client_id=client_id, reason="client_gone")
        return len(mine)

    def is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        """Whether ``client_id`` holds a live lock on ``mq``; does not renew it."""
        return self.locked_by(group, mq) == client_id

    def locked_by(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding a live lock on ``mq`` in ``group``, or None (free or expired)."""
        now = self.clock()
        with self._lock:
            entry = self._table.get(group, {}).get(mq)
            if entry is None or self._expired(entry, now):
                return None
            return entry.client_id

    def locked_queues(self, group: str, client_id: str) -> set[MessageQueue]:
        """The queues ``client_id`` holds a live lock on in ``group``."""
        now = self.clock()
        with self._lock:
            return {mq for mq, e in self._table.get(group, {}).items()
                    if e.client_id == client_id and not self._expired(e, now)}
