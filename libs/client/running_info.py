"""What a running consumer tells an admin about itself, as RocketMQ's clients tell it: the answer to
GET_CONSUMER_RUNNING_INFO (ConsumerRunningInfo, with a ProcessQueueInfo per queue) and to
CONSUME_MESSAGE_DIRECTLY (ConsumeMessageDirectlyResult, whose outcome is a CMResult).

The JSON is RocketMQ's, so its tools read ours and ours read theirs. One quirk comes with it: the
``mqTable`` of a ConsumerRunningInfo is keyed by message queues written as JSON objects
(``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``), as the Java, C++ and Go clients all write it.
That is not JSON a strict parser takes, so :func:`loads_lenient` reads it.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

from rocketmesh.filter import FilterSyntaxError, SubscriptionData
from rocketmesh.model.message import MessageQueue

#: ConsumerRunningInfo property names (RocketMQ's, values are strings).
PROP_NAMESERVER_ADDR = "PROP_NAMESERVER_ADDR"
PROP_THREADPOOL_CORE_SIZE = "PROP_THREADPOOL_CORE_SIZE"
PROP_CONSUME_ORDERLY = "PROP_CONSUMEORDERLY"
PROP_CONSUME_TYPE = "PROP_CONSUME_TYPE"
PROP_CLIENT_VERSION = "PROP_CLIENT_VERSION"
PROP_CONSUMER_START_TIMESTAMP = "PROP_CONSUMER_START_TIMESTAMP"

_MiB = 1024 * 1024


class CMResult(str, Enum):
    """The outcome of a CONSUME_MESSAGE_DIRECTLY (RocketMQ's CMResult)."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"


def epoch_ms(monotonic_s: float) -> int:
    """A ``time.monotonic()`` instant as epoch milliseconds (0 stays 0: never)."""
    if not monotonic_s:
        return 0
    return int((time.time() - (time.monotonic() - monotonic_s)) * 1000)


@dataclass(slots=True)
class ProcessQueueInfo:
    """One queue of a running consumer (RocketMQ's ProcessQueueInfo): the offset it committed, the messages
    pulled and not yet consumed ("cached"), those an orderly consumer is consuming ("transaction"), its
    queue lock and when it last pulled and consumed (epoch ms)."""

    commit_offset: int = -1
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    dropped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON of it."""
        return {"commitOffset": self.commit_offset, "cachedMsgMinOffset": self.cached_msg_min_offset,
                "cachedMsgMaxOffset": self.cached_msg_max_offset, "cachedMsgCount": self.cached_msg_count,
                "cachedMsgSizeInMiB": self.cached_msg_size_in_mib,
                "transactionMsgMinOffset": self.transaction_msg_min_offset,
                "transactionMsgMaxOffset": self.transaction_msg_max_offset,
                "transactionMsgCount": self.transaction_msg_count, "locked": self.locked,
                "tryUnlockTimes": self.try_unlock_times, "lastLockTimestamp": self.last_lock_timestamp,
                "droped": self.dropped, "lastPullTimestamp": self.last_pull_timestamp,
                "lastConsumeTimestamp": self.last_consume_timestamp}

    @classmethod
    def from_json(cls, d: Any) -> ProcessQueueInfo:
        """Read RocketMQ's JSON of it (absent fields keep their defaults); ValueError when malformed."""
        if not isinstance(d, dict):
            raise ValueError(f"a process queue info must be a JSON object, not {type(d).__name__}")
        return cls(_int(d, "commitOffset", -1), _int(d, "cachedMsgMinOffset"), _int(d, "cachedMsgMaxOffset"),
                   _int(d, "cachedMsgCount"), _int(d, "cachedMsgSizeInMiB"), _int(d, "transactionMsgMinOffset"),
                   _int(d, "transactionMsgMaxOffset"), _int(d, "transactionMsgCount"), _bool(d, "locked"),
                   _int(d, "tryUnlockTimes"), _int(d, "lastLockTimestamp"), _bool(d, "droped"),
                   _int(d, "lastPullTimestamp"), _int(d, "lastConsumeTimestamp"))


@dataclass(slots=True)
class ConsumerRunningInfo:
    """A consumer client's running state (RocketMQ's ConsumerRunningInfo): its settings and the ``PROP_*``
    figures as string ``properties``, its subscriptions, a :class:`ProcessQueueInfo` per queue it holds,
    per-topic consume rates (``status_table``, RocketMQ's ConsumeStatus JSON; may be empty) and, when
    asked for, its threads' stacks."""

    properties: dict[str, str] = field(default_factory=dict)
    subscriptions: list[SubscriptionData] = field(default_factory=list)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, dict[str, Any]] = field(default_factory=dict)
    jstack: str | None = None

    @property
    def consume_type(self) -> str | None:
        """CONSUME_PASSIVELY (a push consumer) or CONSUME_ACTIVELY (a pull consumer), as the client says."""
        return self.properties.get(PROP_CONSUME_TYPE)

    @property
    def start_timestamp(self) -> int:
        """When the consumer started (epoch ms; 0 when it does not say)."""
        value = self.properties.get(PROP_CONSUMER_START_TIMESTAMP, "")
        return int(value) if value.isdigit() else 0

    @property
    def orderly(self) -> bool:
        """The consumer's listener is an orderly one."""
        return self.properties.get(PROP_CONSUME_ORDERLY, "").lower() == "true"

    def stalled_queues(self, now_ms: int | None = None) -> dict[MessageQueue, str]:
        """The queues that look stuck, each with why (RocketMQ's analyzeProcessQueue): of an orderly consumer,
        those whose lock it does not hold; of a concurrent one, those holding messages with nothing consumed
        for a minute. Empty for a consumer that is not pushed messages."""
        if self.consume_type != "CONSUME_PASSIVELY":
            return {}
        now = int(time.time() * 1000) if now_ms is None else now_ms
        out = {}
        for mq, pq in sorted(self.mq_table.items()):
            if self.orderly and not pq.locked:
                out[mq] = f"can't lock for a while, {now - pq.last_lock_timestamp}ms"
            elif not self.orderly and pq.cached_msg_count > 0 and now - pq.last_consume_timestamp > 60_000:
                out[mq] = f"can't consume for a while, maybe blocked, {now - pq.last_consume_timestamp}ms"
        return out

    def encode(self) -> bytes:
        """The body of a GET_CONSUMER_RUNNING_INFO answer, as RocketMQ's clients write it (``mqTable`` keyed by
        message queue objects, in RocketMQ's queue order)."""
        table = b",".join(orjson.dumps(_mq_json(mq)) + b":" + orjson.dumps(info.to_json())
                          for mq, info in sorted(self.mq_table.items()))
        head: dict[str, Any] = {"properties": self.properties,
                                "subscriptionSet": [s.to_json() for s in self.subscriptions],
                                "statusTable": self.status_table}
        if self.jstack is not None:
            head["jstack"] = self.jstack
        return orjson.dumps(head)[:-1] + b',"mqTable":{' + table + b"}}"

    @classmethod
    def decode(cls, body: bytes) -> ConsumerRunningInfo:
        """Read a GET_CONSUMER_RUNNING_INFO answer (RocketMQ's form, or with ``mqTable`` keys that are strings
        holding the queue's JSON); ValueError when it is not one."""
        data = _loads(body)
        # An absent (or null) part is empty; one of the wrong kind is an error.
        props, subs, table, status = (_or(data.get("properties"), {}), _or(data.get("subscriptionSet"), []),
                                      _or(data.get("mqTable"), {}), _or(data.get("statusTable"), {}))
        if not (isinstance(props, dict) and isinstance(subs, list) and isinstance(table, dict)
                and isinstance(status, dict)):
            raise ValueError("properties, subscriptionSet, mqTable and statusTable must be objects (a list for "
                             "subscriptionSet)")
        try:
            subscriptions = [SubscriptionData.from_json(s) for s in subs]
        except FilterSyntaxError as exc:
            raise ValueError(f"a subscription does not parse: {exc}") from None
        jstack = data.get("jstack")
        return cls({str(k): _text(v) for k, v in props.items()}, subscriptions,
                   {_mq_of(k): ProcessQueueInfo.from_json(v) for k, v in table.items()},
                   {str(k): v for k, v in status.items() if isinstance(v, dict)},
                   jstack if isinstance(jstack, str) else None)


