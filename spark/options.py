"""The `rocketmesh` source's and sink's options, checked once, with errors that name the option.

Spark hands a data source its options with lower-cased keys; the names users
write are the Kafka source's and RocketMQ's (``startingOffsets``,
``maxRecordsPerTrigger``, ``consumerGroup``, ``subExpression``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from rocketmesh.client import NAMESRV_ADDR_ENV, MQError, namesrv_addrs_from
from rocketmesh.client.stream import check_group, make_subscription
from rocketmesh.filter import SubscriptionData

#: Queue offsets as users write them: ``{"broker-a:0": 17}`` or, for several topics, ``{"T": {"broker-a:0": 17}}``.
QueueOffsets = dict[str, dict[str, int]]
#: A starting point: "group", "earliest", "latest", a store time in epoch ms, or explicit offsets.
Start = str | int | QueueOffsets

SOURCE_OPTIONS = {
    "namesrv": "namesrv", "topic": "topic", "consumergroup": "consumerGroup", "subexpression": "subExpression",
    "sql": "sql", "startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets",
    "maxrecordspertrigger": "maxRecordsPerTrigger", "pullbatchsize": "pullBatchSize",
    "requesttimeoutms": "requestTimeoutMs",
}
SINK_OPTIONS = {"namesrv": "namesrv", "topic": "topic", "producergroup": "producerGroup",
                "requesttimeoutms": "requestTimeoutMs"}
#: Keys Spark itself may add to a source's or sink's options.
_SPARK_KEYS = {"path", "checkpointlocation"}
DEFAULT_GROUP = "spark-rocketmesh"
DEFAULT_PRODUCER_GROUP = "spark-rocketmesh-writer"


class OptionError(ValueError):
    """A bad option of the `rocketmesh` source or sink; the message names it and says what to write."""


def _check_keys(options: Mapping[str, str], known: Mapping[str, str], what: str) -> None:
    for key in options:
        if key.lower() not in known and key.lower() not in _SPARK_KEYS:
            raise OptionError(f"unknown option {key!r} of the rocketmesh {what}; known options: "
                              f"{', '.join(sorted(known.values()))}")


def _namesrv(options: Mapping[str, str]) -> str:
    text = options.get("namesrv") or os.environ.get(NAMESRV_ADDR_ENV)
    try:
        return ";".join(namesrv_addrs_from(text))
    except MQError as exc:
        raise OptionError(f"option 'namesrv': {exc} (e.g. .option('namesrv', '127.0.0.1:9876'), or set "
                          f"{NAMESRV_ADDR_ENV})") from None


def _positive_int(options: Mapping[str, str], key: str, default: int | None, lo: int = 1,
                  hi: int | None = None) -> int | None:
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {key!r} must be an integer, got {raw!r}") from None
    if value < lo or (hi is not None and value > hi):
        bound = f"within {lo}..{hi}" if hi is not None else f"at least {lo}"
        raise OptionError(f"option {key!r} must be {bound}, got {value}")
    return value


def _queue_offsets(raw: str, key: str, topics: tuple[str, ...]) -> QueueOffsets:
    """``{"broker-a:0": 17}`` (every topic) or ``{"T": {"broker-a:0": 17}}`` as topic -> queue -> offset."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OptionError(f"option {key!r} is not valid JSON ({exc}); write e.g. "
                          '{"broker-a:0": 17, "broker-a:1": 0}') from None
    if not isinstance(data, dict):
        raise OptionError(f"option {key!r} must be a JSON object of queue offsets, e.g. {{\"broker-a:0\": 17}}")
    nested = bool(data) and all(isinstance(v, dict) for v in data.values())
    per_topic = data if nested else {t: data for t in topics}
    out: QueueOffsets = {}
    for topic, queues in per_topic.items():
        if topic not in topics:
            raise OptionError(f"option {key!r} names topic {topic!r}, which is not in option 'topic' "
                              f"({','.join(topics)})")
        table: dict[str, int] = {}
        for queue, offset in queues.items():
            broker, sep, qid = str(queue).rpartition(":")
            if not sep or not broker or not qid.isdigit():
                raise OptionError(f"option {key!r}: queue {queue!r} is not 'brokerName:queueId' (e.g. 'broker-a:0')")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise OptionError(f"option {key!r}: the offset of {queue!r} must be an integer >= 0 "
                                  f"(or -2 earliest, -1 latest), got {offset!r}")
            table[f"{broker}:{int(qid)}"] = offset
        out[topic] = table
    return out


