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


@dataclass(slots=True)
class ConsumeStats:
    """A consumer group's progress over its queues (RocketMQ's ConsumeStats), queues in order."""

    offset_table: dict[MessageQueue, OffsetWrapper]
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        """The lag summed over every queue."""
        return sum(w.diff for w in self.offset_table.values())


@dataclass(frozen=True, slots=True)
class Connection:
    """One client of a consumer group as a broker sees it (RocketMQ's Connection)."""

    client_id: str
    client_addr: str
    language: str
    last_update_timestamp: int


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
