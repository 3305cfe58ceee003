"""Custom headers of broker requests and responses: what travels in a command's ``ext``.

Field names are RocketMQ's (``SendMessageRequestHeader.producerGroup`` ...), in
the ``ext`` object of the JSON header; dataclass attributes are their
snake_case forms. ``from_ext`` checks presence and types, so a handler gets a
typed header or a :class:`HeaderError` naming the field, never a KeyError.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from typing import Any, TypeVar

from rocketmesh.model.topics import DEFAULT_TOPIC
from rocketmesh.runtime.config import camel_case

H = TypeVar("H", bound="Header")

_MISSING = dataclasses.MISSING


class HeaderError(ValueError):
    """A request header field is missing or of the wrong type."""


@cache
def _schema(cls: type) -> tuple[tuple[str, str, type, bool, Any], ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        optional = False
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp, optional = args[0], True
        has_default = f.default is not _MISSING or f.default_factory is not _MISSING
        default = f.default if f.default is not _MISSING else None
        # A field whose wire name is not its camelCase (RocketMQ's ``clientID``) says so in its metadata.
        out.append((f.name, f.metadata.get("key") or camel_case(f.name), tp, optional or has_default, default))
    return tuple(out)


def _parse_int(v: Any, key: str) -> int:
    if type(v) is str:
        try:
            return int(v)
        except ValueError:
            pass
    raise HeaderError(f"the custom field <{key}> must be an integer, got {type(v).__name__} {v!r:.40}")


#: What RocketMQ's clients send for a boolean field: Java's "true"/"false", the C++ client's "1"/"0".
_BOOLS: dict[Any, bool] = {"true": True, "false": False, "1": True, "0": False, 1: True, 0: False}


def decode_fields(cls: type[H], ext: Any) -> H:
    """Build header ``cls`` from a request's ``ext`` by its fields; raises HeaderError naming the bad field.

    The generic decoder behind :meth:`Header.from_ext`; a hot-path header's own ``from_ext`` falls back
    to it for anything off its fast path, so both give the same header and the same errors.
    """
    if not isinstance(ext, dict):
        raise HeaderError("the request header has no ext object")
    values = {}
    # A class is hashable: mypy reads the dataclass's instance ``__hash__ = None`` as the class's own.
    for name, key, tp, optional, _default in _schema(cls):  # type: ignore[arg-type]
        v = ext.get(key)
        if v is None:
            if not optional:
                raise HeaderError(f"the custom field <{key}> is null")
            continue
        # RocketMQ's own clients send every field as a string: "12" and "true" are taken as typed values.
        if tp is int:
            if type(v) is not int:
                v = _parse_int(v, key)
        elif tp is bool:
            if type(v) is not bool:
                parsed = _BOOLS.get(v.lower()) if type(v) is str else _BOOLS.get(v) if type(v) is int else None
                if parsed is None:
                    raise HeaderError(f"the custom field <{key}> must be true or false, got {v!r:.40}")
                v = parsed
        elif tp is str:
            if not isinstance(v, str):
                raise HeaderError(f"the custom field <{key}> must be a string, got {type(v).__name__}")
        values[name] = v
    return cls(**values)


def encode_fields(header: Any) -> dict[str, Any]:
    """The header as an ``ext`` object by its fields (None fields left out): the generic encoder behind
    :meth:`Header.to_ext`."""
    out = {}
    for name, key, _tp, _opt, _default in _schema(type(header)):  # type: ignore[arg-type]  # as in decode_fields
        v = getattr(header, name)
        if v is not None:
            out[key] = v
    return out


class Header:
    """Base of every typed header: ``from_ext`` decodes one from a command's ``ext`` (HeaderError naming
    the field when it is missing or mistyped), ``to_ext`` encodes it. Client and server use the same class."""

    __slots__ = ()

    @classmethod
    def from_ext(cls: type[H], ext: Any) -> H:
        """The header in ``ext``; raises HeaderError naming the bad field."""
        return decode_fields(cls, ext)

    def to_ext(self) -> dict[str, Any]:
        """The header as an ``ext`` object (None fields left out)."""
        return encode_fields(self)


@dataclass(slots=True)
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE / SEND_BATCH_MESSAGE. ``properties`` is RocketMQ's ``k\\x01v\\x02`` string;
    the body is the message body, or for a batch the batch encoding (``message_codec.encode_batch``)."""

    producer_group: str
    topic: str
    queue_id: int
    born_timestamp: int
    default_topic: str = DEFAULT_TOPIC
    default_topic_queue_nums: int = 4
    sys_flag: int = 0
    flag: int = 0
    properties: str = ""
    reconsume_times: int = 0
    batch: bool = False
    max_reconsume_times: int | None = None

    # The hot path's own codec: the same fields as the generic one (a unit test holds them equal), spelled
    # out because a send pays for it twice (producer and broker). Anything off the fast path (a missing,
    # null or mistyped field) goes to the generic decoder, which gives the default or the HeaderError.

    def to_ext(self) -> dict[str, Any]:
        """The header as an ``ext`` object (``maxReconsumeTimes`` left out when None)."""
        ext = {
            "producerGroup": self.producer_group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "bornTimestamp": self.born_timestamp,
            "defaultTopic": self.default_topic,
            "defaultTopicQueueNums": self.default_topic_queue_nums,
            "sysFlag": self.sys_flag,
            "flag": self.flag,
            "properties": self.properties,
            "reconsumeTimes": self.reconsume_times,
            "batch": self.batch,
        }
        if self.max_reconsume_times is not None:
            ext["maxReconsumeTimes"] = self.max_reconsume_times
        return ext

    @classmethod
    def from_ext(cls, ext: Any) -> SendMessageRequestHeader:
        """The header in ``ext``; raises HeaderError naming the bad field."""
        try:
            get = ext.get
            group, topic, queue_id, born = ext["producerGroup"], ext["topic"], ext["queueId"], ext["bornTimestamp"]
        except (AttributeError, KeyError, TypeError):
            return decode_fields(cls, ext)
        default_topic, queue_nums = get("defaultTopic", DEFAULT_TOPIC), get("defaultTopicQueueNums", 4)
        sys_flag, flag, props = get("sysFlag", 0), get("flag", 0), get("properties", "")
        reconsume, batch, max_reconsume = get("reconsumeTimes", 0), get("batch", False), get("maxReconsumeTimes")
        if (type(group) is not str or type(topic) is not str or type(queue_id) is not int or type(born) is not int
                or type(default_topic) is not str or type(queue_nums) is not int or type(sys_flag) is not int
                or type(flag) is not int or type(props) is not str or type(reconsume) is not int
                or type(batch) is not bool or (max_reconsume is not None and type(max_reconsume) is not int)):
            return decode_fields(cls, ext)
        return cls(group, topic, queue_id, born, default_topic, queue_nums, sys_flag, flag, props, reconsume, batch,
                   max_reconsume)


