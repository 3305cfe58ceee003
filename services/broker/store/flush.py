"""Flush services: group commit for SYNC_FLUSH, a periodic commitlog flusher for ASYNC_FLUSH, and the
periodic flusher of consume queues and index."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rocketmesh.broker.store.mapped_file import MappedFileQueue
from rocketmesh.broker.store.results import PutMessageStatus
from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.service_thread import ServiceThread

log = get_logger("broker", component="flush")


#: The I/O thread flushes for its own sends only while the last fdatasync took at most this long.
INLINE_FLUSH_MAX_MS = 2.0

#: The flusher thread takes over waiters left to flush_pending that waited this long (it never came).
_FALLBACK_S = 0.01

#: Told how a wait for durability ended: PUT_OK, or the timeout status of the stage that timed out.
DurableCallback = Callable[[PutMessageStatus], None]


class GroupCommitService:
    """SYNC_FLUSH: puts are answered once the commitlog is fsynced past their end.

    Waiters register a callback (:meth:`when_flushed`); one fdatasync covers
    every waiter registered before it. Two threads flush:

    - the broker's I/O thread, after each round of reading requests
      (:meth:`flush_pending`): the sends it stored in that round share one
      fdatasync, and their answers go out from the thread that owns the socket.
      Requests arriving meanwhile queue in ZeroMQ and make the next round.
      Waiters registered so (``flush_here=True``) wake nobody. This is the
      cheap path: no thread hand-off on the way in or out.
    - the flusher thread, for every other waiter, for all of them while
      fdatasyncs are slow (the last took over :data:`INLINE_FLUSH_MAX_MS`): a
      slow disk must not stall the I/O thread's pulls and heartbeats; and for
      waiters left to flush_pending that waited 10 ms (a long round of reading).
    """

    def __init__(self, queue: MappedFileQueue, timeout_ms: int,
                 on_flushed: Callable[[int], None] | None = None) -> None:
        self.queue = queue
        #: Told the flushed offset at most once a second (the checkpoint).
        self.on_flushed = on_flushed
        self._last_report = 0.0
        self.timeout_s = timeout_ms / 1000
        self._cond = threading.Condition()
        #: Held across an fdatasync: the flusher thread and flush_pending never flush at once.
        self._flush_lock = threading.Lock()
        #: The last fdatasync was quick enough for flush_pending to do the next one on its own thread.
        self._inline_ok = True
        self._requested = 0
        #: The flusher thread was asked to flush (for a waiter not left to flush_pending).
        self._called = False
        #: (offset, deadline, callback) in the order they came; offsets grow with each put.
        self._waiters: list[tuple[int, float, DurableCallback]] = []
        self._running = False
        self._thread: threading.Thread | None = None
        self.flush_count = 0
        #: Told how long each flush round that found something to flush took (ms), for metrics.
        self.flush_observer: Callable[[float], None] | None = None

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="GroupCommitService", daemon=True)
        self._thread.start()

    def when_flushed(self, offset: int, callback: DurableCallback, flush_here: bool = False) -> None:
        """Call ``callback(PUT_OK)`` once ``offset`` is on disk, or ``callback(FLUSH_DISK_TIMEOUT)`` past
        syncFlushTimeout (on the thread that flushed; at once when it is on disk already).

        ``flush_here``: the caller calls :meth:`flush_pending` on this thread soon (the I/O thread, at
        the end of its round), so the flusher thread is left asleep unless flushes are slow.
        """
        if self.queue.flushed_where >= offset:
            callback(PutMessageStatus.PUT_OK)
            return
        with self._cond:
            if self._running:
                self._waiters.append((offset, time.monotonic() + self.timeout_s, callback))
                if offset > self._requested:
                    self._requested = offset
                if not (flush_here and self._inline_ok):
                    self._called = True
                    self._cond.notify_all()
                return
        callback(PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def flush_pending(self) -> None:
        """Flush and call back the waiters, here and now, if any wait and fdatasyncs are quick (else wake
        the flusher thread for them). Cheap when nothing waits."""
        if self._requested <= self.queue.flushed_where:
            return
        if not self._inline_ok:
            with self._cond:
                self._called = True
                self._cond.notify_all()
            return
        if not self._flush_lock.acquire(blocking=False):
            return  # the flusher thread is at it, and settles whoever it covers
        try:
            self._flush(self._requested)
        finally:
            self._flush_lock.release()
        self._settle()

    def _flush(self, target: int) -> None:
        """fdatasync up to ``target`` (the caller holds the flush lock); note how long it took."""
        if self.queue.flushed_where >= target:
            return  # the other flushing thread got there first
        started = time.monotonic()
        while self.queue.flushed_where < target:
            if not self.queue.flush(0):
                break
        self.flush_count += 1
        took_ms = (time.monotonic() - started) * 1000.0
        self._inline_ok = took_ms <= INLINE_FLUSH_MAX_MS
        if self.flush_observer is not None:
            self.flush_observer(took_ms)

    def _run(self) -> None:
        while self._running:
            with self._cond:
                if not self._due():
                    self._cond.wait(_FALLBACK_S)
                due = self._due()
                self._called = False
                target = self._requested
            if due:
                with self._flush_lock:
                    self._flush(target)
                self._settle()
            now = time.monotonic()
            if self.on_flushed is not None and now - self._last_report >= 1.0:
                self._last_report = now
                self.on_flushed(self.queue.flushed_where)
        self._settle()

    def _due(self) -> bool:
        """The flusher thread has work: it was called, or a waiter left to flush_pending waited too long."""
        if self._requested <= self.queue.flushed_where:
            return False
        waiters = self._waiters
        return self._called or bool(waiters) and waiters[0][1] - self.timeout_s <= time.monotonic() - _FALLBACK_S

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
        self.flush_observer: Callable[[float], None] | None = None

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


class FlushConsumeQueueService(ServiceThread):
    """RocketMQ's FlushConsumeQueueService: every flushIntervalConsumeQueue ms, ``flush(thorough)``.

    A regular turn (``thorough`` False) syncs only queues with
    flushConsumeQueueLeastPages dirty pages, so thousands of queues that each took
    a few entries do not cost a sync each every second; every
    flushConsumeQueueThoroughInterval ms a thorough one syncs every queue and the
    index, and only then may the checkpoint say everything up to there is dispatched.
    """

    def __init__(self, interval_ms: int, thorough_ms: int, flush: Callable[[bool], None]) -> None:
        super().__init__("FlushConsumeQueueService", interval_ms / 1000)
        self.thorough_s = thorough_ms / 1000
        self.flush = flush
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        now = time.monotonic()
        thorough = now - self._last_thorough >= self.thorough_s
        if thorough:
            self._last_thorough = now
        self.flush(thorough)
