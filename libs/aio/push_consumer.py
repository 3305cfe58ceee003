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
locks) whose listener runs on the loop that started it. Each of the consumer's ``consume_thread_nums``
consume threads (20 by default, RocketMQ's consumeThreadMin) hands a batch to the loop and waits for the
listener's status, so at most that many listener calls run at once. A listener call still running after
``consume_timeout`` minutes is cancelled and its messages go back for a retry, as a timed-out one does in
RocketMQ. A plain ``def`` listener runs on the consume threads, as with PushConsumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rocketmesh.aio.bridge import is_async_callable, run_on_loop
from rocketmesh.client.consumer.options import PushConsumerOptions
from rocketmesh.client.consumer.push_consumer import PushConsumer
from rocketmesh.client.errors import MQClientError
from rocketmesh.filter import SubscriptionData
from rocketmesh.model.message import MessageExt, MessageQueue

#: ``async def listener(msgs) -> ConsumeConcurrentlyStatus`` (or ConsumeOrderlyStatus when orderly).
AsyncListener = Callable[[list[MessageExt]], Awaitable[Any]] | Callable[[list[MessageExt]], Any]


class AsyncPushConsumer:
    """See the module docstring. Settings are PushConsumer's (RocketMQ's DefaultMQPushConsumer ones,
    snake_case), as keywords or ``options=PushConsumerOptions(...)``."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 options: PushConsumerOptions | None = None, **settings: Any) -> None:
        self._consumer = PushConsumer(group, namesrv, options=options, **settings)
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
        if is_async_callable(listener):
            loop = asyncio.get_running_loop()
            timeout_s = consumer.options.consume_timeout * 60.0
            consumer.register_listener(lambda msgs: run_on_loop(loop, lambda: listener(msgs), timeout_s),
                                       self._orderly)
        else:
            consumer.register_listener(listener, self._orderly)
        await asyncio.to_thread(consumer.start)
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
