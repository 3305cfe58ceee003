"""Checks made before anything is sent (RocketMQ's Validators).

Each failure is an :class:`MQClientError` with ``ResponseCode.MESSAGE_ILLEGAL``
and a message that says what to change.
"""

from __future__ import annotations

import re
from typing import Any

from rocketmesh.client.errors import MQClientError
from rocketmesh.model.message import Message, MessageConst
from rocketmesh.model.topics import (
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_NAME_PATTERN,
    is_system_topic,
    validate_topic_name,
)
from rocketmesh.remoting import ResponseCode

#: RocketMQ's DefaultMQProducer maxMessageSize.
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
#: The producer group RocketMQ reserves for itself.
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
GROUP_MAX_LENGTH = 255
_GROUP_PATTERN = re.compile(TOPIC_NAME_PATTERN.pattern)

_ILLEGAL = ResponseCode.MESSAGE_ILLEGAL


def check_group(group: Any) -> None:
    """A producer or consumer group name: RocketMQ's characters, at most 255 of them."""
    if not isinstance(group, str) or not group.strip():
        raise MQClientError("the specified group is blank; give the producer a group name", _ILLEGAL)
    if len(group) > GROUP_MAX_LENGTH:
        raise MQClientError(f"the specified group is longer than {GROUP_MAX_LENGTH} characters", _ILLEGAL)
    if not _GROUP_PATTERN.match(group):
        raise MQClientError(
            f"the specified group {group!r} contains characters outside {_GROUP_PATTERN.pattern}", _ILLEGAL
        )


def check_topic(topic: Any) -> None:
    """A topic a user may send to: a legal name and not a system topic."""
    if not isinstance(topic, str):
        raise MQClientError(f"the topic must be a string, got {type(topic).__name__}", _ILLEGAL)
    why = validate_topic_name(topic)
    if why is not None:
        raise MQClientError(f"the specified topic is invalid: {why}", _ILLEGAL)
    if is_system_topic(topic):
        raise MQClientError(f"the topic {topic!r} is a system topic; send to a topic of your own", _ILLEGAL)


def check_message(msg: Any, max_message_size: int) -> None:
    """A message that may be sent: a Message, a valid topic, a body of 1..max_message_size bytes."""
    if not isinstance(msg, Message):
        raise MQClientError(f"expected a Message, got {type(msg).__name__}", _ILLEGAL)
    check_topic(msg.topic)
    body = msg.body
    if not body:
        raise MQClientError("the message body is empty; a message needs at least one byte of body", _ILLEGAL)
    if len(body) > max_message_size:
        raise MQClientError(
            f"the message body is {len(body)} bytes, over the maximum of {max_message_size} bytes "
            "(max_message_size)", _ILLEGAL
        )
    _check_properties(msg)


def _check_properties(msg: Message) -> None:
    r"""Properties travel as ``name\x01value\x02``: a separator inside a name or value would be read back as
    other properties (a value ``x\x02DELAY\x013`` as a delay level), so it is refused, not sent."""
    for name, value in msg.properties.items():
        for what, text in (("name", name), ("value", value)):
            if isinstance(text, str) and ("\x01" in text or "\x02" in text):
                raise MQClientError(
                    f"the property {name!r} has a {what} holding \\x01 or \\x02, the separators of the property "
                    "encoding, which would split it into other properties; remove them", _ILLEGAL
                )


#: Properties that keep a message out of a batch: a delay level, a delivery time, a transaction.
_NOT_IN_BATCH = frozenset((MessageConst.DELAY_TIME_LEVEL, MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_MS,
                           MessageConst.TRANSACTION_PREPARED))


def check_batch(msgs: Any, max_message_size: int) -> str:
    """A list of messages that may go as one batch; returns their common topic.

    Checks each message as :func:`check_message` does, and that all share a
    topic, none is delayed or a timer message, none is transactional and none
    goes to a retry topic (RocketMQ's rules for batches). The encoded size is
    checked by the producer once encoded.
    """
    if isinstance(msgs, Message) or not isinstance(msgs, (list, tuple)):
        raise MQClientError("send_batch takes a list of Message", _ILLEGAL)
    if not msgs:
        raise MQClientError("the batch is empty; give send_batch at least one message", _ILLEGAL)
    first = msgs[0]
    check_message(first, max_message_size)
    topic = first.topic
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        raise MQClientError("messages to a retry topic cannot be sent in a batch", _ILLEGAL)
    not_in_batch = _NOT_IN_BATCH
    for msg in msgs:
        # The whole check_message once, for the first; then what can differ between messages of one topic.
        if type(msg) is not Message and not isinstance(msg, Message):
            check_message(msg, max_message_size)
        if msg.topic != topic:
            raise MQClientError(
                f"all messages of a batch must have the same topic: {topic!r} and {msg.topic!r}", _ILLEGAL
            )
        if not 0 < len(msg.body) <= max_message_size:
            check_message(msg, max_message_size)
        props = msg.properties
        if props and not not_in_batch.isdisjoint(props):
            _check_batchable(msg)
    return topic


def _check_batchable(msg: Message) -> None:
    props = msg.properties
    if msg.delay_level > 0:
        raise MQClientError("delayed messages (delay_level) cannot be sent in a batch", _ILLEGAL)
    if MessageConst.TIMER_DELIVER_MS in props or MessageConst.TIMER_DELAY_MS in props:
        raise MQClientError("timer messages (deliver_at_ms, delay_ms) cannot be sent in a batch", _ILLEGAL)
    if props.get(MessageConst.TRANSACTION_PREPARED) == "true":
        raise MQClientError("transactional messages cannot be sent in a batch; use "
                            "TransactionProducer.send_message_in_transaction for each", _ILLEGAL)
