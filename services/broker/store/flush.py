"""Commitlog flush services: group commit for SYNC_FLUSH, a periodic flusher for ASYNC_FLUSH.

(Consume queues and index are flushed by the dispatch worker, which owns them.)"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.service_thread import ServiceThread
from rocketmesh.broker.store.mapped_file import MappedFileQueue
from rocketmesh.broker.store.results import PutMessageStatus

log = get_logger("broker", component="flush")


#: Told how a wait for durability ended: PUT_OK, or the timeout status of the stage that timed out.
DurableCallback = Callable[[PutMessageStatus], None]


class GroupCommitService:
    """SYNC_FLUSH: puts are answered once the commitlog is fsynced past their end.

    One flusher thread serves every waiter: while an fdatasync runs (without the
    GIL) more puts append and register, and the next fdatasync covers them all.
    Waiters register a callback (:meth:`when_flushed`), so the thread that put
    them goes on putting while the flush runs: puts and flushes overlap.
    """

    def __init__(self, queue: MappedFileQueue, timeout_ms: int,
                 on_flushed: Optional[Callable[[int], None]] = None) -> None:
        self.queue = queue
        #: Told the flushed offset at most once a second (the checkpoint).
        self.on_flushed = on_flushed
        self._last_report = 0.0
        self.timeout_s = timeout_ms / 1000
        self._cond = threading.Condition()
        self._requested = 0
        #: (offset, deadline, callback) in the order they came; offsets grow with each put.
        self._waiters: list[tuple[int, float, DurableCallback]] = []
        self._running = False
        self._thread: threading.Thread | None = None
        self.flush_count = 0
        #: Told how long each flush round that found something to flush took (ms), for metrics.
        self.flush_observer: Optional[Callable[[float], None]] = None

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="GroupCommitService", daemon=True)
        self._thread.start()

    def when_flushed(self, offset: int, callback: DurableCallback) -> None:
        """Call ``callback(PUT_OK)`` once ``offset`` is on disk, or ``callback(FLUSH_DISK_TIMEOUT)`` past
        syncFlushTimeout (on the flusher thread; at once when it is on disk already)."""
        if self.queue.flushed_where >= offset:
            callback(PutMessageStatus.PUT_OK)
            return
        with self._cond:
            if self._running:
                self._waiters.append((offset, time.monotonic() + self.timeout_s, callback))
                if offset > self._requested:
                    self._requested = offset
                    self._cond.notify_all()
                return
        callback(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def _run(self) -> None:
        while self._running:
            with self._cond:
                while self._running and self._requested <= self.queue.flushed_where:
                    self._cond.wait(0.01)
                target = self._requested
            started = time.monotonic()
            while self.queue.flushed_where < target:
                if not self.queue.flush(0):
                    break
            self.flush_count += 1
            if self.flush_observer is not None:
                self.flush_observer((time.monotonic() - started) * 1000.0)
            self._settle()
            now = time.monotonic()
            if self.on_flushed is not None and now - self._last_report >= 1.0:
                self._last_report = now
                self.on_flushed(self.queue.flushed_where)
        self._settle()

    def _settle(self) -> None:
        """Call back the waiters that are on disk now (FLUSH_DISK_TIMEOUT if that took past their
        deadline), and those whose time ran out."""
        flushed, now = self.queue.flushed_where, time.monotonic()
        with self._cond:
            done = [(w, PutMessageStatus.PUT_OK if w[1] > now else PutMessageStatus.FLUSH_DISK_TIMEOUT)
                    for w in self._waiters if w[0] <= flushed or w[1] <= now or not self._running]
            if done:
                self._waiters = [w for w in self._waiters if w[0] > flushed and w[1] > now and self._running]
        for (_, _, callback), status in done:
            try:
                callback(status)
            except Exception:  # noqa: BLE001 - one waiter must not stop the flusher
                log.exception("flush_callback_failed")

    def stop(self) -> None:
        self.queue.flush_all()
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)


class FlushRealTimeService(ServiceThread):
    """ASYNC_FLUSH: fsync the commitlog every flushIntervalCommitLog ms when enough pages are dirty."""

    def __init__(self, queue: MappedFileQueue, interval_ms: int, least_pages: int, thorough_ms: int,
                 on_flushed: Callable[[int], None]) -> None:
        super().__init__("FlushRealTimeService", interval_ms / 1000)
        self.queue = queue
        self.least_pages = least_pages
        self.thorough_s = thorough_ms / 1000
        self.on_flushed = on_flushed
        self._last_thorough = time.monotonic()
        #: Told how long each flush round that found something to flush took (ms), for metrics.
        self.flush_observer: Optional[Callable[[float], None]] = None

    def run_once(self) -> None:
        least = self.least_pages
        now = time.monotonic()
        if now - self._last_thorough >= self.thorough_s:
            least = 0
            self._last_thorough = now
        flushed = False
        while self.queue.flush(least):
            least = 0  # once started, flush everything written up to now
            flushed = True
        if flushed and self.flush_observer is not None:
            self.flush_observer((time.monotonic() - now) * 1000.0)
        self.on_flushed(self.queue.flushed_where)

    def on_stop(self) -> None:
        self.queue.flush_all()
        self.on_flushed(self.queue.flushed_where)
