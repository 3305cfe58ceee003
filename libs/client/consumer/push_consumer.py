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
from typing import Any, Optional, Sequence

from rocketmesh.filter import SubscriptionData
from rocketmesh.message import MessageQueue
from rocketmesh.client import exit_hooks
from rocketmesh.client.allocate import AllocateStrategy
from rocketmesh.client.errors import MQClientError
from rocketmesh.client.consumer.consume_service import ConcurrentConsumeService, Listener, OrderlyConsumeService
from rocketmesh.client.consumer.core import PULL_DELAY_WHEN_FLOW_CONTROL_MS, ConsumerCore, PullRequest, make_subscription
from rocketmesh.client.consumer.types import ConsumeFromWhere, MessageModel

_MiB = 1024 * 1024


class PushConsumer:
    """See the module docstring. Settings are RocketMQ's DefaultMQPushConsumer ones, snake_case."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        message_model: MessageModel | str = MessageModel.CLUSTERING,
        consume_from: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: Optional[int] = None,
        allocate: AllocateStrategy | str | None = None,
        consume_thread_nums: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_interval_ms: int = 0,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        consume_timeout: float = 15,
        suspend_current_queue_time_ms: int = 1000,
        persist_consumer_offset_interval_ms: int = 5000,
        rebalance_interval_ms: int = 20_000,
        broker_suspend_max_time_ms: int = 15_000,
        consumer_timeout_ms_when_suspend: int = 30_000,
        offset_store_dir: Optional[str] = None,
        instance_name: Optional[str] = None,
        heartbeat_broker_interval_ms: int = 30_000,
        poll_name_server_interval_ms: int = 30_000,
    ) -> None:
        if not 1 <= consume_message_batch_max_size <= 1024:
            raise MQClientError("consume_message_batch_max_size must be within 1..1024")
        if not 1 <= consume_thread_nums <= 1000:
            raise MQClientError("consume_thread_nums must be within 1..1000")
        if not 1 <= pull_threshold_for_queue <= 65535:
            raise MQClientError("pull_threshold_for_queue must be within 1..65535")
        if not 1 <= pull_threshold_size_for_queue <= 1024:
            raise MQClientError("pull_threshold_size_for_queue (MiB) must be within 1..1024")
        if not 1 <= consume_concurrently_max_span <= 65535:
            raise MQClientError("consume_concurrently_max_span must be within 1..65535")
        if (isinstance(max_reconsume_times, bool) or not isinstance(max_reconsume_times, int)
                or max_reconsume_times < -1):
            raise MQClientError("max_reconsume_times must be an integer >= 0, or -1 for the default")
        if isinstance(consume_timeout, bool) or not isinstance(consume_timeout, (int, float)) or consume_timeout <= 0:
            raise MQClientError("consume_timeout (minutes) must be a number > 0")
        self._opts = dict(consume_thread_nums=consume_thread_nums, batch=consume_message_batch_max_size)
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue * _MiB
        self.consume_concurrently_max_span = consume_concurrently_max_span
        #: -1 means RocketMQ's default: the group's retryMaxTimes (16) for concurrent consumers, no limit
        #: for orderly ones.
        self.max_reconsume_times = max_reconsume_times
        #: Minutes a concurrent listener may hold a message before it is handed back for a retry.
        self.consume_timeout = consume_timeout
        self.suspend_current_queue_time_ms = suspend_current_queue_time_ms
        self._core_args = dict(
            message_model=message_model, consume_from=consume_from, consume_timestamp=consume_timestamp,
            allocate=allocate, pull_batch_size=pull_batch_size, pull_interval_ms=pull_interval_ms,
            broker_suspend_max_time_ms=broker_suspend_max_time_ms,
            consumer_timeout_ms_when_suspend=consumer_timeout_ms_when_suspend,
            persist_consumer_offset_interval_ms=persist_consumer_offset_interval_ms,
            rebalance_interval_ms=rebalance_interval_ms, offset_store_dir=offset_store_dir,
            instance_options=dict(instance_name=instance_name, heartbeat_broker_interval_ms=heartbeat_broker_interval_ms,
                                  poll_name_server_interval_ms=poll_name_server_interval_ms))
        self.group = group
        self.namesrv = namesrv
        self._subs: list[tuple[str, Optional[str], Optional[str]]] = []
        self._listener: Optional[Listener] = None
        self._orderly = False
        self._core: Optional[ConsumerCore] = None
        self._service: Any = None
        # Validate the group and the settings now, not at start().
        ConsumerCore(group, namesrv, orderly=False, **self._core_args)

    # --- configuration ---

    def subscribe(self, topic: str, expression: Optional[str] = "*", *, sql: Optional[str] = None) -> SubscriptionData:
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

    def start(self) -> "PushConsumer":
        """Join the group and start consuming. Raises MQClientError without a listener or subscription."""
        if self._core is not None:
            raise MQClientError("the consumer is already started")
        if self._listener is None:
            raise MQClientError("no listener: call register_listener(fn) before start()")
        if not self._subs:
            raise MQClientError("no subscription: call subscribe(topic, expression) before start()")
        core = ConsumerCore(self.group, self.namesrv, orderly=self._orderly, **self._core_args)
        for topic, expression, sql in self._subs:
            core.subscribe(topic, expression, sql)
        if core.message_model is MessageModel.CLUSTERING:
            core.subscribe(core.retry_topic, "*")
        if self._orderly:
            self._service = OrderlyConsumeService(core, self._listener, self._opts["consume_thread_nums"],
                                                  self._opts["batch"], self.suspend_current_queue_time_ms,
                                                  self.max_reconsume_times)
        else:
            self._service = ConcurrentConsumeService(
                core, self._listener, self._opts["consume_thread_nums"], self._opts["batch"],
                None if self.max_reconsume_times < 0 else self.max_reconsume_times, self.consume_timeout * 60_000)
            core.periodic = self._service.periodic
        core.deliver = self._service.submit
        core.can_pull = self._flow_control
        self._service.start()
        try:
            core.start()
        except BaseException:
            self._service.stop(1.0)
            raise
        self._core = core
        exit_hooks.started(self)
        return self

    def _flow_control(self, req: PullRequest) -> float:
        """RocketMQ's pull flow control: 0 to pull now, else the pause in ms. Nothing is dropped."""
        pq = req.pq
        if pq.msg_count > self.pull_threshold_for_queue or pq.msg_size > self.pull_threshold_size_for_queue:
            return PULL_DELAY_WHEN_FLOW_CONTROL_MS
        if not self._orderly and pq.max_span() > self.consume_concurrently_max_span:
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

    def __enter__(self) -> "PushConsumer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- introspection ---

    @property
    def running(self) -> bool:
        """Started and not yet shutting down (False from the moment ``shutdown()`` begins)."""
        return self._core is not None and self._core.running

    @property
    def client_id(self) -> Optional[str]:
        return self._core.instance.client_id if self._core and self._core.instance else None

    def assigned_queues(self, include_retry: bool = False) -> list[MessageQueue]:
        """The queues of the subscribed topics this client consumes now (after the last rebalance); with
        ``include_retry`` also its share of the group's retry topic."""
        core = self._core
        if core is None or core.rebalance is None:
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
