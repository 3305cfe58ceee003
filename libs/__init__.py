"""rocketmesh: RocketMQ 4.x semantics as a mesh of ZeroMQ services.

The SDK's main names are importable from here::

    from rocketmesh import Producer, Admin, Message

They load on first use, so that a service importing ``rocketmesh.model.message``
does not pull in the client SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Admin": "rocketmesh.client",
    "AutoBatch": "rocketmesh.client",
    "MQBrokerError": "rocketmesh.client",
    "MQClientError": "rocketmesh.client",
    "MQError": "rocketmesh.client",
    "Producer": "rocketmesh.client",
    "RequestTimeoutError": "rocketmesh.client",
    "SendResult": "rocketmesh.client",
    "SendStatus": "rocketmesh.client",
    "TransactionProducer": "rocketmesh.client",
    "LocalTransactionState": "rocketmesh.client",
    "TransactionListener": "rocketmesh.client",
    "MessageQueueSelector": "rocketmesh.client",
    "PushConsumer": "rocketmesh.client.consumer",
    "PullConsumer": "rocketmesh.client.consumer",
    "ConsumeConcurrentlyStatus": "rocketmesh.client.consumer",
    "ConsumeOrderlyStatus": "rocketmesh.client.consumer",
    "ConsumeFromWhere": "rocketmesh.client.consumer",
    "MessageModel": "rocketmesh.client.consumer",
    "PushConsumerOptions": "rocketmesh.client.consumer",
    "PullConsumerOptions": "rocketmesh.client.consumer",
    "Message": "rocketmesh.model.message",
    "MessageExt": "rocketmesh.model.message",
    "MessageQueue": "rocketmesh.model.message",
}

__all__ = sorted(_EXPORTS) + ["__version__"]

if TYPE_CHECKING:
    # `Name as Name`: an explicit re-export, for type checkers that treat plain imports as private (--strict).
    from rocketmesh.client import (
        Admin as Admin,
        AutoBatch as AutoBatch,
        LocalTransactionState as LocalTransactionState,
        MessageQueueSelector as MessageQueueSelector,
        MQBrokerError as MQBrokerError,
        MQClientError as MQClientError,
        MQError as MQError,
        Producer as Producer,
        RequestTimeoutError as RequestTimeoutError,
        SendResult as SendResult,
        SendStatus as SendStatus,
        TransactionListener as TransactionListener,
        TransactionProducer as TransactionProducer,
    )
    from rocketmesh.client.consumer import (
        ConsumeConcurrentlyStatus as ConsumeConcurrentlyStatus,
        ConsumeFromWhere as ConsumeFromWhere,
        ConsumeOrderlyStatus as ConsumeOrderlyStatus,
        MessageModel as MessageModel,
        PullConsumer as PullConsumer,
        PullConsumerOptions as PullConsumerOptions,
        PushConsumer as PushConsumer,
        PushConsumerOptions as PushConsumerOptions,
    )
    from rocketmesh.model.message import Message as Message, MessageExt as MessageExt, MessageQueue as MessageQueue


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketmesh' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