#: SEND_MESSAGE_V2's one-letter keys (RocketMQ's SendMessageRequestHeaderV2, which the Java and C++ clients
#: send, also for SEND_BATCH_MESSAGE) and the SendMessageRequestHeader fields they stand for.
SEND_V2_KEYS = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
                "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
                "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch"}


def send_header_of(ext: Any) -> SendMessageRequestHeader:
    """The send header in ``ext``, written with the field names (SEND_MESSAGE) or the one-letter keys of
    SEND_MESSAGE_V2; raises HeaderError naming the bad field."""
    if type(ext) is dict and "b" in ext and "topic" not in ext:
        ext = {SEND_V2_KEYS.get(k, k): v for k, v in ext.items()}
    return SendMessageRequestHeader.from_ext(ext)


@dataclass(slots=True)
class SendMessageResponseHeader(Header):
    """``msgId`` is the offset message id(s): comma separated for a batch."""

    msg_id: str
    queue_id: int
    queue_offset: int
    transaction_id: str | None = None

    def to_ext(self) -> dict[str, Any]:
        """The header as an ``ext`` object (hot path: spelled out, as the generic encoder would)."""
        ext: dict[str, Any] = {"msgId": self.msg_id, "queueId": self.queue_id, "queueOffset": self.queue_offset}
        if self.transaction_id is not None:
            ext["transactionId"] = self.transaction_id
        return ext

    @classmethod
    def from_ext(cls, ext: Any) -> SendMessageResponseHeader:
        """The header in ``ext`` (hot path); raises HeaderError naming the bad field."""
        try:
            h = cls(ext["msgId"], ext["queueId"], ext["queueOffset"], ext.get("transactionId"))
        except (KeyError, TypeError):
            return decode_fields(cls, ext)
        if (type(h.msg_id) is not str or type(h.queue_id) is not int or type(h.queue_offset) is not int
                or (h.transaction_id is not None and type(h.transaction_id) is not str)):
            return decode_fields(cls, ext)
        return h


