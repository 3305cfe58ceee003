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


class ReputMessageService:
    """The dispatch cursor over one commitlog (see the module docstring)."""

    def __init__(self, commitlog: CommitLog, dispatcher: Dispatcher, partial_records: bool = False) -> None:
        """``partial_records``: the commitlog may end inside a record (a slave's replicated chunk);
        dispatch then waits there for the rest instead of reporting a bad record."""
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.partial_records = partial_records
        #: Commitlog offset up to which every record is dispatched.
        self.reput_offset = 0
        self.listeners: list[ArrivingListener] = []
        #: Held while dispatching; whoever changes the queues or the index otherwise holds it too.
        self.lock = threading.Lock()
        self._bad_at = -1

    @property
    def behind_bytes(self) -> int:
        """Commitlog bytes written and not dispatched yet."""
        return max(0, self.commitlog.max_offset - self.reput_offset)

    def dispatch_pending(self) -> None:
        """Dispatch every record written so far, then tell the listeners which queues grew.

        Cheap when nothing is pending. A caller that finds another thread
        dispatching waits for it, then dispatches what is left.
        """
        if self.reput_offset >= self.commitlog.max_offset:
            return
        with self.lock:
            grown = self._dispatch_to(self.commitlog.max_offset)
        if grown:
            for listener in self.listeners:
                try:
                    listener(grown)
                except Exception:  # noqa: BLE001 - a listener must not fail a stored put
                    log.exception("arriving_listener_failed")

    def rebuild(self, start: int, end: int) -> None:
        """Recovery: dispatch the records between ``start`` and ``end`` (no listener is told)."""
        with self.lock:
            self.reput_offset = start
            self._dispatch_to(end)

    def _dispatch_to(self, end: int) -> Grown:
        read = self.commitlog.read_records
        dispatch = self.dispatcher.dispatch
        grown: dict[tuple[str, int], int] = {}
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
        return [(topic, queue_id, max_offset) for (topic, queue_id), max_offset in grown.items()]

