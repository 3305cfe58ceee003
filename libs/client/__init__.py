"""The client SDK: Producer, Admin and what they share (RocketMQ's client, Pythonic names).

    from rocketmesh import Producer, Message

    with Producer("my-group", "127.0.0.1:9876") as producer:
        result = producer.send(Message("MyTopic", b"hello"))

What is exported here is the public API: what an application calls, gets back, catches or subclasses.
The machinery underneath (the shared ClientInstance, fault tolerance, the producer's view of routes)
stays importable from its own module, as ``rocketmesh.client.instance.ClientInstance`` and so on.
"""

from rocketmesh.client.admin.admin import Admin
from rocketmesh.client.cluster import BrokerInfo, ClusterInfo
from rocketmesh.client.errors import ClientErrorCode, MQBrokerError, MQClientError, MQError, RequestTimeoutError
from rocketmesh.client.instance import NAMESRV_ADDR_ENV, namesrv_addrs_from
from rocketmesh.client.producer.accumulator import AutoBatch
from rocketmesh.client.producer.producer import Producer, SendCallback
from rocketmesh.client.producer.selector import (
    MessageQueueSelector,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
)
from rocketmesh.client.producer.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from rocketmesh.client.results import PendingHalfMessage, SendResult, SendStatus, TopicOffset
from rocketmesh.client.running_info import (
    CMResult,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ProcessQueueInfo,
)
from rocketmesh.model.message import Message, MessageExt, MessageQueue
from rocketmesh.model.route import BrokerData, Perm, QueueData, TopicRouteData
from rocketmesh.remoting import ResponseCode

__all__ = [
    "AutoBatch",
    "Admin",
    "BrokerData",
    "BrokerInfo",
    "ClientErrorCode",
    "ClusterInfo",
    "CMResult",
    "ConsumeMessageDirectlyResult",
    "ConsumerRunningInfo",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientError",
    "MQError",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageQueueSelector",
    "NAMESRV_ADDR_ENV",
    "PendingHalfMessage",
    "Perm",
    "ProcessQueueInfo",
    "Producer",
    "QueueData",
    "RequestTimeoutError",
    "ResponseCode",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendCallback",
    "SendResult",
    "SendStatus",
    "TopicOffset",
    "TopicRouteData",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "namesrv_addrs_from",
]
