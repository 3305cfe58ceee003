"""The reput cursor: every record the commitlog holds is dispatched once, in commitlog order.

RocketMQ's ReputMessageService. It reads the records written past its offset,
hands each run of them to the :class:`~rocketmesh.broker.store.dispatch.dispatcher.Dispatcher`
(consume queues and index) and then tells the arriving listeners which queues
grew. The same code rebuilds queues and index from the checkpoint at start-up
and dispatches what a put, or a slave's replicated chunk, just wrote.

Whoever calls :meth:`ReputMessageService.dispatch_pending` dispatches everything
written so far, its own records and any another thread wrote meanwhile, so a put
that returns after calling it is readable, and runs of records written by
concurrent puts are dispatched as one run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from rocketmesh.broker.store.commitlog import CommitLog
from rocketmesh.broker.store.dispatch.dispatcher import Dispatcher, Grown
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="reput")

#: Told (topic, queue id, new max offset) of each queue a dispatch grew: the new messages are readable.
ArrivingListener = Callable[[Grown], None]
#: Told of an OSError that stopped a dispatch (ENOSPC writing a consume queue or index file).
DispatchErrorListener = Callable[[OSError], None]


class ReputMessageService:
    """The dispatch cursor over one commitlog (see the module docstring)."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, partial_records: bool = False,
                 on_error: DispatchErrorListener | None = None) -> None:
        """``partial_records``: the commitlog may end inside a record (a slave's replicated chunk);
        dispatch then waits there for the rest instead of reporting a bad record. ``on_error`` is told of
        an OSError that stopped a dispatch (after it is logged and counted)."""
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.partial_records = partial_records
        #: Commitlog offset up to which every record is dispatched.
        self.reput_offset = 0
        self.listeners: list[ArrivingListener] = []
        #: Held while dispatching; whoever changes the queues or the index otherwise holds it too.
        self.lock = threading.Lock()
        self._bad_at = -1
        self.on_error = on_error
        #: Dispatches an OSError stopped (each leaves its records to the next dispatch).
        self.failed_times = 0

    @property
    def behind_bytes(self) -> int:
        """Commitlog bytes written and not dispatched yet."""
        return max(0, self.commitlog.max_offset - self.reput_offset)

    def dispatch_pending(self) -> None:
        """Dispatch every record written so far, then tell the listeners which queues grew.

        Cheap when nothing is pending. A caller that finds another thread
        dispatching waits for it, then dispatches what is left.

        An OSError (a full disk under the consume queues or the index) does not reach the caller:
        the records are in the commitlog, so the cursor stays before the run that failed, the error
        is logged, counted and handed to ``on_error``, and the next dispatch tries that run again.
        """
        if self.reput_offset >= self.commitlog.max_offset:
            return
        grown: dict[tuple[str, int], int] = {}
        failed: OSError | None = None
        with self.lock:
            try:
                self._dispatch_to(self.commitlog.max_offset, grown)
            except OSError as exc:
                failed = exc
                self.failed_times += 1
        if failed is not None:
            log.error("dispatch_failed", error=str(failed), reput_offset=self.reput_offset,
                      failed_times=self.failed_times)
            if self.on_error is not None:
                self.on_error(failed)
        if grown:
            told = [(topic, queue_id, max_offset) for (topic, queue_id), max_offset in grown.items()]
            for listener in self.listeners:
                try:
                    listener(told)
                except Exception:  # noqa: BLE001 - a listener must not fail a stored put
                    log.exception("arriving_listener_failed")

    def rebuild(self, start: int, end: int) -> None:
        """Recovery: dispatch the records between ``start`` and ``end`` (no listener is told)."""
        with self.lock:
            self.reput_offset = start
            self._dispatch_to(end, {})

    def _dispatch_to(self, end: int, grown: dict[tuple[str, int], int]) -> None:
        """Dispatch up to ``end``, noting in ``grown`` each queue's new max offset as each run lands."""
        read = self.commitlog.read_records
        dispatch = self.dispatcher.dispatch
        offset = self.reput_offset
        while offset < end:
            records, nxt, clean = read(offset)
            if records:
                for topic, queue_id, max_offset in dispatch(records):
                    grown[(topic, queue_id)] = max_offset
            if nxt == offset:
                if not clean and not self.partial_records and self._bad_at != offset:
                    self._bad_at = offset
                    log.error("dispatch_bad_record", offset=offset, end=end)
                break
            offset = self.reput_offset = nxt

