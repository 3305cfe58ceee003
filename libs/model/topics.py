"""Reserved topic names and prefixes (RocketMQ's TopicValidator / MixAll)."""

from __future__ import annotations

import re

DEFAULT_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: Timer messages (RocketMQ 5's name): queue entries' tag field holds the delivery time, as for SCHEDULE_TOPIC.
TIMER_TOPIC = "rmq_sys_wheel_timer"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: The system consumer group of the txn-checker replicas (RocketMQ's MixAll.CID_SYS_RMQ_TRANS).
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: Tag of op messages: the half message at the offset in the body is decided (RocketMQ's REMOVETAG).
TRANS_OP_REMOVE_TAG = "d"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
#: Where message trace records go by default (RocketMQ's TopicValidator.RMQ_SYS_TRACE_TOPIC). Not in
#: SYSTEM_TOPICS: clients send to it, as RocketMQ's trace dispatcher does.
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

#: Topics users may not send to (RocketMQ's TopicValidator.SYSTEM_TOPIC_SET).
SYSTEM_TOPICS = frozenset({
    DEFAULT_TOPIC, SCHEDULE_TOPIC, BENCHMARK_TOPIC, OFFSET_MOVED_EVENT, TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, TIMER_TOPIC,
})

# RocketMQ's MixAll group names.
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
FILTERSRV_CONSUMER_GROUP = "FILTERSRV_CONSUMER"
SELF_TEST_CONSUMER_GROUP = "SELF_TEST_C_GROUP"
ONS_HTTP_PROXY_GROUP = "CID_ONS-HTTP-PROXY"
CID_ONSAPI_PULL_GROUP = "CID_ONSAPI_PULL"
CID_ONSAPI_PERMISSION_GROUP = "CID_ONSAPI_PERMISSION"
CID_ONSAPI_OWNER_GROUP = "CID_ONSAPI_OWNER"
CID_RMQ_SYS_PREFIX = "CID_RMQ_SYS_"

#: The groups RocketMQ 4.x's SubscriptionGroupManager creates at start-up.
SYSTEM_GROUPS = (
    TOOLS_CONSUMER_GROUP,
    FILTERSRV_CONSUMER_GROUP,
    SELF_TEST_CONSUMER_GROUP,
    ONS_HTTP_PROXY_GROUP,
    CID_ONSAPI_PULL_GROUP,
    CID_ONSAPI_PERMISSION_GROUP,
    CID_ONSAPI_OWNER_GROUP,
)

TOPIC_NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX_LENGTH = 127


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_sys_consumer_group(group: str) -> bool:
    """RocketMQ's MixAll.isSysConsumerGroup: groups the broker's own services consume with."""
    return group.startswith(CID_RMQ_SYS_PREFIX)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def validate_topic_name(topic: str) -> str | None:
    """None when ``topic`` is a legal name, else why not (RocketMQ's rules)."""
    if not topic or not topic.strip():
        return "the topic name is blank"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"the topic name is longer than {TOPIC_MAX_LENGTH} characters"
    if not TOPIC_NAME_PATTERN.match(topic):
        return f"the topic name {topic!r} contains characters outside {TOPIC_NAME_PATTERN.pattern}"
    return None