@dataclass(slots=True)
class QueryMessageRequestHeader(Header):
    """QUERY_MESSAGE by key; the response body holds the matching records back to back."""

    topic: str
    key: str
    max_num: int = 32
    begin_timestamp: int = 0
    end_timestamp: int = 2**62


@dataclass(slots=True)
class ViewMessageRequestHeader(Header):
    """VIEW_MESSAGE_BY_ID: the commitlog offset decoded from an offset message id."""

    offset: int


@dataclass(slots=True)
class QueueOffsetRequestHeader(Header):
    """GET_MAX_OFFSET / GET_MIN_OFFSET / GET_EARLIEST_MSG_STORETIME; answered with ext {offset} or {timestamp}."""

    topic: str
    queue_id: int


@dataclass(slots=True)
class SearchOffsetRequestHeader(Header):
    """SEARCH_OFFSET_BY_TIMESTAMP: first offset stored at or after ``timestamp`` ms; answered with ext {offset}."""

    topic: str
    queue_id: int
    timestamp: int


@dataclass(slots=True)
class CreateTopicRequestHeader(Header):
    """UPDATE_AND_CREATE_TOPIC. ``perm`` is RocketMQ's bits: 2 write, 4 read, 1 inherit."""

    topic: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6
    default_topic: str = DEFAULT_TOPIC
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False


@dataclass(slots=True)
class TopicRequestHeader(Header):
    """DELETE_TOPIC_IN_BROKER, GET_TOPIC_STATS_INFO, QUERY_TOPIC_CONSUME_BY_WHO: one topic."""

    topic: str