@dataclass(slots=True)
class ConsumeMessageDirectlyResult:
    """What a consumer's listener made of a message an admin had it consume (RocketMQ's
    ConsumeMessageDirectlyResult): ``consume_result`` (None when the client gave none), the error's text in
    ``remark`` when the listener raised, how long it took."""

    order: bool = False
    auto_commit: bool = True
    consume_result: CMResult | None = None
    remark: str | None = None
    spent_time_mills: int = 0

    def encode(self) -> bytes:
        """The body of a CONSUME_MESSAGE_DIRECTLY answer (RocketMQ's JSON; absent fields left out)."""
        out: dict[str, Any] = {"order": self.order, "autoCommit": self.auto_commit,
                               "spentTimeMills": self.spent_time_mills}
        if self.consume_result is not None:
            out["consumeResult"] = self.consume_result.value
        if self.remark is not None:
            out["remark"] = self.remark
        return orjson.dumps(out)

    @classmethod
    def decode(cls, body: bytes) -> ConsumeMessageDirectlyResult:
        """Read a CONSUME_MESSAGE_DIRECTLY answer; ValueError when it is not one."""
        data = _loads(body)
        result = data.get("consumeResult")
        remark = data.get("remark")
        try:
            consume_result = None if result is None else CMResult(result)
        except ValueError:
            raise ValueError(f"unknown consumeResult {result!r}") from None
        return cls(_bool(data, "order"), _bool(data, "autoCommit", True), consume_result,
                   remark if isinstance(remark, str) else None, _int(data, "spentTimeMills"))


