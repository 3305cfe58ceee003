"""The name server's request handlers (RocketMQ's DefaultRequestProcessor).

Request schemas. Each ext is one typed header of
:mod:`rocketmesh.remoting.protocol.headers` (named below by its fields); its
values may be JSON strings or numbers (RocketMQ sends every header field as a
string; both are accepted), and a missing or mistyped field is answered
SYSTEM_ERROR naming it. Bodies are JSON.

REGISTER_BROKER
    ext  {clusterName, brokerName, brokerId, brokerAddr, haServerAddr}
    body {"topicConfigTable": {topic: {"topicName", "readQueueNums", "writeQueueNums",
          "perm", "topicSysFlag", "order"}}, "dataVersion": {"timestamp", "counter"}}
         (an empty body registers liveness only; only brokerId 0 creates queue data,
         and only on its first registration or when dataVersion changed)
    ->   ext {haServerAddr, masterAddr} (of the master of that broker name, for a
         slave; null otherwise), body {"table": {topic: orderConf}} (ORDER_TOPIC_CONFIG)
UNREGISTER_BROKER
    ext  {clusterName, brokerAddr, brokerName, brokerId}
GET_ROUTEINFO_BY_TOPIC
    ext  {topic}
    ->   body {"queueDatas": [{"brokerName", "readQueueNums", "writeQueueNums", "perm",
         "topicSysFlag"}], "brokerDatas": [{"cluster", "brokerName", "brokerAddrs":
         {"0": "host:port", ...}}], "orderTopicConf": str | null}
         or TOPIC_NOT_EXIST
GET_BROKER_CLUSTER_INFO
    ->   body {"brokerAddrTable": {brokerName: brokerData}, "clusterAddrTable": {cluster: [brokerName]}}
GET_ALL_TOPIC_LIST_FROM_NAMESERVER
    ->   body {"topicList": [topic]}
GET_TOPICS_BY_CLUSTER
    ext  {cluster}  ->  body {"topicList": [topic]}
DELETE_TOPIC_IN_NAMESRV
    ext  {topic}
PUT_KV_CONFIG / GET_KV_CONFIG / DELETE_KV_CONFIG
    ext  {namespace, key, value}  (value for PUT only)
    GET  ->  ext {value}, or QUERY_NOT_FOUND
GET_KVLIST_BY_NAMESPACE
    ext  {namespace}  ->  body {"table": {key: value}}, or QUERY_NOT_FOUND
WIPE_WRITE_PERM_OF_BROKER / ADD_WRITE_PERM_OF_BROKER
    ext  {brokerName}  ->  ext {wipeTopicCount} / {addTopicCount}
QUERY_DATA_VERSION
    ext  {brokerAddr}, body {dataVersion}  ->  ext {changed: bool}, body {dataVersion held}
    (also refreshes the broker's liveness, as RocketMQ does)

Anything else is answered REQUEST_CODE_NOT_SUPPORTED by the server.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

import orjson

from rocketmesh.model.route import TopicConfig
from rocketmesh.namesrv.config import NamesrvConfig
from rocketmesh.namesrv.kv_config import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from rocketmesh.namesrv.route_info import RouteInfoManager
from rocketmesh.remoting import (
    RemotingCommand,
    RemotingServer,
    RequestCode,
    RequestContext,
    RequestError,
    ResponseCode,
    response_to,
)
from rocketmesh.remoting.protocol.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    Header,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from rocketmesh.runtime.log import get_logger

Handler = Callable[[RemotingCommand, RequestContext], RemotingCommand | None]


def json_body(cmd: RemotingCommand) -> Any:
    """The body parsed as JSON (None for an empty body)."""
    if not cmd.body:
        return None
    try:
        return orjson.loads(cmd.body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"body is not JSON: {exc}") from None


def ok(cmd: RemotingCommand, header: Header | None = None, body: Any = None) -> RemotingCommand:
    """A SUCCESS response with ``header``, and ``body`` JSON-encoded when given."""
    return response_to(cmd, ResponseCode.SUCCESS, None, None if header is None else header.to_ext(),
                       b"" if body is None else orjson.dumps(body))


class NamesrvProcessor:
    """Handlers over one RouteInfoManager and one KVConfigManager."""

    def __init__(self, config: NamesrvConfig, routes: RouteInfoManager, kv: KVConfigManager) -> None:
        self.config = config
        self.routes = routes
        self.kv = kv
        self._log = get_logger("namesrv")

    def register_with(self, server: RemotingServer, writer: Executor) -> None:
        """Register every handler: reads inline on the I/O thread, writes on ``writer``."""
        reads: dict[int, Handler] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info_by_topic,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
        }
        writes: dict[int, Handler] = {
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm_of_broker,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm_of_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
        }
        for code, handler in reads.items():
            server.register(code, handler)
        for code, handler in writes.items():
            server.register(code, handler, writer)

    # -- brokers ----------------------------------------------------------

    def register_broker(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext(cmd.ext)
        cluster, broker_name, broker_addr, broker_id = h.cluster_name, h.broker_name, h.broker_addr, h.broker_id
        ha_addr = h.ha_server_addr
        body = json_body(cmd)
        topic_configs: dict[str, TopicConfig] | None = None
        data_version = None
        if body is not None:
            if not isinstance(body, dict):
                raise RequestError(ResponseCode.SYSTEM_ERROR, "register body must be a JSON object")
            table = body.get("topicConfigTable")
            if table is not None:
                if not isinstance(table, dict):
                    raise RequestError(ResponseCode.SYSTEM_ERROR, "topicConfigTable must be an object")
                try:
                    topic_configs = {
                        name: TopicConfig.from_json(tc if isinstance(tc, dict) else {}, name)
                        for name, tc in table.items()
                    }
                except (TypeError, ValueError) as exc:
                    raise RequestError(ResponseCode.SYSTEM_ERROR, f"bad topic config: {exc}") from None
            data_version = body.get("dataVersion")
        result = self.routes.register_broker(
            cluster, broker_addr, broker_name, broker_id, ha_addr, topic_configs, data_version,
            channel=ctx.identity, remoting_addr=h.remoting_addr,
        )
        if result.change is not None:  # RocketMQ's "new broker registered"; a plain heartbeat stays DEBUG
            self._log.info("broker_registered", broker=broker_name, cluster=cluster, broker_id=broker_id,
                           addr=broker_addr, change=result.change, topics=len(topic_configs or ()),
                           data_version=data_version, peer=ctx.remote)
        else:
            self._log.debug("broker_heartbeat", broker=broker_name, broker_id=broker_id, addr=broker_addr)
        return ok(
            cmd,
            RegisterBrokerResponseHeader(result.ha_server_addr, result.master_addr),
            {"table": self.kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)},
        )

    def unregister_broker(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_ext(cmd.ext)
        self.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        self._log.info("broker_unregistered", broker=h.broker_name, addr=h.broker_addr)
        return ok(cmd)

    def wipe_write_perm_of_broker(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_ext(cmd.ext)
        count = self.routes.set_write_perm(h.broker_name, writable=False)
        return ok(cmd, WipeWritePermOfBrokerResponseHeader(count))

    def add_write_perm_of_broker(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = AddWritePermOfBrokerRequestHeader.from_ext(cmd.ext)
        count = self.routes.set_write_perm(h.broker_name, writable=True)
        return ok(cmd, AddWritePermOfBrokerResponseHeader(count))

    def query_data_version(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        broker_addr = QueryDataVersionRequestHeader.from_ext(cmd.ext).broker_addr
        changed = self.routes.is_broker_topic_config_changed(broker_addr, json_body(cmd))
        self.routes.touch_broker(broker_addr)
        held = self.routes.data_version_of(broker_addr)
        return ok(cmd, QueryDataVersionResponseHeader(changed), held)

    # -- topics -----------------------------------------------------------

    def get_route_info_by_topic(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        topic = GetRouteInfoRequestHeader.from_ext(cmd.ext).topic
        route = self.routes.pick_topic_route_data(topic)
        if route is not None and ctx.over_tcp:
            route = route.for_tcp()
            if not route.broker_datas:
                route = None
        if route is None:
            return response_to(
                cmd, ResponseCode.TOPIC_NOT_EXIST, f"no route info of topic {topic!r} in this name server"
            )
        if self.config.order_message_enable:
            route = dataclasses.replace(route, order_topic_conf=self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic))
        return ok(cmd, body=route.to_json())

    def get_broker_cluster_info(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return ok(cmd, body=self.routes.cluster_info(tcp=ctx.over_tcp))

    def get_all_topic_list(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return ok(cmd, body={"topicList": self.routes.all_topics()})

    def get_topics_by_cluster(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        cluster = GetTopicsByClusterRequestHeader.from_ext(cmd.ext).cluster
        return ok(cmd, body={"topicList": self.routes.topics_by_cluster(cluster)})

    def delete_topic(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        self.routes.delete_topic(DeleteTopicFromNamesrvRequestHeader.from_ext(cmd.ext).topic)
        return ok(cmd)

    # -- KV config --------------------------------------------------------

    def put_kv_config(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = PutKVConfigRequestHeader.from_ext(cmd.ext)
        self.kv.put(h.namespace, h.key, h.value)
        return ok(cmd)

    def get_kv_config(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = GetKVConfigRequestHeader.from_ext(cmd.ext)
        value = self.kv.get(h.namespace, h.key)
        if value is None:
            return response_to(cmd, ResponseCode.QUERY_NOT_FOUND, f"no config item {h.namespace}/{h.key}")
        return ok(cmd, GetKVConfigResponseHeader(value))

    def delete_kv_config(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = DeleteKVConfigRequestHeader.from_ext(cmd.ext)
        self.kv.delete(h.namespace, h.key)
        return ok(cmd)

    def get_kv_list_by_namespace(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        namespace = GetKVListByNamespaceRequestHeader.from_ext(cmd.ext).namespace
        table = self.kv.namespace(namespace)
        if not table:
            return response_to(cmd, ResponseCode.QUERY_NOT_FOUND, f"no config items in namespace {namespace}")
        return ok(cmd, body={"table": table})
