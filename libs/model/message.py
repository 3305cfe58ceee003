"""The message model shared by the SDK, the broker and the services.

Names follow RocketMQ's: a ``Message`` is what a producer sends, a ``MessageExt``
is a stored message as read back (with its queue, offsets, hosts and times),
and ``MessageConst`` holds the reserved property keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntFlag

from rocketmesh.model.fields import decode_properties, encode_host_text, encode_message_id


class MessageConst:
    """Reserved property keys (RocketMQ's MessageConst)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    #: The transaction a half message (and every copy and op of it) belongs to: its UNIQ_KEY.
    TRANSACTION_ID = "__transactionId__"
    SHARDING_KEY = "SHARDING_KEY"
    TRACE_CONTEXT = "traceparent"
    # Timer messages (RocketMQ 5 names).
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"

    KEY_SEPARATOR = " "


class SysFlag(IntFlag):
    """Bits of the commitlog record's SYSFLAG field (RocketMQ's MessageSysFlag)."""

    NONE = 0
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20

    @staticmethod
    def transaction_value(flag: int) -> int:
        return flag & 0xC


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(slots=True)
class Message:
    """A message as a producer builds it.

    ``tags`` and ``keys`` live in ``properties`` under TAGS and KEYS, as in
    RocketMQ; the attributes are conveniences over them. ``keys`` may be one
    string (space separated keys) or a list of strings.
    """

    topic: str
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str = b"",
        tags: str | None = None,
        keys: str | list[str] | None = None,
        properties: dict[str, str] | None = None,
        flag: int = 0,
        delay_level: int = 0,
        deliver_at_ms: int | None = None,
        delay_ms: int | None = None,
    ) -> None:
        self.topic = topic
        self.body = body.encode() if isinstance(body, str) else bytes(body)
        self.properties = dict(properties) if properties else {}
        self.flag = flag
        if tags:
            self.properties[MessageConst.TAGS] = tags
        if keys:
            self.keys = keys
        if delay_level:
            self.delay_level = delay_level
        if deliver_at_ms is not None:
            self.deliver_at_ms = deliver_at_ms
        if delay_ms is not None:
            self.delay_ms = delay_ms

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set(MessageConst.TAGS, value)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)

    @keys.setter
    def keys(self, value: str | list[str] | None) -> None:
        if isinstance(value, (list, tuple)):
            value = MessageConst.KEY_SEPARATOR.join(value)
        self._set(MessageConst.KEYS, value)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(MessageConst.DELAY_TIME_LEVEL, "0"))

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        self._set(MessageConst.DELAY_TIME_LEVEL, str(int(level)) if level else None)

    @property
    def deliver_at_ms(self) -> int | None:
        """A timer message's delivery time (epoch ms), or None: the broker holds it until then."""
        value = self.properties.get(MessageConst.TIMER_DELIVER_MS)
        return int(value) if value is not None else None

    @deliver_at_ms.setter
    def deliver_at_ms(self, value: int | None) -> None:
        self._set(MessageConst.TIMER_DELIVER_MS, None if value is None else str(int(value)))

    @property
    def delay_ms(self) -> int | None:
        """A timer message's delay from its arrival at the broker (ms), or None."""
        value = self.properties.get(MessageConst.TIMER_DELAY_MS)
        return int(value) if value is not None else None

    @delay_ms.setter
    def delay_ms(self, value: int | None) -> None:
        self._set(MessageConst.TIMER_DELAY_MS, None if value is None else str(int(value)))

    def put_user_property(self, name: str, value: str) -> None:
        """Set a user property (the name must not be a reserved one)."""
        self.properties[name] = str(value)

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    def _set(self, name: str, value: str | None) -> None:
        if value is None or value == "":
            self.properties.pop(name, None)
        else:
            self.properties[name] = value


_EXT_FIELDS = ("topic", "body", "properties", "flag", "queue_id", "queue_offset", "commitlog_offset", "store_size",
               "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
               "prepared_transaction_offset", "body_crc", "msg_id")


class MessageExt:
    """A stored message as read back from a broker's commitlog.

    ``body`` is what the producer sent: a body stored compressed (``sys_flag & SysFlag.COMPRESSED``) is
    inflated by the decoder, while ``sys_flag``, ``body_crc`` and ``store_size`` are the stored record's.

    ``properties`` may be given decoded (a dict) or, with ``properties=None``,
    as the record's raw ``raw_properties`` bytes (or a pair of byte strings, the
    second appended to the first), decoded on first use: a
    consumer that never looks at them does not pay for them.
    """

    __slots__ = ("topic", "body", "_properties", "_raw_properties", "flag", "queue_id", "queue_offset",
                 "commitlog_offset", "store_size", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
                 "store_host", "reconsume_times", "prepared_transaction_offset", "body_crc", "_msg_id",
                 "consume_start_time")

    def __init__(self, topic: str, body: bytes, properties: dict[str, str] | None, flag: int, queue_id: int,
                 queue_offset: int, commitlog_offset: int, store_size: int, sys_flag: int, born_timestamp: int,
                 born_host: str, store_timestamp: int, store_host: str, reconsume_times: int,
                 prepared_transaction_offset: int, body_crc: int, msg_id: str | None,
                 raw_properties: bytes | tuple[bytes, bytes] = b"") -> None:
        self.topic = topic
        self.body = body
        self._properties = properties
        self._raw_properties = raw_properties
        self.flag = flag
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commitlog_offset = commitlog_offset
        self.store_size = store_size
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body_crc = body_crc
        self._msg_id = msg_id
        #: When a push consumer handed the message to its listener (epoch ms; 0 before): RocketMQ's
        #: CONSUME_START_TIME, which the consume timeout is measured from.
        self.consume_start_time = 0

    @property
    def msg_id(self) -> str:
        """RocketMQ's offset message id (store host + commitlog offset); made on first use when not given."""
        msg_id = self._msg_id
        if msg_id is None:
            msg_id = self._msg_id = encode_message_id(encode_host_text(self.store_host), self.commitlog_offset)
        return msg_id

    @msg_id.setter
    def msg_id(self, value: str | None) -> None:
        self._msg_id = value

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = {}
            raw = self._raw_properties
            if isinstance(raw, tuple):  # the record's own, then what the pull added (MIN_OFFSET, MAX_OFFSET)
                raw = raw[0] + raw[1]
            if raw:
                props = decode_properties(raw)
            self._properties = props
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._properties = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _EXT_FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "MessageExt(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _EXT_FIELDS) + ")"

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)

    @property
    def unique_key(self) -> str | None:
        """The client-side unique id (UNIQ_KEY), which RocketMQ shows as the msgId."""
        return self.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(MessageConst.DELAY_TIME_LEVEL, "0"))

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)
