"""Consumer-side requests besides pulls: group members, offsets, queue locks, progress, reset,
subscription groups (RocketMQ's ConsumerManageProcessor and the consumer part of its admin processor)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson

from rocketmesh.broker.message_filter import filter_for
from rocketmesh.broker.metadata.subscription_group import SubscriptionGroupConfig
from rocketmesh.broker.processor.handlers import BAD_REQUEST_ERRORS, Handler, ok, register_all
from rocketmesh.filter import FilterSyntaxError
from rocketmesh.model.message import MessageQueue
from rocketmesh.remoting import RemotingCommand, RequestCode, RequestContext, ResponseCode, request, response_to
from rocketmesh.remoting.protocol.headers import (
    ConsumerGroupRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueueOffsetResponseHeader,
    ResetOffsetRequestHeader,
    SubscriptionGroupRequestHeader,
    TopicRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from rocketmesh.broker.parts import BrokerParts
    from rocketmesh.remoting import RemotingServer

log = get_logger("broker", component="consumer_manage")


def mq_to_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def mq_from_json(d: Any) -> MessageQueue:
    if not isinstance(d, dict):
        raise ValueError("a message queue must be an object with topic, brokerName, queueId")
    topic, broker, qid = d.get("topic"), d.get("brokerName"), d.get("queueId")
    if not isinstance(topic, str) or not isinstance(broker, str) or not isinstance(qid, int) or isinstance(qid, bool):
        raise ValueError(f"bad message queue {d!r}")
    return MessageQueue(topic, broker, qid)


class ConsumerManageProcessor:
    """Handlers for consumer-side requests other than PULL_MESSAGE; see :meth:`register`."""

    def __init__(self, broker: BrokerParts, consume_tps: Callable[[str, str], float] = lambda topic, group: 0.0
                 ) -> None:
        self.broker = broker
        #: (topic, group) -> the group's pulled messages a second from the topic over the last minute.
        self.consume_tps = consume_tps
        self.store = broker.store
        self.offsets = broker.offsets
        self.locks = broker.locks
        self.groups = broker.subscription_groups
        self.clients = broker.clients

    def register(self, server: RemotingServer, executor: Executor) -> None:
        handlers: dict[int, tuple[Handler, Executor | None]] = {
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: (self.get_consumer_list_by_group, None),
            RequestCode.QUERY_CONSUMER_OFFSET: (self.query_consumer_offset, None),
            RequestCode.UPDATE_CONSUMER_OFFSET: (self.update_consumer_offset, None),
            RequestCode.LOCK_BATCH_MQ: (self.lock_batch_mq, None),
            RequestCode.UNLOCK_BATCH_MQ: (self.unlock_batch_mq, None),
            RequestCode.GET_CONSUME_STATS: (self.get_consume_stats, executor),
            RequestCode.GET_BROKER_CONSUME_STATS: (self.get_broker_consume_stats, executor),
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: (self.query_topic_consume_by_who, None),
            RequestCode.GET_CONSUMER_CONNECTION_LIST: (self.get_consumer_connection_list, None),
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: (self.reset_offset, executor),
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: (self.update_subscription_group, executor),
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: (self.get_all_subscription_groups, None),
            RequestCode.DELETE_SUBSCRIPTIONGROUP: (self.delete_subscription_group, executor),
            RequestCode.GET_ALL_CONSUMER_OFFSET: (self.get_all_consumer_offset, None),
            RequestCode.CHECK_CLIENT_CONFIG: (self.check_client_config, None),
        }
        register_all(server, handlers, BAD_REQUEST_ERRORS)

    @staticmethod
    def _body(req: RemotingCommand) -> dict[str, Any]:
        data = orjson.loads(req.body or b"{}")
        if not isinstance(data, dict):
            raise ValueError("the request body must be a JSON object")
        return data

    # --- members ---

    def get_consumer_list_by_group(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = ConsumerGroupRequestHeader.from_ext(req.ext)
        ids = self.clients.consumer_ids(h.consumer_group)
        if not ids:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")
        return ok(req, body=orjson.dumps({"consumerIdList": ids}))

    def get_consumer_connection_list(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = ConsumerGroupRequestHeader.from_ext(req.ext)
        info = self.clients.consumer_group(h.consumer_group)
        if info is None or not info.channels:
            return response_to(req, ResponseCode.CONSUMER_NOT_ONLINE,
                               f"the consumer group[{h.consumer_group}] not online")
        body = {
            "connectionSet": [ch.connection() for ch in info.channels.values()],
            "subscriptionTable": info.subscriptions,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "consumeFromWhere": info.consume_from_where,
        }
        return ok(req, body=orjson.dumps(body))

    def query_topic_consume_by_who(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """RocketMQ's GroupList of a topic: the groups with an online consumer subscribed to it and the groups
        with an offset committed in it."""
        h = TopicRequestHeader.from_ext(req.ext)
        groups = self.clients.groups_subscribing(h.topic) | self.offsets.groups_of_topic(h.topic)
        return ok(req, body=orjson.dumps({"groupList": sorted(groups)}))

    def check_client_config(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """Can this broker serve a subscription? (SQL92 needs enablePropertyFilter and a valid expression.)"""
        data = self._body(req)
        sub = data.get("subscriptionData") or {}
        if not isinstance(sub, dict):
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"bad check_client_config request: subscriptionData must be an object, "
                               f"got {type(sub).__name__}")
        expr_type = sub.get("expressionType", "TAG")
        if expr_type == "TAG":
            return ok(req)
        if expr_type != "SQL92":
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"unknown expression type {expr_type!r}")
        if not self.broker.config.enable_property_filter:
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"The broker does not support consumer to filter message by {expr_type} "
                               "(set enablePropertyFilter=true)")
        try:
            filter_for(str(sub.get("subString", "")), expr_type)
        except FilterSyntaxError as exc:
            return response_to(req, ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return ok(req)

    # --- offsets ---

    def query_consumer_offset(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext(req.ext)
        offset = self.offsets.query_offset(h.consumer_group, h.topic, h.queue_id)
        if offset < 0:
            # As RocketMQ: a group new to a queue whose first message is still stored and near the
            # commitlog's end (in the page cache) starts at 0, so it sees what a young topic already holds;
            # otherwise the client decides by its consume_from.
            store = self.store
            if (store.get_min_offset_in_queue(h.topic, h.queue_id) <= 0
                    and not store.check_in_disk_by_consume_offset(h.topic, h.queue_id, 0)):
                return ok(req, QueueOffsetResponseHeader(0))
            return response_to(req, ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first")
        return ok(req, QueueOffsetResponseHeader(offset))

    def update_consumer_offset(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext(req.ext)
        self.offsets.commit_offset(ctx.remote, h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return ok(req)

    def get_all_consumer_offset(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return ok(req, body=orjson.dumps({"offsetTable": self.offsets.table_snapshot()},
                                         option=orjson.OPT_NON_STR_KEYS))

    # --- orderly locks ---

    def _lock_request(self, req: RemotingCommand) -> tuple[str, str, list[MessageQueue]]:
        data = self._body(req)
        group, client_id = data.get("consumerGroup"), data.get("clientId")
        if not isinstance(group, str) or not group or not isinstance(client_id, str) or not client_id:
            raise ValueError("consumerGroup and clientId are required")
        return group, client_id, [mq_from_json(d) for d in data.get("mqSet") or []]

    def lock_batch_mq(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        group, client_id, mqs = self._lock_request(req)
        locked = self.locks.try_lock_batch(group, mqs, client_id)
        return ok(req, body=orjson.dumps({"lockOKMQSet": [mq_to_json(mq) for mq in sorted(locked)]}))

    def unlock_batch_mq(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        group, client_id, mqs = self._lock_request(req)
        self.locks.unlock_batch(group, mqs, client_id)
        return ok(req)

    # --- progress and reset ---

    def _group_topics(self, group: str, topic: str | None, offset_topics: Iterable[str] | None = None) -> list[str]:
        """The topics ``group``'s progress covers: ``topic`` alone when given, else those it has offsets in
        (``offset_topics`` when the caller read them already) and those its online consumers subscribe."""
        if topic:
            return [topic]
        topics = set(self.offsets.topics_of_group(group) if offset_topics is None else offset_topics)
        info = self.clients.consumer_group(group)
        if info is not None:
            topics.update(info.subscriptions)
        return sorted(t for t in topics if self.broker.topics.get(t) is not None)

    def _consume_stats(self, group: str, topic: str, committed: dict[int, int],
                       order_only: bool = False) -> dict[str, Any] | None:
        """RocketMQ's ConsumeStats of ``group`` in ``topic`` on this broker, from the group's committed offsets
        there (queue id -> offset): per queue the broker's max offset, the group's offset and the store time of
        the last message it consumed, and the messages it pulled a second over the last minute. None when the
        broker has no such topic (or, ``order_only``, it is not an ordered one)."""
        cfg = self.broker.topics.get(topic)
        if cfg is None or (order_only and not cfg.order):
            return None
        store = self.store
        broker_name = self.broker.config.broker_name
        table = []
        for qid in range(cfg.read_queue_nums):
            consumer_offset = max(0, committed.get(qid, 0))
            last = store.get_message_store_timestamp(topic, qid, consumer_offset - 1) if consumer_offset > 0 else 0
            table.append({"topic": topic, "brokerName": broker_name, "queueId": qid,
                          "brokerOffset": store.get_max_offset_in_queue(topic, qid),
                          "consumerOffset": consumer_offset, "lastTimestamp": max(last, 0)})
        return {"offsetTable": table, "consumeTps": round(self.consume_tps(topic, group), 2)}

    def get_consume_stats(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """One group's ConsumeStats, over every topic it consumes or the header's one."""
        h = GetConsumeStatsRequestHeader.from_ext(req.ext)
        group = h.consumer_group
        table: list[dict[str, Any]] = []
        tps = 0.0
        for topic in self._group_topics(group, h.topic):
            stats = self._consume_stats(group, topic, self.offsets.offsets(group, topic))
            if stats is not None:
                table.extend(stats["offsetTable"])
                tps += stats["consumeTps"]
        if not table:
            return response_to(req, ResponseCode.CONSUMER_NOT_ONLINE,
                               f"the consumer group[{group}] has no progress on this broker")
        return ok(req, body=orjson.dumps({"offsetTable": table, "consumeTps": tps}))

    def get_broker_consume_stats(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """RocketMQ's ConsumeStatsList: for every group with offsets on this broker, the ConsumeStats of each
        of its topics (as GET_CONSUME_STATS gives them), and the lag of them all. One read of the offset table
        serves every group, so a thousand groups cost one request, not a thousand."""
        h = GetConsumeStatsInBrokerHeader.from_ext(req.ext)
        total_diff = 0
        stats_list = []
        for group, committed in sorted(self.offsets.by_group().items()):
            group_stats = []
            for topic in self._group_topics(group, None, committed):
                stats = self._consume_stats(group, topic, committed.get(topic, {}), h.is_order)
                if stats is not None:
                    total_diff += sum(e["brokerOffset"] - e["consumerOffset"] for e in stats["offsetTable"])
                    group_stats.append(stats)
            stats_list.append({group: group_stats})
        return ok(req, body=orjson.dumps({"brokerAddr": self.broker.broker_addr, "totalDiff": total_diff,
                                          "consumeStatsList": stats_list}))

    def reset_offset(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """Move ``group``'s offsets in ``topic`` to ``timestamp`` (-1: the end), here and in its running clients."""
        h = ResetOffsetRequestHeader.from_ext(req.ext)
        cfg = self.broker.topics.get(h.topic)
        if cfg is None:
            return response_to(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        broker_name = self.broker.config.broker_name
        new: dict[int, int] = {}
        for qid in range(cfg.read_queue_nums):
            if h.timestamp < 0:
                target = self.store.get_max_offset_in_queue(h.topic, qid)
            else:
                target = self.store.get_offset_in_queue_by_time(h.topic, qid, h.timestamp)
            current = self.offsets.query_offset(h.group, h.topic, qid)
            if not h.is_force and 0 <= current <= target:
                target = current
            new[qid] = target
        self.offsets.reset(h.group, h.topic, new)
        self.offsets.persist_if_dirty()
        table = [{"topic": h.topic, "brokerName": broker_name, "queueId": q, "offset": o}
                 for q, o in sorted(new.items())]
        body = orjson.dumps({"offsetTable": table})
        info = self.clients.consumer_group(h.group)
        for ch in (info.channels.values() if info else ()):
            self.broker.server.push(ch.identity, request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, h.to_ext(), body))
        log.info("offset_reset", group=h.group, topic=h.topic, timestamp=h.timestamp, offsets=new,
                 clients=len(info.channels) if info else 0)
        return ok(req, body=body)

    # --- subscription groups ---

    def update_subscription_group(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        cfg = SubscriptionGroupConfig.from_json(self._body(req))
        self.groups.update(cfg)
        return ok(req)

    def get_all_subscription_groups(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        groups = {c.group_name: c.to_json() for c in self.groups.all()}
        return ok(req, body=orjson.dumps({"subscriptionGroupTable": groups}))

    def delete_subscription_group(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = SubscriptionGroupRequestHeader.from_ext(req.ext)
        self.groups.delete(h.group_name)
        self.offsets.remove_group(h.group_name)
        return ok(req)
