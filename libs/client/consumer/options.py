"""Consumer settings, declared once: RocketMQ's DefaultMQPushConsumer / DefaultLitePullConsumer names,
snake_case, checked when the options are made (MQClientError naming the setting and its range).

``ConsumerOptions`` is what every consumer has (the push and pull consumers,
and the system groups of the scheduler and the txn-checker);
``PushConsumerOptions`` and ``PullConsumerOptions`` add their own::

    PushConsumer("orders", "127.0.0.1:9876", consume_thread_nums=4)       # keywords become the options
    PushConsumer("orders", options=PushConsumerOptions(consume_thread_nums=4))
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from rocketmesh.client.api import DEFAULT_TIMEOUT_MS
from rocketmesh.client.consumer.allocate import AllocateAveragely, AllocateStrategy, strategy_by_name
from rocketmesh.client.consumer.types import ConsumeFromWhere, MessageModel
from rocketmesh.client.errors import MQClientError
from rocketmesh.client.validators import check_topic
from rocketmesh.runtime.config import camel_case

#: CONSUME_FROM_TIMESTAMP without a timestamp starts this long ago (RocketMQ: half an hour).
DEFAULT_CONSUME_TIMESTAMP_AGO_MS = 1_800_000


def as_enum(cls: Any, value: Any, setting: str) -> Any:
    """``value`` as a member of ``cls`` (a member, its value or its name); MQClientError naming ``setting``."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str) and value.upper() in cls.__members__:
        return cls.__members__[value.upper()]
    try:
        return cls(value)
    except ValueError:
        raise MQClientError(f"{setting}: {value!r} is not one of {', '.join(cls.__members__)}") from None


