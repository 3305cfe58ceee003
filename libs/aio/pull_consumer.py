"""AsyncPullConsumer: the PullConsumer for asyncio programs.

    async with AsyncPullConsumer("reports", "127.0.0.1:9876") as consumer:
        consumer.subscribe("Orders")
        async for msg in consumer:
            await handle(msg)

It is a :class:`~rocketmesh.client.consumer.pull_consumer.PullConsumer` (the same settings; the same
rebalance, background pulls into a bounded cache, offsets and auto commit) that the loop reads without a
thread per call: ``getmany`` takes what the cache holds and, when it holds nothing, awaits a future that
the client's I/O thread completes when the next pulled batch lands (through a
:class:`~rocketmesh.aio.bridge.LoopInbox`, and only while a task waits). What has to ask a broker (start,
stop, commit, committed, seeks, an assignment of a running consumer) runs on the consumer's own worker
thread, one call after the other in the order they were made, so the loop never waits on the network.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from rocketmesh.aio.bridge import LoopInbox
from rocketmesh.client.consumer.core import make_subscription
from rocketmesh.client.consumer.options import PullConsumerOptions
from rocketmesh.client.consumer.pull_consumer import PullConsumer
from rocketmesh.client.errors import MQClientError
from rocketmesh.model.message import MessageExt, MessageQueue

T = TypeVar("T")


class AsyncPullConsumer:
    """See the module docstring. Settings are PullConsumer's (RocketMQ's DefaultLitePullConsumer ones,
    snake_case), as keywords or ``options=PullConsumerOptions(...)``; each is checked here, MQClientError
    naming what is wrong.

    What ``async for`` and :meth:`getmany` hand out counts as consumed exactly as what ``PullConsumer.poll``
    returns: with ``auto_commit`` (the default) it is committed every ``auto_commit_interval_ms`` at a later
    ``getmany`` (so only after the application asked for more) and by :meth:`stop`; without, by
    :meth:`commit`. A task cancelled while it waits in ``getmany`` or ``async for`` loses no message: it
    takes nothing from the cache until it returns.
    """

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 options: PullConsumerOptions | None = None, **settings: Any) -> None:
        self._consumer = PullConsumer(group, namesrv, options=options, **settings)
        self._inbox: LoopInbox | None = None
        self._worker: concurrent.futures.ThreadPoolExecutor | None = None
        #: Futures of the tasks waiting for messages; the I/O thread completes (and forgets) them on arrival.
        self._waiters: list[asyncio.Future[None]] = []
        self._waiters_lock = threading.Lock()
        #: Changes of a running consumer (subscribe, assign) handed to the worker without awaiting them.
        self._changes: list[concurrent.futures.Future[Any]] = []
        self._started = False

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._consumer.group

    @property
    def options(self) -> PullConsumerOptions:
        """The settings (see PullConsumerOptions)."""
        return self._consumer.options

    @property
    def running(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._started

    # --- what to consume ---

    def subscribe(self, topic: str, expression: str | None = "*", *, sql: str | None = None) -> None:
        """Consume ``topic`` by tags or, with ``sql=``, by a SQL92 expression, as a member of the group (queues
        rebalanced among its clients). An expression that does not parse raises MQClientError here. On a
        running consumer, asking the name server for the topic's route and telling the brokers go to the
        worker thread: the queues come with the rebalance that follows."""
        make_subscription(topic, expression, sql)  # an expression that does not parse fails now, not later
        if self._started:
            self._in_background(lambda: self._consumer.subscribe(topic, expression, sql=sql))
        else:
            self._consumer.subscribe(topic, expression, sql=sql)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues go at the next rebalance, which starts at once)."""
        self._consumer.unsubscribe(topic)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly ``queues`` (no rebalance); the group's stored offsets are still used. On a running
        consumer, reading those offsets goes to the worker thread, before any call made after this one
        (``assign(...)`` then ``await seek(...)`` seeks an assigned queue)."""
        wanted = list(queues)
        if self._started:
            self._in_background(lambda: self._consumer.assign(wanted))
        else:
            self._consumer.assign(wanted)

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (for :meth:`assign`); asks the name server in the worker thread
        when the route is not cached."""
        return await self._call(lambda: self._consumer.fetch_message_queues(topic))

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer pulls now."""
        return self._consumer.assignment()

    # --- life cycle ---

    async def start(self) -> AsyncPullConsumer:
        """Join the group and start pulling, in the consumer's worker thread (it asks the name server and the
        brokers); returns self. The consumer then belongs to the running loop."""
        if self._started or self._worker is not None:
            raise MQClientError("the consumer is already started")
        loop = asyncio.get_running_loop()
        worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"aio-pull-{self.group}")
        self._worker = worker
        self._inbox = LoopInbox(loop)
        consumer = self._consumer
        consumer.set_arrival_callback(self._on_arrival)
        try:
            await asyncio.wrap_future(worker.submit(consumer.start))
        except BaseException:
            # Cancelled while the worker starts it, or failed: whatever did start is stopped again, after it.
            consumer.set_arrival_callback(None)
            worker.submit(consumer.shutdown)
            worker.shutdown(wait=False)
            self._worker = None
            raise
        self._started = True
        return self

    async def stop(self) -> None:
        """Stop pulling, commit what ``getmany`` and ``async for`` handed out (with auto commit) and leave the
        group, as PullConsumer.shutdown does, in the worker thread. Tasks waiting for messages get [] (an
        ``async for`` ends)."""
        worker = self._worker
        if not self._started or worker is None:
            return
        self._started = False
        self._consumer.set_arrival_callback(None)
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        try:
            await asyncio.wrap_future(worker.submit(self._consumer.shutdown))
        finally:
            worker.shutdown(wait=False)
            self._worker = None

    async def __aenter__(self) -> AsyncPullConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- messages ---

    async def getmany(self, timeout_ms: int | None = None, max_records: int | None = None) -> list[MessageExt]:
        """What the cache holds, up to ``max_records`` (default: all of it), as soon as it holds anything; []
        after ``timeout_ms`` (default ``poll_timeout_ms``, 5 s; 0 does not wait) or once the consumer stops.

        Messages of several queues may come together, each queue's in offset order; the rest of a batch
        longer than ``max_records`` comes first next time. With auto commit, when ``auto_commit_interval_ms``
        passed, what earlier calls handed out is committed first (in the worker thread)."""
        self._live()
        consumer = self._consumer
        if consumer.auto_commit_due:
            await self._call(consumer.commit_if_due)
            if not self._started:
                return []
        msgs = consumer.poll_nowait(max_records)
        if msgs or timeout_ms == 0:
            return msgs
        loop = asyncio.get_running_loop()
        timeout = (consumer.options.poll_timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        deadline = loop.time() + timeout
        while self._started:
            fut: asyncio.Future[None] = loop.create_future()
            with self._waiters_lock:
                self._waiters.append(fut)
            try:
                # Registered first, looked again second: a batch that landed in between is seen here, one
                # that lands later completes the future. Nothing is taken from the cache before a return, so a
                # cancellation at the await below leaves every message where it was.
                msgs = consumer.poll_nowait(max_records)
                if msgs:
                    return msgs
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return []
                try:
                    async with asyncio.timeout(remaining):
                        await fut
                except TimeoutError:
                    pass  # the next round looks once more, then returns []
            finally:
                with self._waiters_lock:
                    if fut in self._waiters:
                        self._waiters.remove(fut)
        return []

    def __aiter__(self) -> AsyncPullConsumer:
        return self

    async def __anext__(self) -> MessageExt:
        """The next message; the iteration ends when the consumer stops."""
        while self._started:
            msgs = await self.getmany(max_records=1)
            if msgs:
                return msgs[0]
        raise StopAsyncIteration

    def pause(self) -> None:
        """Stop pulling (what the cache holds is still handed out)."""
        self._consumer.pause()

    def resume(self) -> None:
        """Pull again after :meth:`pause`."""
        self._consumer.resume()

    # --- offsets ---

    async def commit(self) -> None:
        """Commit, on the brokers (or the local file), the offsets of every message handed out so far (in the
        worker thread)."""
        await self._call(self._consumer.commit)

    async def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset of ``queue`` as stored (-1 when none); asks the broker in the worker
        thread."""
        return await self._call(lambda: self._consumer.committed(queue))

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Consume ``queue`` from ``offset`` on (it must be assigned, and ``offset`` within its min and max
        offsets, which the worker thread asks the broker for). What the cache held of the queue is dropped."""
        await self._call(lambda: self._consumer.seek(queue, offset))

    async def seek_to_time(self, timestamp_ms: int, queue: MessageQueue | None = None) -> None:
        """Move ``queue`` (or every assigned queue) to its first message stored at or after ``timestamp_ms``
        (the brokers search their consume queues; in the worker thread)."""
        await self._call(lambda: self._consumer.seek_to_time(timestamp_ms, queue))

    async def seek_to_begin(self, queue: MessageQueue) -> None:
        """Move ``queue`` to its first stored message (in the worker thread)."""
        await self._call(lambda: self._consumer.seek_to_begin(queue))

    async def seek_to_end(self, queue: MessageQueue) -> None:
        """Move ``queue`` past its last message: only messages stored from now on come (in the worker thread)."""
        await self._call(lambda: self._consumer.seek_to_end(queue))

    # --- the worker and the loop ---

    def _live(self) -> LoopInbox:
        inbox = self._inbox
        if not self._started or inbox is None:
            raise MQClientError("the consumer is not started: await consumer.start() (or use async with) first")
        if asyncio.get_running_loop() is not inbox.loop:
            raise MQClientError("the consumer belongs to the event loop that started it; use it from that loop")
        self._raise_change_failure()
        return inbox

    async def _call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the worker thread, after every call handed to it before."""
        self._live()
        worker = self._worker
        assert worker is not None
        return await asyncio.wrap_future(worker.submit(fn))

    def _in_background(self, fn: Callable[[], object]) -> None:
        """``fn()`` on the worker thread without waiting; a failure is raised by the next call that waits."""
        worker = self._worker
        assert worker is not None
        self._changes.append(worker.submit(fn))

    def _raise_change_failure(self) -> None:
        if not self._changes:
            return
        done = [f for f in self._changes if f.done()]
        self._changes = [f for f in self._changes if not f.done()]
        for f in done:
            error = f.exception()
            if error is not None:
                raise error

    def _on_arrival(self) -> None:
        """On the I/O thread, as pulled messages land in the cache: wake the tasks waiting, if any (one loop
        wake-up per burst, by the inbox)."""
        with self._waiters_lock:
            if not self._waiters:
                return
            waiters, self._waiters = self._waiters, []
        inbox = self._inbox
        if inbox is not None:
            for fut in waiters:
                inbox.put(fut, None, None)

    def __repr__(self) -> str:
        return f"AsyncPullConsumer(group={self.group!r}, running={self.running})"
