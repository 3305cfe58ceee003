"""The client SDK: Producer, Admin and what they share (RocketMQ's client, Pythonic names).

    from rocketmesh import Producer, Message

    with Producer("my-group", "127.0.0.1:9876") as producer:
        result = producer.send(Message("MyTopic", b"hello"))
"""

from rocketmesh.client.admin import Admin
from rocketmesh.client.cluster import BrokerInfo, ClusterInfo
from rocketmesh.client.errors import ClientErrorCode, MQBrokerError, MQClientError, MQError, RequestTimeoutError
from rocketmesh.client.fault import LatencyFaultTolerance, MQFaultStrategy
from rocketmesh.client.instance import ClientInstance
from rocketmesh.client.producer import Producer, SendCallback
from rocketmesh.client.results import PendingHalfMessage, SendResult, SendStatus, TopicOffset
from rocketmesh.client.route import TopicPublishInfo
from rocketmesh.route import BrokerData, Perm, QueueData, TopicRouteData
from rocketmesh.client.selector import (
    MessageQueueSelector,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
)
from rocketmesh.client.transaction import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)
from rocketmesh.client.unique_id import create_unique_id
from rocketmesh.message import Message, MessageExt, MessageQueue
from rocketmesh.remoting import ResponseCode

__all__ = [
    "Admin",
    "BrokerData",
    "BrokerInfo",
    "ClientErrorCode",
    "ClientInstance",
    "ClusterInfo",
    "LatencyFaultTolerance",
    "LocalTransactionState",
    "MQBrokerError",
    "MQClientError",
    "MQError",
    "MQFaultStrategy",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageQueueSelector",
    "PendingHalfMessage",
    "Perm",
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
    "TopicPublishInfo",
    "TopicRouteData",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "create_unique_id",
]
