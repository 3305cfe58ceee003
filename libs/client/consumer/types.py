"""Enums and small records of the consumer API (RocketMQ's names)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from rocketmesh.model.message import MessageExt


class MessageModel(str, Enum):
    """CLUSTERING: each message to one consumer of the group. BROADCASTING: to every consumer."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(str, Enum):
    """Where a group with no stored offset for a queue starts."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"

    # Short aliases: consume_from=ConsumeFromWhere.FIRST_OFFSET reads better.
    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeConcurrentlyStatus(str, Enum):
    """What a concurrent listener returns."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(str, Enum):
    """What an orderly listener returns."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class PullStatus(str, Enum):
    """Outcome of one pull (RocketMQ's PullStatus)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclass(slots=True)
class PullResult:
    """One pull's messages (already tag-checked on the client) and the offsets to go on from."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    #: The broker of the queue's group to pull from next (0 the master; a slave when the broker says
    #: the consumer is far behind and slaveReadEnable is on).
    suggest_which_broker_id: int = 0