@dataclass(slots=True)
class UnregisterClientRequestHeader(Header):
    """UNREGISTER_CLIENT: a client leaving its groups (RocketMQ spells the id's field ``clientID``)."""

    client_id: str = field(metadata={"key": "clientID"})
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclass(slots=True)
class ProducerGroupRequestHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST: one producer group (RocketMQ's GetProducerConnectionListRequestHeader)."""

    producer_group: str


# --- consumers ---

class PullSysFlag:
    """Bits of ``PullMessageRequestHeader.sys_flag`` (RocketMQ's PullSysFlag)."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8


@dataclass(slots=True)
class PullMessageRequestHeader(Header):
    """PULL_MESSAGE. ``subscription`` and ``expression_type`` ("TAG" or "SQL92") say what the
    broker filters on; ``suspend_timeout_millis`` is how long a pull that finds nothing may be held;
    ``commit_offset`` is stored as the group's offset when ``sys_flag`` has COMMIT_OFFSET."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int = 32
    sys_flag: int = 0
    commit_offset: int = 0
    suspend_timeout_millis: int = 15_000
    subscription: str = "*"
    sub_version: int = 0
    expression_type: str = "TAG"

    # The hot path's own codec, as SendMessageRequestHeader's (same fields as the generic one, which
    # anything off the fast path falls back to).

    def to_ext(self) -> dict[str, Any]:
        """The header as an ``ext`` object."""
        return {
            "consumerGroup": self.consumer_group,
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "maxMsgNums": self.max_msg_nums,
            "sysFlag": self.sys_flag,
            "commitOffset": self.commit_offset,
            "suspendTimeoutMillis": self.suspend_timeout_millis,
            "subscription": self.subscription,
            "subVersion": self.sub_version,
            "expressionType": self.expression_type,
        }

    @classmethod
    def from_ext(cls, ext: Any) -> PullMessageRequestHeader:
        """The header in ``ext``; raises HeaderError naming the bad field."""
        try:
            h = cls(ext["consumerGroup"], ext["topic"], ext["queueId"], ext["queueOffset"], ext.get("maxMsgNums", 32),
                    ext.get("sysFlag", 0), ext.get("commitOffset", 0), ext.get("suspendTimeoutMillis", 15_000),
                    ext.get("subscription", "*"), ext.get("subVersion", 0), ext.get("expressionType", "TAG"))
        except (KeyError, TypeError):
            return decode_fields(cls, ext)
        if (type(h.consumer_group) is not str or type(h.topic) is not str or type(h.queue_id) is not int
                or type(h.queue_offset) is not int or type(h.max_msg_nums) is not int or type(h.sys_flag) is not int
                or type(h.commit_offset) is not int or type(h.suspend_timeout_millis) is not int
                or type(h.subscription) is not str or type(h.sub_version) is not int
                or type(h.expression_type) is not str):
            return decode_fields(cls, ext)
        return h


@dataclass(slots=True)
class PullMessageResponseHeader(Header):
    """The answer's offsets: where to pull next, and the queue's bounds."""

    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int = 0

    def to_ext(self) -> dict[str, Any]:
        """The header as an ``ext`` object (hot path: spelled out, as the generic encoder would)."""
        return {"nextBeginOffset": self.next_begin_offset, "minOffset": self.min_offset,
                "maxOffset": self.max_offset, "suggestWhichBrokerId": self.suggest_which_broker_id}

    @classmethod
    def from_ext(cls, ext: Any) -> PullMessageResponseHeader:
        """The header in ``ext`` (hot path); raises HeaderError naming the bad field."""
        try:
            h = cls(ext["nextBeginOffset"], ext["minOffset"], ext["maxOffset"], ext.get("suggestWhichBrokerId", 0))
        except (KeyError, TypeError):
            return decode_fields(cls, ext)
        if (type(h.next_begin_offset) is not int or type(h.min_offset) is not int or type(h.max_offset) is not int
                or type(h.suggest_which_broker_id) is not int):
            return decode_fields(cls, ext)
        return h


@dataclass(slots=True)
class ConsumerGroupRequestHeader(Header):
    """GET_CONSUMER_LIST_BY_GROUP, GET_CONSUMER_CONNECTION_LIST, NOTIFY_CONSUMER_IDS_CHANGED: one group."""

    consumer_group: str


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    """QUERY_CONSUMER_OFFSET; answered with ext {offset}, or QUERY_NOT_FOUND when the group has none."""

    consumer_group: str
    topic: str
    queue_id: int


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    """UPDATE_CONSUMER_OFFSET: the group's next offset to consume in one queue."""

    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


@dataclass(slots=True)
class GetConsumeStatsRequestHeader(Header):
    """GET_CONSUME_STATS: one group's progress, over every topic it consumes or just ``topic``."""

    consumer_group: str
    topic: str | None = None


@dataclass(slots=True)
class GetConsumeStatsInBrokerHeader(Header):
    """GET_BROKER_CONSUME_STATS: the progress of every group with offsets on the broker, in one answer;
    ``is_order``: of ordered topics only (RocketMQ's field, which its clients always send)."""

    is_order: bool


@dataclass(slots=True)
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (admin -> broker) and RESET_CONSUMER_CLIENT_OFFSET (broker -> client):
    move ``group``'s offsets in ``topic`` to the first message stored at or after ``timestamp`` ms."""

    topic: str
    group: str
    timestamp: int
    is_force: bool = True


#: How long a broker waits for a consumer it calls on an admin's behalf when the admin does not say
#: (RocketMQ's broker waits 10 s for the client).
CALL_CONSUMER_TIMEOUT_MS = 10_000


@dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (admin -> broker -> client): the running state of the client ``client_id``
    of ``consumer_group``, with its threads' stacks when ``jstack_enable``. The answer's body is
    RocketMQ's ConsumerRunningInfo JSON (see rocketmesh.client.running_info).

    ``timeout_millis`` is rocketmesh's own (RocketMQ's admins leave it out): how long the broker waits for
    the client, which an admin sets below its own timeout so that it hears the broker's answer."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False
    timeout_millis: int = CALL_CONSUMER_TIMEOUT_MS


@dataclass(slots=True)
class ConsumeMessageDirectlyResultRequestHeader(Header):
    """CONSUME_MESSAGE_DIRECTLY (admin -> broker -> client): have the client ``client_id`` of
    ``consumer_group`` run the message ``msg_id`` (an offset message id) through its listener. The broker
    puts the message's stored record in the body and its own ``broker_name`` in the header before it
    forwards the request; the answer's body is RocketMQ's ConsumeMessageDirectlyResult JSON.
    ``timeout_millis``: as in :class:`GetConsumerRunningInfoRequestHeader`."""

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None
    timeout_millis: int = CALL_CONSUMER_TIMEOUT_MS


@dataclass(slots=True)
class SubscriptionGroupRequestHeader(Header):
    """DELETE_SUBSCRIPTIONGROUP: one group."""

    group_name: str


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    """CONSUMER_SEND_MSG_BACK: a message the group failed to consume, by its commitlog ``offset``, to be
    retried through ``%RETRY%<group>`` after ``delay_level`` (0: the broker picks 3 + reconsume times)."""

    offset: int
    group: str
    delay_level: int = 0
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None


