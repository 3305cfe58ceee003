"""Commitlog flush services: group commit for SYNC_FLUSH, a periodic flusher for ASYNC_FLUSH.

(Consume queues and index are flushed by the dispatch worker, which owns them.)"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

from rocketmesh.runtime.service_thread import ServiceThread
from rocketmesh.broker.store.mapped_file import MappedFileQueue
from rocketmesh.broker.store.results import PutMessageStatus


class GroupCommitService:
    """SYNC_FLUSH: a put waits until the commitlog is fsynced past its end.

    One flusher thread serves every waiter: while an fdatasync runs (without the
    GIL) more puts append and queue up, and the next fdatasync covers them all.
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
        self._running = False
        self._thread: threading.Thread | None = None
        self.flush_count = 0

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="GroupCommitService", daemon=True)
        self._thread.start()

    def wait_flushed(self, offset: int) -> PutMessageStatus:
        """Block until ``offset`` is on disk; FLUSH_DISK_TIMEOUT after syncFlushTimeout."""
        if self.queue.flushed_where >= offset:
            return PutMessageStatus.PUT_OK
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            if offset > self._requested:
                self._requested = offset
                self._cond.notify_all()
            while self.queue.flushed_where < offset:
                left = deadline - time.monotonic()
                if left <= 0 or not self._running:
                    return PutMessageStatus.FLUSH_DISK_TIMEOUT
                self._cond.wait(left)
        return PutMessageStatus.PUT_OK

    def _run(self) -> None:
        while self._running:
            with self._cond:
                while self._running and self._requested <= self.queue.flushed_where:
                    self._cond.wait(0.01)
                target = self._requested
            while self.queue.flushed_where < target:
                if not self.queue.flush(0):
                    break
            self.flush_count += 1
            with self._cond:
                self._cond.notify_all()
            now = time.monotonic()
            if self.on_flushed is not None and now - self._last_report >= 1.0:
                self._last_report = now
                self.on_flushed(self.queue.flushed_where)

    def stop(self) -> None:
        self.queue.flush_all()
        self._running = False
        with self._cond:
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

    def run_once(self) -> None:
        least = self.least_pages
        now = time.monotonic()
        if now - self._last_thorough >= self.thorough_s:
            least = 0
            self._last_thorough = now
        while self.queue.flush(least):
            least = 0  # once started, flush everything written up to now
        self.on_flushed(self.queue.flushed_where)

    def on_stop(self) -> None:
        self.queue.flush_all()
        self.on_flushed(self.queue.flushed_where)
