"""Consumers: PushConsumer (a listener is called) and PullConsumer (the application polls)."""

from rocketmesh.client.consumer.options import PullConsumerOptions, PushConsumerOptions
from rocketmesh.client.consumer.pull_consumer import PullConsumer
from rocketmesh.client.consumer.push_consumer import PushConsumer
from rocketmesh.client.consumer.types import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    MessageModel,
    PullResult,
    PullStatus,
)

__all__ = [
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "MessageModel",
    "PullConsumer",
    "PullConsumerOptions",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "PushConsumerOptions",
]