@dataclass(slots=True)
class DeliverDueMessagesRequestHeader(Header):
    """DELIVER_DUE_MESSAGES (rocketmesh's own): re-put due entries of a parked queue (SCHEDULE_TOPIC_XXXX
    or the timer topic); the offsets travel in the body. Every offset below ``committed_offset`` is
    settled by the asking scheduler."""

    topic: str
    queue_id: int
    committed_offset: int = 0
    #: Timer topic only: an entry not yet due is parked again at the queue's tail (and counts as settled)
    #: rather than answered as not due, so a far-off timer does not hold the queue's progress back.
    roll: bool = False


@dataclass(slots=True)
class HaTransferRequestHeader(Header):
    """HA_TRANSFER (rocketmesh's own): commitlog bytes from ``offset`` for the slave at ``slave_addr``,
    which has everything below ``offset``. Held up to ``suspend_millis`` while there are none."""

    offset: int
    slave_addr: str
    max_bytes: int = 32 * 1024
    suspend_millis: int = 0


@dataclass(slots=True)
class HaTransferResponseHeader(Header):
    """The answer to HA_TRANSFER: the body holds the bytes from ``offset`` (within one commitlog file)."""

    offset: int
    master_max_offset: int
    master_min_offset: int
    file_size: int


@dataclass(slots=True)
class HaAppendRequestHeader(Header):
    """HA_APPEND (rocketmesh's own): the body is the master's commitlog bytes from ``offset``; files of
    ``file_size`` bytes on the master."""

    offset: int
    file_size: int


@dataclass(slots=True)
class QueryConsumeQueueRequestHeader(Header):
    """QUERY_CONSUME_QUEUE: up to ``count`` entries of one consume queue from ``index``. An admin read: it
    ignores the topic's read permission, so tools can list write-only topics such as ``%DLQ%<group>``."""

    topic: str
    queue_id: int
    index: int = 0
    count: int = 32
    consumer_group: str | None = None


# --- transactions ---

@dataclass(slots=True)
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (producer -> broker, oneway): the outcome of the transaction of the half message stored
    at ``commit_log_offset`` (queue offset ``tran_state_table_offset`` of RMQ_SYS_TRANS_HALF_TOPIC).
    ``commit_or_rollback`` is a SysFlag transaction value: 8 commit, 12 rollback, 0 not known yet."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool = False
    msg_id: str | None = None
    transaction_id: str | None = None


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (broker -> producer): what is the outcome of this transaction? The body is
    the half message's commitlog record; the answer comes back as END_TRANSACTION."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


class HalfCheckOutcome(str, Enum):
    """What a broker did with a CHECK_HALF_MESSAGE (the ``outcome`` of its answer)."""

    #: A live producer of the group was asked; unless it answered at once, the half message was stored again
    #: with its check count + 1 (the copy is what the next check looks at).
    CHECKED = "CHECKED"
    #: The transaction was committed or rolled back already: nothing left to check.
    DECIDED = "DECIDED"
    #: Checked transactionCheckMax times (or older than the store keeps files): moved to TRANS_CHECK_MAX_TIME_TOPIC.
    DISCARDED = "DISCARDED"
    #: No live producer of the group: nothing done, nothing counted; check again later.
    NO_PRODUCER = "NO_PRODUCER"
    #: No such half message in the store (removed with an expired commitlog file).
    MISSING = "MISSING"


@dataclass(slots=True)
class CheckHalfMessageRequestHeader(Header):
    """CHECK_HALF_MESSAGE (rocketmesh's own, txn-checker -> broker): check the half message at
    ``queue_offset`` of queue ``queue_id`` of RMQ_SYS_TRANS_HALF_TOPIC, stored at ``commit_log_offset``;
    answered with ext ``{"outcome": HalfCheckOutcome}``."""

    queue_id: int
    queue_offset: int
    commit_log_offset: int
    transaction_check_max: int = 15


@dataclass(slots=True)
class PendingHalfMessagesRequestHeader(Header):
    """GET_PENDING_HALF_MESSAGES (rocketmesh's own, admin -> broker): up to ``max_num`` half messages of
    ``topic`` whose transaction is not decided; the body of the answer is a JSON list."""

    topic: str
    max_num: int = 100


@dataclass(slots=True)
class PendingHalfMessagesResponseHeader(Header):
    """The answer to GET_PENDING_HALF_MESSAGES: how many are pending in all (the body lists up to max_num)."""

    total: int


