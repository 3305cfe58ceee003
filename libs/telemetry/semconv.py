"""OpenTelemetry's messaging semantic conventions as rocketmesh's spans use them.

Span names are ``send <topic>``, ``receive <topic>`` and ``process <topic>``
(:func:`span_name`); every span carries ``messaging.system = rocketmq``.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

SYSTEM = "rocketmq"

MESSAGING_SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION_NAME = "messaging.destination.name"
DESTINATION_PARTITION_ID = "messaging.destination.partition.id"
MESSAGE_ID = "messaging.message.id"
MESSAGE_BODY_SIZE = "messaging.message.body.size"
BATCH_MESSAGE_COUNT = "messaging.batch.message_count"
CONSUMER_GROUP_NAME = "messaging.consumer.group.name"
ROCKETMQ_MESSAGE_TAG = "messaging.rocketmq.message.tag"
ROCKETMQ_MESSAGE_KEYS = "messaging.rocketmq.message.keys"
ROCKETMQ_MESSAGE_TYPE = "messaging.rocketmq.message.type"
ROCKETMQ_DELAY_TIME_LEVEL = "messaging.rocketmq.message.delay_time_level"
ROCKETMQ_CLIENT_GROUP = "messaging.rocketmq.client_group"
ROCKETMQ_NAMESPACE = "messaging.rocketmq.namespace"
#: Not OpenTelemetry's: the outcome a transaction was settled with (COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW) ...
ROCKETMQ_TRANSACTION_STATE = "messaging.rocketmq.transaction.state"
#: ... and what the broker did with a half message the txn-checker asked it to check (HalfCheckOutcome).
ROCKETMQ_CHECK_OUTCOME = "messaging.rocketmq.transaction.check_outcome"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"


class OperationType(str, Enum):
    """``messaging.operation.type`` values."""

    SEND = "send"
    RECEIVE = "receive"
    PROCESS = "process"
    SETTLE = "settle"


class MessageType(str, Enum):
    """``messaging.rocketmq.message.type`` values."""

    NORMAL = "normal"
    FIFO = "fifo"
    DELAY = "delay"
    TRANSACTION = "transaction"


def span_name(operation: str, topic: str) -> str:
    """``send <topic>``, ``receive <topic>``, ``process <topic>`` ..."""
    return f"{operation} {topic}"


def messaging_attributes(operation_type: str, operation_name: str, destination: str = "") -> dict[str, Any]:
    """What every rocketmesh span carries: the system, the operation and (when given) the destination."""
    attrs: dict[str, Any] = {MESSAGING_SYSTEM: SYSTEM, OPERATION_TYPE: operation_type, OPERATION_NAME: operation_name}
    if destination:
        attrs[DESTINATION_NAME] = destination
    return attrs


def server_attributes(addr: str) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of a ``host:port`` address."""
    host, sep, port = addr.rpartition(":")
    if sep and port.isdigit():
        return {SERVER_ADDRESS: host, SERVER_PORT: int(port)}
    return {SERVER_ADDRESS: addr}
