"""ReputMessageService: builds consume queues and index from the commitlog, then tells listeners."""

from __future__ import annotations

import threading
from typing import Callable

from rocketmesh.log import get_logger
from rocketmesh.broker.store.commitlog import CommitLog, DispatchRecord

log = get_logger("broker", component="dispatcher")


class ReputMessageService:
    """A thread that follows the commitlog's written end from ``reput_from_offset``.

    Records are handed to ``dispatch`` (consume queue + index) in runs of up to a
    few thousand; the thread idles 1 ms when caught up, as RocketMQ's does.
    """

    def __init__(self, commitlog: CommitLog, dispatch: Callable[[list[DispatchRecord]], None],
                 reput_from_offset: int) -> None:
        self.commitlog = commitlog
        self.dispatch = dispatch
        self.reput_from_offset = reput_from_offset
        self._running = False
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._caught_up = threading.Condition()

    @property
    def behind(self) -> int:
        """Commitlog bytes written but not dispatched yet."""
        return self.commitlog.max_offset - self.reput_from_offset

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="ReputMessageService", daemon=True)
        self._thread.start()

    def do_reput(self) -> bool:
        """Dispatch everything written so far; True if anything was dispatched."""
        start = self.reput_from_offset
        if start < self.commitlog.min_offset:
            log.warning("reput_offset_below_commitlog", reput=start, min=self.commitlog.min_offset)
            start = self.reput_from_offset = self.commitlog.min_offset
        offset = start
        while True:
            records, nxt, clean = self.commitlog.read_records(offset)
            if records:
                self.dispatch(records)
            if nxt == offset:
                if not clean:
                    log.error("reput_bad_record", offset=offset)
                break
            offset = self.reput_from_offset = nxt
        return offset != start

    def _run(self) -> None:
        while self._running:
            try:
                progressed = self.do_reput()
            except Exception:  # noqa: BLE001 - logged; the next turn retries from the same offset
                log.exception("reput_failed", offset=self.reput_from_offset)
                progressed = False
            if not progressed:
                with self._caught_up:
                    self._caught_up.notify_all()
                self._wake.wait(0.001)
                self._wake.clear()

    def wait_caught_up(self, timeout_s: float = 10.0) -> bool:
        """Block until everything written before this call is dispatched."""
        target = self.commitlog.max_offset
        with self._caught_up:
            return self._caught_up.wait_for(lambda: self.reput_from_offset >= target or not self._running,
                                            timeout_s) and self.reput_from_offset >= target

    def wakeup(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        """Dispatch what is left, then stop the thread."""
        self._running = False
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)
        self.do_reput()
