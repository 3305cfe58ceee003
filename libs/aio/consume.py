"""Running an ``async def`` concurrent listener on the application's loop (AsyncPushConsumer).

:class:`LoopConsumeService` is the threaded consumer's ConcurrentConsumeService with its consume threads
taken out: pulled batches go straight to the loop (one wake-up per burst of pulls) and each listener
call runs there as a task, at most ``concurrency`` at once. What happens before and after a call — the
consume start stamp, the process span and message trace, the status rules, the send-back of what failed
and the process queue's offsets — is the base class's. Only a send-back (a request that waits for the
broker) leaves the loop, for a worker thread.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rocketmesh.client.consumer.consume_service import (
    RECONSUME_LOCALLY_DELAY_MS,
    ConcurrentConsumeService,
    reset_retry_topic,
)
from rocketmesh.client.consumer.process_queue import ProcessQueue
from rocketmesh.client.consumer.types import ConsumeConcurrentlyStatus, MessageModel
from rocketmesh.model.message import MessageExt, MessageQueue

if TYPE_CHECKING:
    from rocketmesh.client.consumer.core import ConsumerCore, PullRequest

#: ``async def listener(msgs) -> ConsumeConcurrentlyStatus``.
AsyncConcurrentListener = Callable[[list[MessageExt]], Awaitable[Any]]
_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
_Calls = tuple[MessageQueue, ProcessQueue, list[list[MessageExt]]]


class LoopConsumeService(ConcurrentConsumeService):
    """See the module docstring."""

    def __init__(self, core: ConsumerCore, listener: AsyncConcurrentListener, concurrency: int, batch_max_size: int,
                 max_reconsume_times: int | None, consume_timeout_ms: float,
                 loop: asyncio.AbstractEventLoop) -> None:
        # No consume threads: the loop runs the calls.
        super().__init__(core, listener, 0, batch_max_size, max_reconsume_times, consume_timeout_ms)
        self.async_listener = listener
        self.concurrency = concurrency
        self._loop = loop
        self._inbox: collections.deque[_Calls] = collections.deque()
        self._scheduled = False
        self._slots: asyncio.Semaphore | None = None  # made on the loop
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False
        # Listener calls handed to the loop and not finished (queued or running), for stop() to wait on.
        self._calls = 0
        self._idle = threading.Condition()

    def start(self) -> None:
        """Nothing to start: the loop is running."""

    def stop(self, timeout_s: float) -> None:
        """Let running calls finish (at most ``timeout_s``); calls not yet begun are dropped, their messages
        stay unconsumed and are delivered again. Called off the loop (the loop must go on running the calls)."""
        self._stopped = True
        with self._idle:
            self._idle.wait_for(lambda: self._calls == 0, timeout_s)

    def submit(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        mq, pq = req.mq, req.pq
        if mq.topic == self.core.retry_topic:
            reset_retry_topic(msgs)
        n = self.batch_max_size
        self._post(mq, pq, [msgs[i:i + n] for i in range(0, len(msgs), n)])

    def _consume_later(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        def again() -> None:
            held = [m for m in msgs if pq.holds(m)]  # unless the consume timeout handed them back meanwhile
            if held:
                self._post(mq, pq, [held])
        self.core.scheduler.call_later(RECONSUME_LOCALLY_DELAY_MS, again)

    # -- to the loop -----------------------------------------------------------

    def _post(self, mq: MessageQueue, pq: ProcessQueue, calls: list[list[MessageExt]]) -> None:
        """Hand listener calls to the loop (any thread); the loop is woken once per burst."""
        with self._idle:
            self._calls += len(calls)
        self._inbox.append((mq, pq, calls))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: no call will run; their messages come again
                self._inbox.clear()
                with self._idle:
                    self._calls = 0
                    self._idle.notify_all()

    def _drain(self) -> None:
        self._scheduled = False  # before popping, so that a post after the last pop schedules a drain itself
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        popleft = self._inbox.popleft
        while True:
            try:
                mq, pq, calls = popleft()
            except IndexError:
                return
            for msgs in calls:
                task = self._loop.create_task(self._call(mq, pq, msgs))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def _done(self) -> None:
        with self._idle:
            self._calls -= 1
            if self._calls <= 0:
                self._idle.notify_all()

    async def _call(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """One listener call on the loop, then its settling (the send-back of what failed in a worker thread)."""
        try:
            assert self._slots is not None
            async with self._slots:
                if self._stopped or pq.dropped:
                    return
                call = self.begin_call(mq, msgs)
                try:
                    try:
                        status = await self.async_listener(msgs)
                    except Exception as exc:  # noqa: BLE001 - a throwing listener means "retry later"
                        status = self.listener_failed(call, msgs, exc)
                    status = self.end_call(call, status)
                    core = self.core
                    if (status == _SUCCESS or pq.dropped or not core.running
                            or core.message_model is MessageModel.BROADCASTING):
                        self._settle(core, mq, pq, msgs, status, True)  # no request to wait for
                    else:
                        # Sends back to the broker, inside the call's span (to_thread carries the context).
                        await asyncio.to_thread(self._settle, core, mq, pq, msgs, status, True)
                finally:
                    call.close()
        finally:
            self._done()