def _start(raw: str | None, key: str, default: str, topics: tuple[str, ...], allowed: tuple[str, ...]) -> Start:
    text = (raw if raw is not None else default).strip()
    if text.lower() in allowed:
        return text.lower()
    if text.lstrip("-").isdigit():
        if key == "endingOffsets":
            raise OptionError("option 'endingOffsets' takes 'latest' or a JSON of queue offsets, not a timestamp")
        value = int(text)
        if value < 0:
            raise OptionError(f"option {key!r}: a timestamp must be epoch milliseconds >= 0, got {value}")
        return value
    if text.startswith("{"):
        return _queue_offsets(text, key, topics)
    raise OptionError(f"option {key!r} must be one of {', '.join(allowed)}, a store time in epoch ms, or a JSON "
                      f"of queue offsets such as {{\"broker-a:0\": 17}}; got {text!r}")


@dataclass(frozen=True)
class SourceOptions:
    """What a read needs, parsed from the options Spark passes (see the README's table)."""

    namesrv: str
    topics: tuple[str, ...]
    group: str
    sub_expression: str = "*"
    sql: str | None = None
    starting: Start = "group"
    ending: Start = "latest"
    max_records_per_trigger: int | None = None
    pull_batch_size: int = 1024
    request_timeout_ms: int = 10_000
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Check every option; raises OptionError naming the first bad one."""
        options = {k.lower(): v for k, v in options.items()}
        _check_keys(options, SOURCE_OPTIONS, "source")
        namesrv = _namesrv(options)
        raw_topics = options.get("topic")
        if not raw_topics or not raw_topics.strip():
            raise OptionError("option 'topic' is required: the topic to read (comma-separated for several)")
        topics = tuple(dict.fromkeys(t.strip() for t in raw_topics.split(",") if t.strip()))
        group = (options.get("consumergroup") or DEFAULT_GROUP).strip()
        sub_expression = options.get("subexpression") or "*"
        sql = options.get("sql")
        if sql is not None and options.get("subexpression") not in (None, "*"):
            raise OptionError("options 'subExpression' and 'sql' exclude each other: filter by tags or by SQL92")
        subscriptions: dict[str, SubscriptionData] = {}
        for topic in topics:
            try:
                subscriptions[topic] = make_subscription(topic, sub_expression, sql)
            except MQError as exc:
                which = "sql" if sql is not None else "subExpression"
                raise OptionError(f"option {which!r} (or 'topic'): {exc}") from None
        try:
            check_group(group)
        except MQError as exc:
            raise OptionError(f"option 'consumerGroup': {exc}") from None
        starting = _start(options.get("startingoffsets"), "startingOffsets", "group", topics,
                          ("group", "earliest", "latest"))
        ending = _start(options.get("endingoffsets"), "endingOffsets", "latest", topics, ("latest",))
        return cls(
            namesrv=namesrv, topics=topics, group=group, sub_expression=sub_expression, sql=sql,
            starting=starting, ending=ending,
            max_records_per_trigger=_positive_int(options, "maxRecordsPerTrigger", None),
            pull_batch_size=_positive_int(options, "pullBatchSize", 1024, 1, 1024) or 1024,
            request_timeout_ms=_positive_int(options, "requestTimeoutMs", 10_000, 100) or 10_000,
            subscriptions=subscriptions,
        )

    @property
    def tags(self) -> frozenset[str] | None:
        """The tags a record must carry (exact check after the broker's tag-code filter); None: any."""
        sub = next(iter(self.subscriptions.values()))
        return None if self.sql is not None or sub.matches_all() else frozenset(sub.tags_set)


@dataclass(frozen=True)
class SinkOptions:
    """What a write needs: where to send, and the producer group it sends as."""

    namesrv: str
    topic: str | None = None
    producer_group: str = DEFAULT_PRODUCER_GROUP
    request_timeout_ms: int = 10_000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Check every option; raises OptionError naming the first bad one."""
        options = {k.lower(): v for k, v in options.items()}
        _check_keys(options, SINK_OPTIONS, "sink")
        topic = (options.get("topic") or "").strip() or None
        if topic is not None and "," in topic:
            raise OptionError("option 'topic' of the sink names one topic (a 'topic' column routes rows elsewhere)")
        return cls(namesrv=_namesrv(options), topic=topic,
                   producer_group=(options.get("producergroup") or DEFAULT_PRODUCER_GROUP).strip(),
                   request_timeout_ms=_positive_int(options, "requestTimeoutMs", 10_000, 100) or 10_000)
