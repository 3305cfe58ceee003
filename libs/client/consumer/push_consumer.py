"""PushConsumer: messages delivered to a listener (RocketMQ's DefaultMQPushConsumer).

    consumer = PushConsumer("orders-consumer", "127.0.0.1:9876")
    consumer.subscribe("Orders", "TagA || TagB")

    def on_messages(msgs):
        for m in msgs:
            handle(m)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_listener(on_messages)
    consumer.start()
    ...
    consumer.shutdown()

A concurrent listener returns CONSUME_SUCCESS or RECONSUME_LATER (a raised
exception or None counts as RECONSUME_LATER, as in RocketMQ). An orderly
listener (``register_listener(fn, orderly=True)``) gets each queue's messages
in order on one thread at a time and returns SUCCESS or
SUSPEND_CURRENT_QUEUE_A_MOMENT (the batch is retried after
``suspend_current_queue_time_ms``).

Clustering (the default) splits the topic's queues among the group's
clients and keeps offsets on the brokers; broadcasting gives every client
every message and keeps offsets in a local file.

Retries (clustering): a message a concurrent listener fails, or one still
being consumed ``consume_timeout`` minutes after its listener started, goes
back to the broker, which delivers it again through the group's retry topic
``%RETRY%<group>`` (subscribed automatically) after a growing delay (delay
level 3 + reconsume times: 10 s, 30 s, 1 m ...). The listener sees its
original topic and ``msg.reconsume_times``. After ``max_reconsume_times``
retries (-1: the group's ``retryMaxTimes`` on the broker, 16 by default) it
goes to the dead-letter topic ``%DLQ%<group>`` instead. An orderly consumer
retries in place; with ``max_reconsume_times`` >= 0 (-1: for ever) a message
that used up its retries is dead-lettered and the queue moves on. If the
broker cannot take a message back, it is retried locally: never lost.
Broadcasting has no broker retry: a message whose listener fails is logged
and skipped, as in RocketMQ.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rocketmesh.client import exit_hooks
from rocketmesh.client.consumer.consume_service import (
    ConcurrentConsumeService,
    Listener,
    OrderlyConsumeService,
    consume_directly,
)
from rocketmesh.client.consumer.core import (
    PULL_DELAY_WHEN_FLOW_CONTROL_MS,
    ConsumerCore,
    ConsumerHooks,
    PullRequest,
    make_subscription,
)
from rocketmesh.client.consumer.options import PushConsumerOptions, options_from
from rocketmesh.client.consumer.types import MessageModel
from rocketmesh.client.errors import MQClientError
from rocketmesh.client.producer.producer import Producer
from rocketmesh.client.running_info import ConsumeMessageDirectlyResult
from rocketmesh.client.trace.msg_trace import MsgTracer
from rocketmesh.client.validators import check_group
from rocketmesh.filter import SubscriptionData
from rocketmesh.model.message import MessageExt, MessageQueue

_MiB = 1024 * 1024


class PushConsumer:
    """See the module docstring. Settings are RocketMQ's DefaultMQPushConsumer ones, snake_case: give
    them as keywords (``consume_thread_nums=4``) or as ``options=PushConsumerOptions(...)``; each is
    checked here, MQClientError naming what is wrong."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 options: PushConsumerOptions | None = None, **settings: Any) -> None:
        check_group(group)
        #: The settings (see PushConsumerOptions for each one's meaning and default).
        self.options: PushConsumerOptions = options_from(PushConsumerOptions, options, settings)
        self.group = group
        self.namesrv = namesrv
        self._subs: list[tuple[str, str | None, str | None]] = []
        self._listener: Listener | None = None
        self._orderly = False
        self._core: ConsumerCore | None = None
        self._service: Any = None

    # --- configuration ---

    def subscribe(self, topic: str, expression: str | None = "*", *, sql: str | None = None) -> SubscriptionData:
        """Consume ``topic``: by tags (``"TagA || TagB"``, ``"*"``) or, with ``sql=``, by a SQL92 expression
        on message properties. A bad expression raises MQClientError here."""
        sub = make_subscription(topic, expression, sql)
        self._subs = [s for s in self._subs if s[0] != topic] + [(topic, expression, sql)]
        if self._core is not None:
            self._core.subscribe(topic, expression, sql)
        return sub

    def unsubscribe(self, topic: str) -> None:
        self._subs = [s for s in self._subs if s[0] != topic]
        if self._core is not None:
            self._core.unsubscribe(topic)

    def register_listener(self, listener: Listener, orderly: bool = False) -> None:
        """Set the listener: ``listener(msgs) -> status``; ``orderly=True`` for per-queue order."""
        if self._core is not None:
            raise MQClientError("register the listener before start()")
        self._listener = listener
        self._orderly = orderly

    # --- life cycle ---

    def start(self) -> PushConsumer:
        """Join the group and start consuming. Raises MQClientError without a listener or subscription."""
        if self._core is not None:
            raise MQClientError("the consumer is already started")
        if self._listener is None:
            raise MQClientError("no listener: call register_listener(fn) before start()")
        if not self._subs:
            raise MQClientError("no subscription: call subscribe(topic, expression) before start()")
        o = self.options
        core = ConsumerCore(self.group, self.namesrv, o,
                            ConsumerHooks(deliver=self._deliver, can_pull=self._flow_control, periodic=self._periodic,
                                          consume_directly=self._consume_directly),
                            orderly=self._orderly)
        for topic, expression, sql in self._subs:
            core.subscribe(topic, expression, sql)
        if core.message_model is MessageModel.CLUSTERING:
            core.subscribe(core.retry_topic, "*")
        self._service = self._new_service(core, self._listener)
        if o.enable_msg_trace:
            self._service.msg_trace = MsgTracer(self.group, self.namesrv, o.trace_topic, new_producer=Producer,
                                                instance_name=o.instance_name, access_key=o.access_key,
                                                secret_key=o.secret_key)
            self._service.msg_trace.start()
        self._service.start()
        try:
            core.start()
        except BaseException:
            self._service.stop(1.0)
            if self._service.msg_trace is not None:
                self._service.msg_trace.close(1.0)
            raise
        self._core = core
        exit_hooks.started(self)
        return self

    def _new_service(self, core: ConsumerCore, listener: Listener) -> ConcurrentConsumeService | OrderlyConsumeService:
        """The consume service that runs ``listener`` (rocketmesh.aio's consumer brings its own)."""
        o = self.options
        if self._orderly:
            return OrderlyConsumeService(core, listener, o.consume_thread_nums, o.consume_message_batch_max_size,
                                         o.suspend_current_queue_time_ms, o.max_reconsume_times)
        return ConcurrentConsumeService(
            core, listener, o.consume_thread_nums, o.consume_message_batch_max_size,
            None if o.max_reconsume_times < 0 else o.max_reconsume_times, o.consume_timeout * 60_000)

    def _consume_directly(self, msg: MessageExt) -> ConsumeMessageDirectlyResult:
        assert self._listener is not None  # start() refuses to start without one
        return consume_directly(self._listener, msg, self.group, self._orderly)

    def _deliver(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        self._service.submit(req, msgs)

    def _periodic(self) -> None:
        if not self._orderly:
            self._service.periodic()

    def _flow_control(self, req: PullRequest) -> float:
        """RocketMQ's pull flow control: 0 to pull now, else the pause in ms. Nothing is dropped."""
        pq = req.pq
        o = self.options
        if pq.msg_count > o.pull_threshold_for_queue or pq.msg_size > o.pull_threshold_size_for_queue * _MiB:
            return PULL_DELAY_WHEN_FLOW_CONTROL_MS
        if not self._orderly and pq.max_span() > o.consume_concurrently_max_span:
            return PULL_DELAY_WHEN_FLOW_CONTROL_MS
        if self._orderly and not pq.locked:
            return 3000
        return 0

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop pulling, let running listeners finish (bounded), persist offsets, leave the group."""
        core = self._core
        if core is None:
            return
        core.shutdown()
        self._service.stop(timeout_s)
        if self._service.msg_trace is not None:
            self._service.msg_trace.close(min(3.0, timeout_s))
        core.finish_shutdown()
        self._core = None
        exit_hooks.stopped(self)

    def suspend(self) -> None:
        """Stop pulling (messages already pulled are still consumed)."""
        if self._core is not None:
            self._core.paused = True

    def resume(self) -> None:
        if self._core is not None:
            self._core.paused = False

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- introspection ---

    @property
    def running(self) -> bool:
        """Started and not yet shutting down (False from the moment ``shutdown()`` begins)."""
        return self._core is not None and self._core.running

    @property
    def client_id(self) -> str | None:
        return self._core.instance.client_id if self._core and self._core.started else None

    def assigned_queues(self, include_retry: bool = False) -> list[MessageQueue]:
        """The queues of the subscribed topics this client consumes now (after the last rebalance); with
        ``include_retry`` also its share of the group's retry topic."""
        core = self._core
        if core is None or not core.started:
            return []
        return [mq for mq in core.rebalance.assigned() if include_retry or mq.topic != core.retry_topic]

    def rebalance_now(self) -> None:
        if self._core is not None:
            self._core.rebalance_now()

    def wait_assigned(self, timeout_s: float = 10.0) -> list[MessageQueue]:
        """Until at least one queue is assigned (or the timeout); the queues assigned."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            q = self.assigned_queues()
            if q:
                return q
            time.sleep(0.05)
        return self.assigned_queues()