@dataclass(slots=True)
class CheckHalfMessageResponseHeader(Header):
    """The answer to CHECK_HALF_MESSAGE: a :class:`HalfCheckOutcome` value."""

    outcome: str


# --- answers of broker reads ---

@dataclass(slots=True)
class QueueOffsetResponseHeader(Header):
    """The answer to GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP and QUERY_CONSUMER_OFFSET
    (RocketMQ's GetMaxOffsetResponseHeader ... QueryConsumerOffsetResponseHeader: one field, ``offset``)."""

    offset: int


@dataclass(slots=True)
class EarliestMsgStoretimeResponseHeader(Header):
    """The answer to GET_EARLIEST_MSG_STORETIME: the store time (epoch ms) of a queue's first message."""

    timestamp: int


@dataclass(slots=True)
class QueryMessageResponseHeader(Header):
    """The answer to QUERY_MESSAGE: how far the broker's index had got."""

    index_last_update_timestamp: int
    index_last_update_phyoffset: int


@dataclass(slots=True)
class DeliverDueMessagesResponseHeader(Header):
    """The answer to DELIVER_DUE_MESSAGES: how many entries were re-put, parked again (rolled), or found
    re-put already (duplicates); the body says which offsets."""

    delivered: int = 0
    rolled: int = 0
    duplicates: int = 0


@dataclass(slots=True)
class HaAppendResponseHeader(Header):
    """The answer to HA_APPEND, taken or refused: where the slave's commitlog ends."""

    offset: int


# --- name server ---

@dataclass(slots=True)
class RegisterBrokerRequestHeader(Header):
    """REGISTER_BROKER; the body holds the topic config table and data version. ``remoting_addr`` is the
    broker's TCP door (RocketMQ's own clients' address), empty when it opens none."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int
    ha_server_addr: str = ""
    remoting_addr: str = ""


@dataclass(slots=True)
class RegisterBrokerResponseHeader(Header):
    """The answer to REGISTER_BROKER: for a slave, its master's HA and broker addresses."""

    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass(slots=True)
class UnRegisterBrokerRequestHeader(Header):
    """UNREGISTER_BROKER: a broker leaving."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(slots=True)
class QueryDataVersionRequestHeader(Header):
    """QUERY_DATA_VERSION; the body is the broker's data version."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


@dataclass(slots=True)
class QueryDataVersionResponseHeader(Header):
    """The answer to QUERY_DATA_VERSION: whether the name server holds another data version."""

    changed: bool


@dataclass(slots=True)
class GetRouteInfoRequestHeader(Header):
    """GET_ROUTEINFO_BY_TOPIC."""

    topic: str


@dataclass(slots=True)
class DeleteTopicFromNamesrvRequestHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV."""

    topic: str


@dataclass(slots=True)
class GetTopicsByClusterRequestHeader(Header):
    """GET_TOPICS_BY_CLUSTER."""

    cluster: str


@dataclass(slots=True)
class PutKVConfigRequestHeader(Header):
    """PUT_KV_CONFIG."""

    namespace: str
    key: str
    value: str


@dataclass(slots=True)
class GetKVConfigRequestHeader(Header):
    """GET_KV_CONFIG."""

    namespace: str
    key: str


@dataclass(slots=True)
class GetKVConfigResponseHeader(Header):
    """The answer to GET_KV_CONFIG."""

    value: str


@dataclass(slots=True)
class DeleteKVConfigRequestHeader(Header):
    """DELETE_KV_CONFIG."""

    namespace: str
    key: str


@dataclass(slots=True)
class GetKVListByNamespaceRequestHeader(Header):
    """GET_KVLIST_BY_NAMESPACE."""

    namespace: str


@dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(Header):
    """WIPE_WRITE_PERM_OF_BROKER."""

    broker_name: str


@dataclass(slots=True)
class WipeWritePermOfBrokerResponseHeader(Header):
    """The answer to WIPE_WRITE_PERM_OF_BROKER: how many topics lost their write permission."""

    wipe_topic_count: int


@dataclass(slots=True)
class AddWritePermOfBrokerRequestHeader(Header):
    """ADD_WRITE_PERM_OF_BROKER."""

    broker_name: str


@dataclass(slots=True)
class AddWritePermOfBrokerResponseHeader(Header):
    """The answer to ADD_WRITE_PERM_OF_BROKER: how many topics got their write permission back."""

    add_topic_count: int