def _within(setting: str, value: Any, low: float, high: float | None = None, unit: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low or (
            high is not None and value > high):
        bounds = f"within {low}..{high}" if high is not None else f"at least {low}"
        raise MQClientError(f"{setting} must be {bounds}{unit}, got {value!r}")


@dataclass(frozen=True)
class ConsumerOptions:
    """What every consumer has. Times are milliseconds unless the name says otherwise."""

    message_model: MessageModel | str = MessageModel.CLUSTERING
    consume_from: ConsumeFromWhere | str = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    #: Where CONSUME_FROM_TIMESTAMP starts (epoch ms); None: half an hour before the consumer was made.
    consume_timestamp: int | None = None
    #: A strategy, or its RocketMQ name ("AVG", "AVG_BY_CIRCLE", ...); None: allocate averagely.
    allocate: AllocateStrategy | str | None = None
    pull_batch_size: int = 32
    pull_interval_ms: int = 0
    #: Messages (and MiB) cached per queue before pulling pauses.
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100
    broker_suspend_max_time_ms: int = 15_000
    consumer_timeout_ms_when_suspend: int = 30_000
    persist_consumer_offset_interval_ms: int = 5000
    rebalance_interval_ms: int = 20_000
    #: Where a broadcasting consumer keeps its offsets (default ~/.rocketmesh_offsets).
    offset_store_dir: str | None = None
    instance_name: str | None = None
    #: The address in this client's id (RocketMQ's clientIP); None: this host's outward IPv4 address.
    client_ip: str | None = None
    heartbeat_broker_interval_ms: int = 30_000
    poll_name_server_interval_ms: int = 30_000
    #: How long route look-ups, heartbeats and offset requests wait for an answer (RocketMQ's
    #: mqClientApiTimeout); pulls have their own (``consumer_timeout_ms_when_suspend``, ``poll_timeout_ms``).
    mq_client_api_timeout_ms: int = DEFAULT_TIMEOUT_MS
    #: Record RocketMQ's message trace (SubBefore / SubAfter of each consumed message) into ``trace_topic``
    #: (None: RMQ_SYS_TRACE_TOPIC); see rocketmesh.client.trace.msg_trace.
    enable_msg_trace: bool = False
    trace_topic: str | None = None
    #: The ACL account requests are signed with (both or neither; see rocketmesh.acl).
    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: normalise once, here
        put(self, "message_model", as_enum(MessageModel, self.message_model, "message_model"))
        put(self, "consume_from", as_enum(ConsumeFromWhere, self.consume_from, "consume_from"))
        if self.consume_timestamp is None:
            put(self, "consume_timestamp", int(time.time() * 1000) - DEFAULT_CONSUME_TIMESTAMP_AGO_MS)
        if self.allocate is None:
            put(self, "allocate", AllocateAveragely())
        elif isinstance(self.allocate, str):
            put(self, "allocate", strategy_by_name(self.allocate))
        _within("pull_batch_size", self.pull_batch_size, 1, 1024)
        _within("pull_interval_ms", self.pull_interval_ms, 0, 65535)
        _within("pull_threshold_for_queue", self.pull_threshold_for_queue, 1, 65535)
        _within("pull_threshold_size_for_queue", self.pull_threshold_size_for_queue, 1, 1024, " (MiB)")
        _within("persist_consumer_offset_interval_ms", self.persist_consumer_offset_interval_ms, 1)
        _within("rebalance_interval_ms", self.rebalance_interval_ms, 1)
        _within("broker_suspend_max_time_ms", self.broker_suspend_max_time_ms, 1)
        _within("mq_client_api_timeout_ms", self.mq_client_api_timeout_ms, 1)
        if self.broker_suspend_max_time_ms >= self.consumer_timeout_ms_when_suspend:
            raise MQClientError("broker_suspend_max_time_ms must be less than consumer_timeout_ms_when_suspend")
        if not isinstance(self.enable_msg_trace, bool):
            raise MQClientError(f"enable_msg_trace must be True or False, got {self.enable_msg_trace!r}")
        if self.trace_topic is not None:
            check_topic(self.trace_topic)

    def instance_options(self) -> dict[str, Any]:
        """The settings of the shared client instance (ClientInstance.acquire's keywords)."""
        return dict(instance_name=self.instance_name, client_ip=self.client_ip,
                    heartbeat_broker_interval_ms=self.heartbeat_broker_interval_ms,
                    poll_name_server_interval_ms=self.poll_name_server_interval_ms,
                    request_timeout_ms=self.mq_client_api_timeout_ms,
                    access_key=self.access_key, secret_key=self.secret_key)

    def replace(self, **changes: Any) -> ConsumerOptions:
        """A copy with ``changes`` (checked as a new one is)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class PushConsumerOptions(ConsumerOptions):
    """A PushConsumer's settings: the common ones and how the listener is run."""

    consume_thread_nums: int = 20
    consume_message_batch_max_size: int = 1
    #: A concurrent consumer stops pulling a queue whose cached messages span more offsets than this.
    consume_concurrently_max_span: int = 2000
    #: -1: RocketMQ's default, the group's retryMaxTimes (16) for concurrent consumers, no limit for orderly.
    max_reconsume_times: int = -1
    #: Minutes a concurrent listener may hold a message before it is handed back for a retry.
    consume_timeout: float = 15
    suspend_current_queue_time_ms: int = 1000

    def __post_init__(self) -> None:
        super().__post_init__()
        _within("consume_thread_nums", self.consume_thread_nums, 1, 1000)
        _within("consume_message_batch_max_size", self.consume_message_batch_max_size, 1, 1024)
        _within("consume_concurrently_max_span", self.consume_concurrently_max_span, 1, 65535)
        if isinstance(self.max_reconsume_times, bool) or not isinstance(self.max_reconsume_times, int) \
                or self.max_reconsume_times < -1:
            raise MQClientError("max_reconsume_times must be an integer >= 0, or -1 for the default, "
                                f"got {self.max_reconsume_times!r}")
        if isinstance(self.consume_timeout, bool) or not isinstance(self.consume_timeout, (int, float)) \
                or self.consume_timeout <= 0:
            raise MQClientError(f"consume_timeout (minutes) must be a number > 0, got {self.consume_timeout!r}")
        _within("suspend_current_queue_time_ms", self.suspend_current_queue_time_ms, 1)


@dataclass(frozen=True)
class PullConsumerOptions(ConsumerOptions):
    """A PullConsumer's settings (RocketMQ's DefaultLitePullConsumer): the common ones, its own defaults,
    and how polls commit."""

    pull_batch_size: int = 10
    #: Commit what earlier polls returned every ``auto_commit_interval_ms``, at the next poll.
    auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    #: Messages cached over all queues before pulling pauses.
    pull_threshold_for_all: int = 10_000
    poll_timeout_ms: int = 5000

    def __post_init__(self) -> None:
        super().__post_init__()
        _within("auto_commit_interval_ms", self.auto_commit_interval_ms, 1000)
        _within("pull_threshold_for_all", self.pull_threshold_for_all, 1)
        _within("poll_timeout_ms", self.poll_timeout_ms, 0)


#: Settings whose RocketMQ name is not the camel case of ours.
_ROCKETMQ_NAMES = {"consume_from": "consumeFromWhere", "allocate": "allocateMessageQueueStrategy"}
#: Settings a consumer does not show an admin.
_PRIVATE = frozenset({"access_key", "secret_key"})


def option_properties(options: ConsumerOptions) -> dict[str, str]:
    """The settings as the string properties of a ConsumerRunningInfo, under RocketMQ's names (its push
    consumer's ``consumeThreadMin`` / ``consumeThreadMax`` for our one ``consume_thread_nums``); the ACL
    keys are left out."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.name in _PRIVATE or value is None:
            continue
        if isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, AllocateStrategy):
            text = value.name
        elif isinstance(value, (MessageModel, ConsumeFromWhere)):
            text = value.value
        else:
            text = str(value)
        out[_ROCKETMQ_NAMES.get(f.name) or camel_case(f.name)] = text
    if "consumeThreadNums" in out:
        out["consumeThreadMin"] = out["consumeThreadMax"] = out["consumeThreadNums"]
    return out


def options_from(cls: type[ConsumerOptions], options: ConsumerOptions | None, settings: dict[str, Any]
                 ) -> Any:
    """``options`` or ``cls(**settings)`` (not both); MQClientError naming an unknown setting."""
    if options is not None:
        if settings:
            raise MQClientError(f"give either options= or settings ({', '.join(sorted(settings))}), not both")
        if not isinstance(options, cls):
            raise MQClientError(f"options must be a {cls.__name__}, got {type(options).__name__}")
        return options
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise MQClientError(f"unknown setting(s) {', '.join(unknown)}; {cls.__name__} has: {', '.join(sorted(known))}")
    return cls(**settings)
