"""AsyncPushConsumer: messages delivered to an ``async def`` listener on the application's loop.

    consumer = AsyncPushConsumer("orders-consumer", "127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA || TagB")

    async def on_message(msgs):
        for m in msgs:
            await handle(m)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_listener(on_message)
    await consumer.start()
    ...
    await consumer.stop()

It is a :class:`~rocketmesh.client.consumer.push_consumer.PushConsumer` (the same settings; the same
rebalance, pulls, flow control, retries through ``%RETRY%<group>``, dead letters, offsets and orderly
locks) whose listener runs on the loop that started it. A concurrent listener's calls go straight from the
pulls to the loop and run there as tasks, at most ``consume_thread_nums`` (20 by default, RocketMQ's
consumeThreadMin) at once; only the send-back of a failed message waits in a worker thread. An orderly
listener is run by the consumer's consume threads, each handing its queue's batch to the loop and waiting
for the status, since a queue's calls must follow one another. Messages whose listener call is still
running ``consume_timeout`` minutes after it began go back to the broker for a retry, as in
RocketMQ. A plain ``def`` listener runs on the consume threads, as with PushConsumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rocketmesh.aio.bridge import is_async_callable, run_on_loop, start_in_thread
from rocketmesh.aio.consume import LoopConsumeService
from rocketmesh.client.consumer.consume_service import (
    ConcurrentConsumeService,
    Listener,
    OrderlyConsumeService,
    consume_directly,
)
from rocketmesh.client.consumer.core import ConsumerCore
from rocketmesh.client.consumer.options import PushConsumerOptions
from rocketmesh.client.consumer.push_consumer import PushConsumer
from rocketmesh.client.errors import MQClientError
from rocketmesh.client.running_info import ConsumeMessageDirectlyResult
from rocketmesh.filter import SubscriptionData
from rocketmesh.model.message import MessageExt, MessageQueue

#: ``async def listener(msgs) -> ConsumeConcurrentlyStatus`` (or ConsumeOrderlyStatus when orderly).
AsyncListener = Callable[[list[MessageExt]], Awaitable[Any]] | Callable[[list[MessageExt]], Any]


class _LoopPushConsumer(PushConsumer):
    """A PushConsumer whose ``async def`` listener runs on ``loop``: concurrently through a LoopConsumeService;
    orderly, and for an admin's CONSUME_MESSAGE_DIRECTLY, from the consume (or push) thread that waits for it."""

    loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def _on_loop(self, listener: Listener) -> Listener:
        """``listener`` as a thread calls it: an ``async def`` one runs on the loop, the thread waits (bounded)."""
        loop = self.loop
        if loop is None or not is_async_callable(listener):
            return listener
        timeout_s = self.options.consume_timeout * 60.0
        return lambda msgs: run_on_loop(loop, lambda: listener(msgs), timeout_s)

    def _new_service(self, core: ConsumerCore, listener: Listener) -> ConcurrentConsumeService | OrderlyConsumeService:
        o = self.options
        if self.loop is None or self._orderly or not is_async_callable(listener):
            return super()._new_service(core, self._on_loop(listener))
        return LoopConsumeService(core, listener, o.consume_thread_nums, o.consume_message_batch_max_size,
                                  None if o.max_reconsume_times < 0 else o.max_reconsume_times,
                                  o.consume_timeout * 60_000, self.loop)

    def _consume_directly(self, msg: MessageExt) -> ConsumeMessageDirectlyResult:
        assert self._listener is not None  # start() refuses to start without one
        return consume_directly(self._on_loop(self._listener), msg, self.group, self._orderly)


class AsyncPushConsumer:
    """See the module docstring. Settings are PushConsumer's (RocketMQ's DefaultMQPushConsumer ones,
    snake_case), as keywords or ``options=PushConsumerOptions(...)``."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 options: PushConsumerOptions | None = None, **settings: Any) -> None:
        self._consumer = _LoopPushConsumer(group, namesrv, options=options, **settings)
        self._listener: AsyncListener | None = None
        self._orderly = False
        self._started = False

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._consumer.group

    @property
    def options(self) -> PushConsumerOptions:
        """The settings (see PushConsumerOptions)."""
        return self._consumer.options

    # --- configuration ---

    def subscribe(self, topic: str, expression: str | None = "*", *, sql: str | None = None) -> SubscriptionData:
        """Consume ``topic`` by tags or, with ``sql=``, by a SQL92 expression (as PushConsumer.subscribe)."""
        return self._consumer.subscribe(topic, expression, sql=sql)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``."""
        self._consumer.unsubscribe(topic)

    def register_listener(self, listener: AsyncListener, orderly: bool = False) -> None:
        """Set the listener, ``async def listener(msgs) -> status``; ``orderly=True`` for per-queue order."""
        if self._started:
            raise MQClientError("register the listener before start()")
        if not callable(listener):
            raise MQClientError(f"the listener must be callable, got {type(listener).__name__}")
        self._listener = listener
        self._orderly = orderly

    # --- life cycle ---

    async def start(self) -> AsyncPushConsumer:
        """Join the group and start consuming (in a worker thread: it asks the name server and the brokers).
        Raises MQClientError without a listener or subscription."""
        if self._started:
            raise MQClientError("the consumer is already started")
        listener = self._listener
        if listener is None:
            raise MQClientError("no listener: call register_listener(fn) before start()")
        consumer = self._consumer
        consumer.bind(asyncio.get_running_loop())
        consumer.register_listener(listener, self._orderly)
        await start_in_thread(consumer.start, consumer.shutdown)  # cancelled: undone once it has started
        self._started = True
        return self

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop pulling, let running listeners finish (bounded by ``timeout_s``), commit the offsets of what
        was consumed and leave the group, as PushConsumer.shutdown does. The loop keeps running the
        listeners meanwhile: the shutdown waits in a worker thread."""
        if not self._started:
            return
        self._started = False
        await asyncio.to_thread(self._consumer.shutdown, timeout_s)

    async def __aenter__(self) -> AsyncPushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def suspend(self) -> None:
        """Stop pulling (messages already pulled are still consumed)."""
        self._consumer.suspend()

    def resume(self) -> None:
        """Pull again after :meth:`suspend`."""
        self._consumer.resume()

    # --- introspection ---

    @property
    def running(self) -> bool:
        """Started and not yet stopping."""
        return self._consumer.running

    @property
    def client_id(self) -> str | None:
        """The client instance's id as the brokers see it (None before start)."""
        return self._consumer.client_id

    def assigned_queues(self, include_retry: bool = False) -> list[MessageQueue]:
        """The queues this client consumes now (after the last rebalance)."""
        return self._consumer.assigned_queues(include_retry)

    async def rebalance_now(self) -> None:
        """Rebalance at once (in a worker thread: it asks the brokers for the group's members)."""
        await asyncio.to_thread(self._consumer.rebalance_now)

    async def wait_assigned(self, timeout_s: float = 10.0) -> list[MessageQueue]:
        """Until at least one queue is assigned (or the timeout); the queues assigned."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            queues = self.assigned_queues()
            if queues:
                return queues
            await asyncio.sleep(0.05)
        return self.assigned_queues()

    def __repr__(self) -> str:
        return f"AsyncPushConsumer(group={self.group!r}, running={self.running})"
