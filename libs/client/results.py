"""What the SDK hands back: send results, per-queue offset figures, consumer group progress and connections."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from rocketmesh.model.message import MessageQueue
from rocketmesh.remoting import ResponseCode


class SendStatus(Enum):
    """How a stored message fared (RocketMQ's SendStatus).

    Every status means the broker stored the message; the ones other than
    SEND_OK say a flush or a replication it was asked to wait for did not
    finish in time.
    """

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


#: The response codes of a send that stored the message, and the status each means.
STORED_CODES: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

DEFAULT_REGION = "DefaultRegion"


@dataclass(slots=True)
class SendResult:
    """The outcome of a send.

    ``msg_id`` is the client-side unique id (the UNIQ_KEY property, what
    RocketMQ shows as the message id); ``offset_msg_id`` is the broker's id
    (store host + commitlog offset). For a batch both are comma separated, one
    per message, and ``queue_offset`` is the first message's offset.
    """

    send_status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str = DEFAULT_REGION

    @property
    def ok(self) -> bool:
        """True for SEND_OK."""
        return self.send_status is SendStatus.SEND_OK


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue's offsets on its broker (RocketMQ's TopicOffset)."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int

    @property
    def count(self) -> int:
        """Messages held: max - min."""
        return self.max_offset - self.min_offset


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    """One queue's progress for a consumer group (RocketMQ's OffsetWrapper).

    ``broker_offset`` is the queue's max offset, ``consumer_offset`` the
    group's committed offset, ``last_timestamp`` the store time (epoch ms) of
    the last message the group consumed there (0 when none).
    """

    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        """Messages not consumed yet: broker offset - consumer offset."""
        return self.broker_offset - self.consumer_offset


def _object(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object, not {type(data).__name__}")  # noqa: TRY004 - bad data
    return data


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a JSON list, not {type(value).__name__}")  # noqa: TRY004 - bad data
    return value


@dataclass(slots=True)
class ConsumeStats:
    """A consumer group's progress over its queues (RocketMQ's ConsumeStats), queues in order."""

    offset_table: dict[MessageQueue, OffsetWrapper]
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        """The lag summed over every queue."""
        return sum(w.diff for w in self.offset_table.values())

    @classmethod
    def from_json(cls, data: Any) -> ConsumeStats:
        """Read a broker's ConsumeStats JSON (``offsetTable`` a list of queue entries, each with its ``topic``,
        ``brokerName`` and ``queueId``); ValueError when malformed."""
        data = _object(data, "a consume stats")
        table: dict[MessageQueue, OffsetWrapper] = {}
        try:
            for e in _list(data, "offsetTable"):
                mq = MessageQueue(str(e["topic"]), str(e["brokerName"]), int(e["queueId"]))
                table[mq] = OffsetWrapper(int(e.get("brokerOffset", 0)), int(e.get("consumerOffset", 0)),
                                          int(e.get("lastTimestamp", 0)))
            tps = float(data.get("consumeTps") or 0.0)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"bad offset table entry: {exc!r}") from None
        return cls(dict(sorted(table.items())), tps)


@dataclass(slots=True)
class ConsumeStatsList:
    """One broker's progress of every consumer group with offsets there, in one answer (RocketMQ's
    ConsumeStatsList).

    ``consume_stats`` maps each group (in name order) to the ConsumeStats of each topic it has progress in
    (RocketMQ's consumeStatsList); ``total_diff`` is the lag of them all.
    """

    broker_addr: str
    total_diff: int
    consume_stats: dict[str, list[ConsumeStats]]

    def group_stats(self, group: str) -> ConsumeStats:
        """``group``'s progress over all its topics on this broker, as one ConsumeStats (queues in order,
        TPS summed); an empty one when the broker listed no such group."""
        table: dict[MessageQueue, OffsetWrapper] = {}
        tps = 0.0
        for stats in self.consume_stats.get(group, []):
            table.update(stats.offset_table)
            tps += stats.consume_tps
        return ConsumeStats(dict(sorted(table.items())), tps)

    @classmethod
    def from_json(cls, data: Any) -> ConsumeStatsList:
        """Read RocketMQ's ConsumeStatsList JSON (``consumeStatsList`` a list of ``{group: [ConsumeStats]}``
        objects); ValueError when malformed."""
        data = _object(data, "a consume stats list")
        groups: dict[str, list[ConsumeStats]] = {}
        for entry in _list(data, "consumeStatsList"):
            for group, stats in _object(entry, "a consumeStatsList entry").items():
                if not isinstance(stats, list):
                    raise ValueError(f"the consume stats of group {group} must be a JSON list")
                groups[str(group)] = [ConsumeStats.from_json(s) for s in stats]
        try:
            total_diff = int(data.get("totalDiff") or 0)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad totalDiff: {exc}") from None
        return cls(str(data.get("brokerAddr") or ""), total_diff, groups)


@dataclass(frozen=True, slots=True)
class Connection:
    """One client of a producer or consumer group as a broker sees it (RocketMQ's Connection): its id,
    address, language and ``version`` (RocketMQ's MQVersion ordinal: 401 is V4_9_4), and when the broker
    last heard its heartbeat (epoch ms)."""

    client_id: str
    client_addr: str
    language: str
    last_update_timestamp: int
    version: int = 0

    @classmethod
    def from_json(cls, data: Any) -> Connection:
        """Read a broker's Connection JSON; ValueError when malformed."""
        data = _object(data, "a connection")
        try:
            return cls(str(data["clientId"]), str(data.get("clientAddr", "")), str(data.get("language", "")),
                       int(data.get("lastUpdateTimestamp", 0)), int(data.get("version", 0)))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"bad connection: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class AclAccount:
    """What the account an admin signs as may do, as a broker says (GET_ACL_ACCOUNT): its admin flag, its
    default permissions on topics and groups and the ones it lists (RocketMQ's ``DENY``, ``PUB``, ``SUB``,
    ``PUB|SUB``). ``acl_enable`` False: the broker checks no ACL, and anyone may do anything."""

    acl_enable: bool
    access_key: str
    admin: bool
    default_topic_perm: str
    default_group_perm: str
    topic_perms: dict[str, str]
    group_perms: dict[str, str]

    @classmethod
    def from_json(cls, data: Any) -> AclAccount:
        """Read a GET_ACL_ACCOUNT answer (``topicPerms`` / ``groupPerms`` as ``name=PERM`` strings);
        ValueError when malformed."""
        data = _object(data, "an ACL account")

        def perms(key: str) -> dict[str, str]:
            out = {}
            for item in _list(data, key):
                name, sep, perm = str(item).rpartition("=")
                if not sep:
                    raise ValueError(f"{key} entry {item!r} is not name=PERM")
                out[name] = perm
            return out
        return cls(bool(data.get("aclEnable")), str(data.get("accessKey") or ""), bool(data.get("admin")),
                   str(data.get("defaultTopicPerm") or "DENY"), str(data.get("defaultGroupPerm") or "DENY"),
                   perms("topicPerms"), perms("groupPerms"))


@dataclass(slots=True)
class ProducerConnection:
    """A producer group's online clients (RocketMQ's ProducerConnection), by client id."""

    connections: list[Connection]


@dataclass(slots=True)
class ConsumerConnection:
    """A consumer group's running clients and what they subscribe (RocketMQ's ConsumerConnection).

    ``subscriptions`` maps each topic to RocketMQ's SubscriptionData JSON
    (``topic``, ``subString``, ``expressionType`` ...). ``consume_type`` is
    CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull).
    """

    connections: list[Connection]
    subscriptions: dict[str, dict[str, Any]]
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


@dataclass(frozen=True, slots=True)
class PendingHalfMessage:
    """A half message whose transaction is not decided yet, as a broker lists it (the latest copy).

    ``transaction_id`` is the message's unique id (its msgId); ``topic`` and
    ``queue_id`` are where it goes when committed; ``check_times`` counts the
    checks made so far; ``half_queue_offset`` / ``commit_log_offset`` /
    ``offset_msg_id`` say where the copy is stored in RMQ_SYS_TRANS_HALF_TOPIC.
    """

    transaction_id: str
    topic: str
    queue_id: int
    broker_name: str
    producer_group: str
    check_times: int
    born_timestamp: int
    store_timestamp: int
    half_queue_offset: int
    commit_log_offset: int
    offset_msg_id: str
    keys: str = ""
    tags: str = ""