# --- reading ---------------------------------------------------------------------------------------------

def _loads(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        try:
            data = loads_lenient(body.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 text: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SCALARS = json.JSONDecoder()


def loads_lenient(text: str) -> Any:
    """JSON, also where an object's key is itself an object (as RocketMQ's clients write a map keyed by
    objects): such a key is read as a tuple of its sorted ``(name, value)`` pairs. ValueError when the text
    is not that."""
    try:
        value, end = _value(text, _skip(text, 0))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if _skip(text, end) != len(text):
        raise ValueError(f"extra data at {end}")
    return value


def _skip(s: str, i: int) -> int:
    m = _WHITESPACE.match(s, i)
    return i if m is None else m.end()


def _value(s: str, i: int) -> tuple[Any, int]:
    c = s[i:i + 1]
    if c == "{":
        return _object(s, i + 1)
    if c == "[":
        return _array(s, i + 1)
    try:
        return _SCALARS.raw_decode(s, i)
    except json.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None


def _object(s: str, i: int) -> tuple[dict[Any, Any], int]:
    out: dict[Any, Any] = {}
    i = _skip(s, i)
    if s.startswith("}", i):
        return out, i + 1
    while True:
        key, i = _value(s, i)
        if isinstance(key, dict):
            try:
                key = tuple(sorted(key.items()))
                hash(key)
            except TypeError:
                raise ValueError(f"an object key at {i} holds objects or lists") from None
        elif isinstance(key, list):
            raise ValueError(f"a list as an object key at {i}")
        i = _skip(s, i)
        if not s.startswith(":", i):
            raise ValueError(f"expected ':' at {i}")
        out[key], i = _value(s, _skip(s, i + 1))
        i = _skip(s, i)
        if s.startswith("}", i):
            return out, i + 1
        if not s.startswith(",", i):
            raise ValueError(f"expected ',' or '}}' at {i}")
        i = _skip(s, i + 1)


def _array(s: str, i: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    i = _skip(s, i)
    if s.startswith("]", i):
        return out, i + 1
    while True:
        item, i = _value(s, i)
        out.append(item)
        i = _skip(s, i)
        if s.startswith("]", i):
            return out, i + 1
        if not s.startswith(",", i):
            raise ValueError(f"expected ',' or ']' at {i}")
        i = _skip(s, i + 1)


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    # The keys in the order RocketMQ's Java client writes them.
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def _mq_of(key: Any) -> MessageQueue:
    """An ``mqTable`` key as a MessageQueue: a queue object (read as pairs) or a string holding its JSON."""
    d: Any = dict(key) if isinstance(key, tuple) else None
    if isinstance(key, str):
        try:
            d = orjson.loads(key)
        except orjson.JSONDecodeError:
            d = None
    if not isinstance(d, dict):
        raise ValueError(f"an mqTable key must be a message queue, got {key!r:.80}")
    try:
        return MessageQueue(str(d["topic"]), str(d["brokerName"]), int(d["queueId"]))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"an mqTable key must be a message queue, got {d!r:.80}") from None


def _or(value: Any, empty: Any) -> Any:
    return empty if value is None else value


def _int(d: dict[str, Any], key: str, default: int = 0) -> int:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool):
        raise ValueError(f"{key} must be an integer, got {v!r}")
    try:
        return int(v)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be an integer, got {v!r:.40}") from None


def _bool(d: dict[str, Any], key: str, default: bool = False) -> bool:
    v = d.get(key)
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError(f"{key} must be true or false, got {v!r:.40}")


def _text(v: Any) -> str:
    """A property value as the string RocketMQ's Properties hold."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return v if isinstance(v, str) else json.dumps(v)
