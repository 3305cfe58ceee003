"""CONSUMER_SEND_MSG_BACK: a message a consumer group failed to consume goes to the group's retry topic,
through the delay levels, or to its dead-letter topic (RocketMQ's consumerSendMsgBack).

The consumer names the message by its commitlog offset. The broker reads it
and stores a copy:

- to ``%RETRY%<group>`` parked at delay level ``3 + reconsume times`` (or the
  level the request asks for), so the scheduler service delivers it to the
  retry topic when it is due, and the group's consumers (which all subscribe
  their retry topic) get it again;
- to ``%DLQ%<group>`` once the copy would exceed the group's maximum
  reconsume times (the request's ``maxReconsumeTimes`` when given, else the
  subscription group's ``retryMaxTimes``), or when the request's delay level
  is negative (an orderly consumer that gave up). The dead-letter topic is
  write-only: consumers cannot pull it, admin tools read it directly.

The copy keeps body (as stored: a compressed one stays compressed, with its
sysFlag bit, and its consumer inflates it), flag, tags, keys, UNIQ_KEY and user properties; it
carries the original topic in RETRY_TOPIC, the first stored copy's message id
in ORIGIN_MESSAGE_ID, and its reconsume times (one more than the message it
copies) in RECONSUME_TIME and in the record header. Both topics are created
on demand; the retry topic also when a group first heartbeats, so its route
exists before the first retry (as RocketMQ's heartbeat does).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from rocketmesh.broker.processor.handlers import BAD_REQUEST_ERRORS, ok, register_all
from rocketmesh.broker.schedule import PARKING_PROPERTIES, park_at_level
from rocketmesh.broker.store import MessageExtBrokerInner, PutMessageStatus
from rocketmesh.model.codec import encode_host_text, encode_properties
from rocketmesh.model.message import MessageConst, MessageExt
from rocketmesh.model.route import PERM_READ_WRITE, Perm, TopicConfig
from rocketmesh.model.topics import dlq_topic, is_sys_consumer_group, is_system_topic, retry_topic
from rocketmesh.remoting import RemotingCommand, RequestCode, RequestContext, ResponseCode, response_to
from rocketmesh.remoting.protocol.headers import ConsumerSendMsgBackRequestHeader
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from rocketmesh.broker.parts import BrokerParts
    from rocketmesh.remoting import RemotingServer

log = get_logger("broker", component="send_back")

#: RocketMQ's MixAll.DLQ_NUMS_PER_GROUP.
DLQ_NUMS_PER_GROUP = 1
#: The first retry waits at this level (10 s with the default levels); each later one a level more.
RETRY_BASE_DELAY_LEVEL = 3


class SendBackProcessor:
    """Answers CONSUMER_SEND_MSG_BACK and creates retry / dead-letter topics on demand."""

    def __init__(self, broker: BrokerParts) -> None:
        self.broker = broker
        self.store = broker.store
        self.topics = broker.topics
        self.groups = broker.subscription_groups
        self.max_level = len(broker.store.delay_levels)
        self.retried_total = 0
        self.dead_lettered_total = 0

    def register(self, server: RemotingServer, executor: Executor) -> None:
        register_all(server, {RequestCode.CONSUMER_SEND_MSG_BACK: (self.send_back, executor)}, BAD_REQUEST_ERRORS)

    # --- topics on demand ---

    def ensure_retry_topic(self, group: str) -> TopicConfig | None:
        """``%RETRY%<group>`` with the group's retry queue count, created when absent (RocketMQ does this on
        a consumer heartbeat). None for system groups, unknown groups and groups without retry queues."""
        if is_sys_consumer_group(group):
            return None
        try:
            cfg = self.groups.find(group)
        except ValueError:
            return None
        if cfg is None or cfg.retry_queue_nums <= 0:
            return None
        return self.topics.create_system_topic(retry_topic(group), cfg.retry_queue_nums, PERM_READ_WRITE)

    # --- the request ---

    def send_back(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_ext(req.ext)
        broker_name = self.broker.config.broker_name
        group_cfg = self.groups.find(h.group)
        if group_cfg is None:
            return response_to(req, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group [{h.group}] does not exist")
        if not Perm.is_writeable(self.broker.config.broker_permission):
            return response_to(req, ResponseCode.NO_PERMISSION,
                               f"the broker[{broker_name}] sending message is forbidden")
        msg = self._look(h.offset)
        if msg is None:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        if is_system_topic(msg.topic):
            # A parked, half or other internal record is no message a consumer was given.
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"the message at offset {h.offset} is in the system topic {msg.topic}")
        max_times = group_cfg.retry_max_times if h.max_reconsume_times is None else h.max_reconsume_times
        times = msg.reconsume_times + 1
        # A group without retry queues has no retry topic: its failures are kept in the dead-letter queue.
        dead = times > max_times or h.delay_level < 0 or group_cfg.retry_queue_nums <= 0
        props = dict(msg.properties)
        for name in PARKING_PROPERTIES:
            props.pop(name, None)
        props.setdefault(MessageConst.RETRY_TOPIC, msg.topic)
        if not props.get(MessageConst.ORIGIN_MESSAGE_ID):
            props[MessageConst.ORIGIN_MESSAGE_ID] = msg.msg_id
        props[MessageConst.RECONSUME_TIME] = str(times)
        if dead:
            target = dlq_topic(h.group)
            cfg = self.topics.create_system_topic(target, DLQ_NUMS_PER_GROUP, Perm.WRITE)
            queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
        else:
            target = retry_topic(h.group)
            cfg = self.topics.create_system_topic(target, group_cfg.retry_queue_nums, PERM_READ_WRITE)
            queue_id = random.randrange(max(1, cfg.write_queue_nums))
        if not cfg.writable:
            return response_to(req, ResponseCode.NO_PERMISSION, f"the topic[{target}] sending message is forbidden")
        level = 0
        if dead:
            store_topic, store_qid, raw_props = target, queue_id, encode_properties(props)
        else:
            level = h.delay_level if h.delay_level > 0 else RETRY_BASE_DELAY_LEVEL + msg.reconsume_times
            store_topic, store_qid, raw_props = park_at_level(target, queue_id, props, level, self.max_level)
        inner = MessageExtBrokerInner(store_topic, msg.body, store_qid, msg.flag, raw_props, msg.sys_flag,
                                      msg.born_timestamp, encode_host_text(msg.born_host), times)
        result = self.store.put_messages([inner])
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("send_back_put_failed", group=h.group, offset=h.offset, status=result.status.value)
            return response_to(req, ResponseCode.SYSTEM_ERROR, result.status.value)
        if dead:
            self.dead_lettered_total += 1
            log.warning("message_dead_lettered", group=h.group, topic=target, msg_id=msg.msg_id,
                        origin_msg_id=props[MessageConst.ORIGIN_MESSAGE_ID], reconsume_times=times,
                        max_reconsume_times=max_times)
        else:
            self.retried_total += 1
            log.debug("message_sent_back", group=h.group, topic=target, msg_id=msg.msg_id,  # one a message
                      reconsume_times=times, delay_level=min(max(level, 1), self.max_level))
        return ok(req)

    def _look(self, offset: int) -> MessageExt | None:
        if offset < self.store.commitlog.min_offset:
            return None
        return self.store.look_message_by_offset(offset)
