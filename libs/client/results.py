"""What the SDK hands back: send results and per-queue offset figures."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from rocketmesh.message import MessageQueue
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
    transaction_id: Optional[str] = None
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
