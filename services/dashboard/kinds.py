"""What kind of topic or group a name is (the list pages' filters)."""

from __future__ import annotations

from enum import Enum

from rocketmesh.model.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_GROUPS,
    TRACE_TOPIC,
    is_sys_consumer_group,
    is_system_topic,
)


class TopicKind(str, Enum):
    """The topic list's filter values."""

    NORMAL = "normal"
    RETRY = "retry"
    DLQ = "dlq"
    SYSTEM = "system"


def topic_kind(topic: str) -> TopicKind:
    """The kind of ``topic``: ``%RETRY%<group>``, ``%DLQ%<group>``, one of the mesh's own, or normal."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return TopicKind.RETRY
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return TopicKind.DLQ
    if is_system_topic(topic) or topic == TRACE_TOPIC:
        return TopicKind.SYSTEM
    return TopicKind.NORMAL


def is_system_group(group: str) -> bool:
    """A group the mesh's own services or tools consume with (RocketMQ's MixAll names, ``CID_RMQ_SYS_*``)."""
    return group in SYSTEM_GROUPS or is_sys_consumer_group(group)
