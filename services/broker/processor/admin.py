"""Admin and query requests: topics, offsets, messages by id and key, runtime info, heartbeats."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import orjson

from rocketmesh.acl.signer import ACCESS_KEY
from rocketmesh.broker.processor.handlers import Handler, ok, register_all
from rocketmesh.broker.store.index.consume_queue import BLANK_SIZE
from rocketmesh.model.route import TopicConfig
from rocketmesh.model.topics import SYSTEM_TOPICS, validate_topic_name
from rocketmesh.remoting import (
    RemotingCommand,
    RemotingServer,
    RequestCode,
    RequestContext,
    ResponseCode,
    response_to,
)
from rocketmesh.remoting.protocol.headers import (
    CreateTopicRequestHeader,
    EarliestMsgStoretimeResponseHeader,
    ProducerGroupRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    QueueOffsetRequestHeader,
    QueueOffsetResponseHeader,
    SearchOffsetRequestHeader,
    TopicRequestHeader,
    UnregisterClientRequestHeader,
    ViewMessageRequestHeader,
)
from rocketmesh.runtime.config import to_properties
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.acl.validator import PlainAccessValidator
    from rocketmesh.broker.parts import BrokerParts
    from rocketmesh.broker.processor.send_back import SendBackProcessor
    from rocketmesh.server.metrics import ServiceMetrics

log = get_logger("broker", component="admin")


class AdminProcessor:
    """RocketMQ's AdminBrokerProcessor, QueryMessageProcessor and ClientManageProcessor, for what the
    mesh core needs; each handler is registered for its request code by :meth:`register`."""

    def __init__(self, broker: BrokerParts, send_back: SendBackProcessor, metrics: ServiceMetrics,
                 runtime_info: Callable[[], dict[str, Any]], acl: PlainAccessValidator | None = None) -> None:
        self.broker = broker
        self.store = broker.store
        self.topics = broker.topics
        self.send_back = send_back
        self.metrics = metrics
        #: GET_BROKER_RUNTIME_INFO's table, from the whole broker.
        self.runtime_info = runtime_info
        #: The ACL check (None: ACL is off), which GET_ACL_ACCOUNT reads the signing account from.
        self.acl = acl

    def register(self, server: RemotingServer, executor: Executor) -> None:
        handlers: dict[int, tuple[Handler, Executor | None]] = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: (self.update_and_create_topic, executor),
            RequestCode.DELETE_TOPIC_IN_BROKER: (self.delete_topic, executor),
            RequestCode.GET_ALL_TOPIC_CONFIG: (self.get_all_topic_config, None),
            RequestCode.VIEW_MESSAGE_BY_ID: (self.view_message_by_id, executor),
            RequestCode.QUERY_MESSAGE: (self.query_message, executor),
            RequestCode.QUERY_CONSUME_QUEUE: (self.query_consume_queue, executor),
            RequestCode.GET_MAX_OFFSET: (self.get_max_offset, None),
            RequestCode.GET_MIN_OFFSET: (self.get_min_offset, None),
            RequestCode.GET_EARLIEST_MSG_STORETIME: (self.get_earliest_msg_storetime, None),
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: (self.search_offset_by_timestamp, executor),
            RequestCode.GET_TOPIC_STATS_INFO: (self.get_topic_stats_info, None),
            RequestCode.GET_BROKER_RUNTIME_INFO: (self.get_broker_runtime_info, None),
            RequestCode.GET_BROKER_CONFIG: (self.get_broker_config, None),
            RequestCode.GET_BROKER_METRICS: (self.get_broker_metrics, executor),
            RequestCode.HEARTBEAT: (self.heartbeat, None),
            RequestCode.UNREGISTER_CLIENT: (self.unregister_client, None),
            RequestCode.GET_PRODUCER_CONNECTION_LIST: (self.get_producer_connection_list, None),
            RequestCode.GET_ACL_ACCOUNT: (self.get_acl_account, None),
        }
        register_all(server, handlers)

    # --- the signing account ---

    def get_acl_account(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """What the account that signed ``req`` may do; with ACL off, anything (``aclEnable`` false)."""
        if self.acl is None:
            rights: dict[str, Any] = {"aclEnable": False, "accessKey": "", "admin": True,
                                      "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "PUB|SUB",
                                      "topicPerms": [], "groupPerms": []}
        else:
            access_key = req.ext.get(ACCESS_KEY)
            rights = self.acl.account_rights(access_key if isinstance(access_key, str) else None)
        return ok(req, body=orjson.dumps(rights))

    # --- topics ---

    def update_and_create_topic(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(req.ext)
        why = validate_topic_name(h.topic)
        if why is not None:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"the specified topic is illegal: {why}")
        if h.topic in SYSTEM_TOPICS:
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"the topic[{h.topic}] is conflict with system reserved words")
        if not (0 < h.read_queue_nums <= 1024 and 0 < h.write_queue_nums <= 1024):
            return response_to(req, ResponseCode.SYSTEM_ERROR, "queue numbers must be within 1..1024")
        self.topics.update(TopicConfig(h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
                                       h.topic_filter_type, h.topic_sys_flag, h.order))
        return ok(req)

    def delete_topic(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = TopicRequestHeader.from_ext(req.ext)
        if h.topic in SYSTEM_TOPICS:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"the topic[{h.topic}] is a system topic")
        self.topics.delete(h.topic)
        self.store.delete_topics([h.topic])
        return ok(req)

    def get_all_topic_config(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return ok(req, body=orjson.dumps(self.topics.snapshot()))

    # --- messages ---

    def view_message_by_id(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext(req.ext)
        record = self.store.commitlog.read_record(h.offset) if h.offset >= self.store.commitlog.min_offset else b""
        if not record:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset {h.offset}")
        return ok(req, body=record)

    def query_message(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext(req.ext)
        max_num = max(1, min(h.max_num, 64 * 1024))
        result = self.store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        header = QueryMessageResponseHeader(result.index_last_update_timestamp, result.index_last_update_phy_offset)
        if not result.records:
            return response_to(req, ResponseCode.QUERY_NOT_FOUND,
                               "can not find message, maybe time range not correct", header.to_ext())
        return ok(req, header, b"".join(result.records))

    def query_consume_queue(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """Entries of one consume queue (commitlog offset, size, tag code), whatever the topic's read
        permission: with VIEW_MESSAGE_BY_ID, how admin tools read write-only topics such as %DLQ%<group>."""
        h = QueryConsumeQueueRequestHeader.from_ext(req.ext)
        cfg = self.topics.get(h.topic)
        if cfg is None:
            return response_to(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        if not 0 <= h.queue_id < max(cfg.read_queue_nums, cfg.write_queue_nums):
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"queueId[{h.queue_id}] is illegal, topic[{h.topic}] has "
                               f"{max(cfg.read_queue_nums, cfg.write_queue_nums)} queues")
        count = max(0, min(h.count, 4096))
        cq = self.store.find_consume_queue(h.topic, h.queue_id)
        entries: list[dict] = []
        lo = hi = 0
        if cq is not None:
            lo, hi = cq.min_offset, cq.max_offset
            index = max(h.index, lo)
            while index < hi and len(entries) < count:
                seen = False
                for i, phys, size, tags in cq.iter_from(index, count - len(entries)):
                    seen = True
                    index = i + 1
                    if size != BLANK_SIZE:
                        entries.append({"queueOffset": i, "physicOffset": phys, "physicSize": size,
                                        "tagsCode": tags})
                if not seen:
                    index = cq.roll_next_file(index)
        return ok(req, body=orjson.dumps({"queueData": entries, "minQueueIndex": lo, "maxQueueIndex": hi}))

    # --- offsets ---

    def get_max_offset(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = QueueOffsetRequestHeader.from_ext(req.ext)
        return ok(req, QueueOffsetResponseHeader(self.store.get_max_offset_in_queue(h.topic, h.queue_id)))

    def get_min_offset(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = QueueOffsetRequestHeader.from_ext(req.ext)
        return ok(req, QueueOffsetResponseHeader(self.store.get_min_offset_in_queue(h.topic, h.queue_id)))

    def get_earliest_msg_storetime(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = QueueOffsetRequestHeader.from_ext(req.ext)
        return ok(req, EarliestMsgStoretimeResponseHeader(self.store.get_earliest_message_time(h.topic, h.queue_id)))

    def search_offset_by_timestamp(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(req.ext)
        offset = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return ok(req, QueueOffsetResponseHeader(offset))

    def get_topic_stats_info(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = TopicRequestHeader.from_ext(req.ext)
        cfg = self.topics.get(h.topic)
        if cfg is None:
            return response_to(req, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        table = []
        for qid in range(cfg.write_queue_nums):
            max_off = self.store.get_max_offset_in_queue(h.topic, qid)
            last = self.store.get_message_store_timestamp(h.topic, qid, max_off - 1) if max_off > 0 else 0
            table.append({"brokerName": self.broker.config.broker_name, "queueId": qid,
                          "minOffset": self.store.get_min_offset_in_queue(h.topic, qid), "maxOffset": max_off,
                          "lastUpdateTimestamp": max(last, 0)})
        return ok(req, body=orjson.dumps({"offsetTable": table}))

    def get_broker_runtime_info(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return ok(req, body=orjson.dumps({"table": self.runtime_info()}))

    def get_broker_metrics(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """Every metric sample as ``{"name", "labels", "value"}``, and where Prometheus scrapes them."""
        m = self.metrics
        return ok(req, body=orjson.dumps({"url": m.url, "metrics": m.snapshot()}))

    def get_broker_config(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """The broker's and its store's settings, RocketMQ's ``key=value`` lines."""
        props = {**to_properties(self.broker.config), **to_properties(self.broker.store_config)}
        return ok(req, body="\n".join(f"{k}={v}" for k, v in sorted(props.items())).encode())

    # --- clients ---

    def heartbeat(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        try:
            data = orjson.loads(req.body)
            if not isinstance(data, dict):
                raise ValueError("heartbeat body is not a JSON object")
            self.broker.clients.heartbeat(data, ctx.identity, ctx.remote, ctx.peer_language, ctx.peer_version)
        except (ValueError, TypeError, KeyError) as exc:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"bad heartbeat: {exc}")
        # As RocketMQ: a consumer group's retry topic exists from its first heartbeat on.
        for c in data.get("consumerDataSet") or []:
            if isinstance(c, dict) and isinstance(c.get("groupName"), str):
                self.send_back.ensure_retry_topic(c["groupName"])
        return ok(req)

    def unregister_client(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext(req.ext)
        self.broker.clients.unregister(h.client_id, h.producer_group, h.consumer_group)
        return ok(req)

    def get_producer_connection_list(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """RocketMQ's ProducerConnection of a group: each of its online clients' Connection. As RocketMQ's
        broker, which keeps no empty group: SYSTEM_ERROR "the producer group[...] not exist" without one."""
        h = ProducerGroupRequestHeader.from_ext(req.ext)
        channels = self.broker.clients.producer_channels(h.producer_group)
        if not channels:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"the producer group[{h.producer_group}] not exist")
        return ok(req, body=orjson.dumps({"connectionSet": [ch.connection() for ch in channels]}))
