"""Admin: topics, clusters, offsets, consumer groups and message look-ups (RocketMQ's DefaultMQAdminExt / mqadmin).

    with Admin("127.0.0.1:9876") as admin:
        admin.create_topic("Orders", read_queue_nums=4, write_queue_nums=4)
        for mq, offsets in admin.topic_status("Orders").items():
            print(mq, offsets.min_offset, offsets.max_offset)
        print("lag:", admin.consume_stats("orders-consumer", "Orders").total_diff())

Failures are typed as everywhere in the SDK: :class:`MQBrokerError` with
the server's ``response_code`` and ``remark``, :class:`RequestTimeoutError`,
:class:`MQClientError` for bad input or nothing to ask.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from rocketmesh.client.admin.dead_letters import DeadLetter, DeadLetters, ResendResult
from rocketmesh.client.admin.queue_reader import read_queue
from rocketmesh.client.api import DEFAULT_TIMEOUT_MS, ClientAPI, raise_first
from rocketmesh.client.cluster import BrokerInfo, ClusterInfo
from rocketmesh.client.errors import ClientErrorCode, MQBrokerError, MQClientError, MQError
from rocketmesh.client.instance import ClientInstance, Credentials, namesrv_addrs_from
from rocketmesh.client.producer.producer import Producer
from rocketmesh.client.results import (
    AclAccount,
    Connection,
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    OffsetWrapper,
    PendingHalfMessage,
    ProducerConnection,
    TopicOffset,
)
from rocketmesh.client.running_info import ConsumeMessageDirectlyResult, ConsumerRunningInfo
from rocketmesh.client.trace.trace_data import TraceDecodeError, TraceRecord, decode as decode_trace
from rocketmesh.client.unique_id import looks_like_message_id
from rocketmesh.client.validators import check_group, check_topic
from rocketmesh.model.codec import CorruptRecord, decode_message_id, decode_record, decode_records
from rocketmesh.model.message import MessageConst, MessageExt, MessageQueue
from rocketmesh.model.route import Perm, TopicRouteData
from rocketmesh.model.topics import TRACE_TOPIC, retry_topic
from rocketmesh.remoting import ResponseCode
from rocketmesh.remoting.addr import join_addr
from rocketmesh.remoting.protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsRequestHeader,
    PendingHalfMessagesRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
)

T = TypeVar("T")


class Admin:
    """Administration over a name server list (``"host:port;host:port"``, a list, or NAMESRV_ADDR).

    Starts on first use; use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        instance_name: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self.namesrv_addrs = namesrv_addrs_from(namesrv)
        #: The ACL account (both or neither); most admin requests need an admin account.
        self._credentials = Credentials(access_key=access_key, secret_key=secret_key)
        self.timeout_ms = timeout_ms
        self._instance_name = instance_name
        self._instance: ClientInstance | None = None
        self._producers: dict[str, Producer] = {}
        self._closed = False

    # -- life cycle ------------------------------------------------------------

    def start(self) -> Admin:
        """Join the client instance (idempotent); returns self."""
        if self._closed:
            raise MQClientError("the admin is closed; create a new one")
        if self._instance is None:
            self._instance = ClientInstance.acquire(
                self.namesrv_addrs, instance_name=self._instance_name, request_timeout_ms=self.timeout_ms,
                **self._credentials)
        return self

    def close(self) -> None:
        """Leave the client instance."""
        if self._closed:
            return
        self._closed = True
        for producer in self._producers.values():
            producer.shutdown()
        self._producers.clear()
        if self._instance is not None:
            self._instance.release()
            self._instance = None

    shutdown = close

    def __enter__(self) -> Admin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def api(self) -> ClientAPI:
        """The remote calls of the shared client instance (starts the admin)."""
        return self.instance.api

    @property
    def instance(self) -> ClientInstance:
        """The shared client instance (starts the admin)."""
        if self._instance is None:
            self.start()
        assert self._instance is not None
        return self._instance

    # -- name server -----------------------------------------------------------

    def topic_list(self) -> list[str]:
        """Every topic the name servers know, sorted."""
        return sorted(self.api.get_all_topic_list(self.timeout_ms))

    def topic_route(self, topic: str) -> TopicRouteData:
        """The name server's current route of ``topic``; MQBrokerError(TOPIC_NOT_EXIST) when it has none."""
        return self.api.get_topic_route(topic, self.timeout_ms)

    def cluster_info(self) -> ClusterInfo:
        """The name server's cluster table."""
        return self.api.get_broker_cluster_info(self.timeout_ms)

    def cluster_list(self, cluster: str | None = None) -> list[BrokerInfo]:
        """Every broker process (of ``cluster`` when given): cluster, broker name, id, address."""
        return self.cluster_info().brokers(cluster)

    # -- topics ----------------------------------------------------------------

    def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = int(Perm.READ | Perm.WRITE),
        broker_addr: str | None = None,
        cluster: str | None = None,
        *,
        order: bool = False,
        topic_sys_flag: int = 0,
    ) -> list[str]:
        """Create or update ``topic`` on ``broker_addr``, else on every master of ``cluster``, else of all clusters.

        Returns the broker addresses written to. The brokers register the
        change with the name servers, so a route appears shortly after.
        """
        check_topic(topic)
        if read_queue_nums < 1 or write_queue_nums < 1:
            raise MQClientError("read_queue_nums and write_queue_nums must be at least 1", ResponseCode.MESSAGE_ILLEGAL)
        if not 0 <= perm <= 7:
            raise MQClientError(f"perm must be RocketMQ permission bits 0..7, got {perm}", ResponseCode.MESSAGE_ILLEGAL)
        addrs = [broker_addr] if broker_addr else self._master_addrs(cluster)
        self.api.update_and_create_topic(addrs, CreateTopicRequestHeader(
            topic, read_queue_nums, write_queue_nums, perm, topic_sys_flag=topic_sys_flag, order=order
        ), self.timeout_ms)
        return addrs

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Delete ``topic`` from the masters (of ``cluster``, else all), then from every name server."""
        if not isinstance(topic, str) or not topic:
            raise MQClientError("give the topic to delete", ResponseCode.MESSAGE_ILLEGAL)
        self.api.delete_topic_in_broker(self._master_addrs(cluster), topic, self.timeout_ms)
        raise_first(self.api.delete_topic_in_namesrv(self.namesrv_addrs, topic, self.timeout_ms))

    def topic_config_table(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """A broker's topic configs: topic -> RocketMQ's TopicConfig fields."""
        return self.api.get_all_topic_config(broker_addr, self.timeout_ms)

    def topic_status(self, topic: str) -> dict[MessageQueue, TopicOffset]:
        """Per queue of ``topic`` on each of its brokers: min and max offset and last update time, queue order."""
        targets = self._route_masters(topic)
        results = self.api.get_topic_stats_info([addr for _, addr in targets], topic, self.timeout_ms)
        raise_first(results)
        out: dict[MessageQueue, TopicOffset] = {}
        for (broker_name, _addr), data in zip(targets, results, strict=False):
            table = data.get("offsetTable") or []  # type: ignore[union-attr]
            entries = table.values() if isinstance(table, dict) else table
            for e in entries:
                mq = MessageQueue(topic, str(e.get("brokerName") or broker_name), int(e["queueId"]))
                out[mq] = TopicOffset(int(e.get("minOffset", 0)), int(e.get("maxOffset", 0)),
                                      int(e.get("lastUpdateTimestamp", 0)))
        return dict(sorted(out.items()))

    # -- brokers ---------------------------------------------------------------

    def broker_runtime_info(self, broker_addr: str) -> dict[str, Any]:
        """A broker's runtime figures (RocketMQ's KVTable): name -> value."""
        return self.api.get_broker_runtime_info(broker_addr, self.timeout_ms)

    def broker_config(self, broker_addr: str) -> dict[str, str]:
        """A broker's settings (RocketMQ's getBrokerConfig): key -> value, as its config would write them."""
        return self.api.get_broker_config(broker_addr, self.timeout_ms)

    def acl_account(self, broker_addr: str | None = None) -> AclAccount:
        """What the account this admin signs as may do, as ``broker_addr`` (default: a master) says: a wrong
        secret is refused here with MQBrokerError(NO_PERMISSION), as every signed request would be."""
        addr = broker_addr or self._master_addrs(None)[0]
        try:
            return AclAccount.from_json(self.api.get_acl_account(addr, self.timeout_ms))
        except ValueError as exc:
            raise MQClientError(f"malformed ACL account answer from {addr}: {exc}") from exc

    def broker_metrics(self, broker_addr: str) -> tuple[str, list[dict[str, Any]]]:
        """A broker's metrics as its Prometheus endpoint serves them: (that endpoint's URL, empty when
        metricsExporterType=DISABLE; samples ``{"name", "labels", "value"}``)."""
        return self.api.get_broker_metrics(broker_addr, self.timeout_ms)

    def broker_consume_stats(self, broker_addr: str, is_order: bool = False) -> ConsumeStatsList:
        """The progress of every consumer group with offsets on the broker at ``broker_addr``, in one request
        (RocketMQ's fetchConsumeStatsInBroker; ``is_order``: in ordered topics only): per group the
        ConsumeStats of each of its topics, as :meth:`consume_stats` reads them, and the broker's total lag.
        ``group_stats(group)`` gives a group's progress on that broker as one ConsumeStats."""
        if not isinstance(broker_addr, str) or not broker_addr:
            raise MQClientError("give the address of the broker to ask", ResponseCode.MESSAGE_ILLEGAL)
        return self.api.get_broker_consume_stats(broker_addr, bool(is_order), self.timeout_ms)

    # -- offsets ---------------------------------------------------------------

    def max_offset(self, mq: MessageQueue) -> int:
        """The offset one past the last message of ``mq``."""
        return self.api.get_max_offset(self.instance.find_master_addr(mq), mq, self.timeout_ms)

    def min_offset(self, mq: MessageQueue) -> int:
        """The offset of the first message of ``mq`` still stored."""
        return self.api.get_min_offset(self.instance.find_master_addr(mq), mq, self.timeout_ms)

    def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        """The store time (epoch ms) of the first message of ``mq`` still stored."""
        return self.api.get_earliest_msg_storetime(self.instance.find_master_addr(mq), mq, self.timeout_ms)

    def queue_messages(self, mq: MessageQueue, offset: int, max_num: int) -> list[MessageExt]:
        """Up to ``max_num`` messages of ``mq`` from queue offset ``offset`` on, read from its master with admin
        requests: whatever the topic's permission, and no group's offset moves (a console's browsing)."""
        if max_num < 1:
            raise MQClientError(f"max_num must be at least 1, got {max_num}", ResponseCode.MESSAGE_ILLEGAL)
        return list(read_queue(self.api, self.instance.find_master_addr(mq), mq.topic, mq.queue_id, self.timeout_ms,
                               offset, max_num))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``."""
        return self.api.search_offset(self.instance.find_master_addr(mq), mq, timestamp_ms, self.timeout_ms)

    # -- consumer groups -------------------------------------------------------

    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """``group``'s progress per queue: broker offset, consumer offset, lag (RocketMQ's examineConsumeStats).

        Asks every master of the cluster (of ``topic``'s route when given) at
        once and merges their answers; the TPS is summed. A broker that knows
        nothing of the group is skipped; MQClientError(CONSUMER_NOT_ONLINE)
        when none does, the broker's error when one fails.
        """
        check_group(group)
        if topic is not None:
            addrs = [addr for _, addr in self._route_masters(topic)]
        else:
            addrs = self._master_addrs(None)
        table: dict[MessageQueue, OffsetWrapper] = {}
        tps = 0.0
        for data in _online(self.api.get_consume_stats(addrs, GetConsumeStatsRequestHeader(group, topic),
                                                       self.timeout_ms)):
            try:
                stats = ConsumeStats.from_json(data)
            except ValueError as exc:
                raise MQClientError(f"malformed consume stats of group {group!r}: {exc}") from exc
            table.update(stats.offset_table)
            tps += stats.consume_tps
        if not table:
            raise MQClientError(f"the consumer group {group} has no progress on any broker: "
                                "not online, or never consumed", ResponseCode.CONSUMER_NOT_ONLINE)
        return ConsumeStats(dict(sorted(table.items())), tps)

    def consumer_connection(self, group: str) -> ConsumerConnection:
        """``group``'s running clients and subscriptions, merged over every master (RocketMQ's
        examineConsumerConnectionInfo).

        A client seen by several brokers is listed once, with its latest
        heartbeat. MQClientError(CONSUMER_NOT_ONLINE) when no broker has a
        client of the group.
        """
        check_group(group)
        out = ConsumerConnection([], {})
        answers = _online(self.api.get_consumer_connection_list(self._master_addrs(None), group, self.timeout_ms))
        for data in answers:
            try:
                for t, sub in dict(data.get("subscriptionTable") or {}).items():
                    out.subscriptions.setdefault(str(t), dict(sub))
            except (TypeError, ValueError) as exc:
                raise MQClientError(f"malformed connection list of group {group!r}: {exc}") from exc
            out.consume_type = out.consume_type or data.get("consumeType")
            out.message_model = out.message_model or data.get("messageModel")
            out.consume_from_where = out.consume_from_where or data.get("consumeFromWhere")
        out.connections = _merge_connections(answers, group)
        if not out.connections:
            raise MQClientError(f"the consumer group {group} is not online: no broker has a client of it",
                                ResponseCode.CONSUMER_NOT_ONLINE)
        out.subscriptions = dict(sorted(out.subscriptions.items()))
        return out

    def producer_connection(self, group: str) -> ProducerConnection:
        """``group``'s online producer clients (id, address, language, version, last heartbeat), merged over
        every master: a producer heartbeats to each master it knows a route to (RocketMQ's
        examineProducerConnectionInfo, which asks one broker of a topic's route).

        A client seen by several brokers is listed once, with its latest heartbeat. When no broker has a
        client of the group, the brokers' answer: MQBrokerError(SYSTEM_ERROR, "the producer group[<group>] not
        exist"), as RocketMQ's.
        """
        check_group(group)
        answers: list[dict[str, Any]] = []
        absent: MQBrokerError | None = None
        for res in self.api.get_producer_connection_list(self._master_addrs(None), group, self.timeout_ms):
            if isinstance(res, MQBrokerError) and _no_producer(res):
                absent = absent or res
            elif isinstance(res, MQError):
                raise res
            else:
                answers.append(res)
        connections = _merge_connections(answers, group)
        if not connections:
            # A broker answers a group it has no client of with SYSTEM_ERROR; an empty list is another broker's.
            raise absent or MQClientError(f"Not found the producer group connection: {group}")
        return ProducerConnection(connections)

    def topic_consumers(self, topic: str) -> list[str]:
        """The consumer groups of ``topic``, sorted: those with an online consumer subscribed to it and those
        with an offset committed in it, on any master of its route (RocketMQ's queryTopicConsumeByWho, asked of
        every master and merged). MQBrokerError(TOPIC_NOT_EXIST) when the topic has no route."""
        if not isinstance(topic, str) or not topic:
            raise MQClientError("give the topic whose consumer groups to list", ResponseCode.MESSAGE_ILLEGAL)
        addrs = [addr for _, addr in self._route_masters(topic)]
        results = self.api.query_topic_consume_by_who(addrs, topic, self.timeout_ms)
        raise_first(results)
        return sorted({g for groups in results if isinstance(groups, list) for g in groups})

    def consumer_ids(self, group: str) -> list[str]:
        """The client ids of ``group``'s running clients, over every master, sorted ([] when none)."""
        check_group(group)
        addrs = self._master_addrs(None)
        ids: set[str] = set()
        for res in self.api.get_consumer_id_list(addrs, group, self.timeout_ms):
            # The broker answers SYSTEM_ERROR when it has no client of the group.
            if isinstance(res, MQBrokerError) and res.response_code == ResponseCode.SYSTEM_ERROR:
                continue
            if isinstance(res, MQError):
                raise res
            ids.update(res)
        return sorted(ids)

    def consumer_running_info(self, group: str, client_id: str, jstack: bool = False) -> ConsumerRunningInfo:
        """How the client ``client_id`` of ``group`` is doing: its settings, subscriptions and the figures of
        each queue it holds (RocketMQ's getConsumerRunningInfo; ``jstack``: with its threads' stacks).

        A broker the group heartbeats to asks the client over the client's own connection, whichever door it
        came in by. MQBrokerError(SYSTEM_ERROR, "The Consumer <group> <client> not online") when no broker
        knows the client, MQBrokerError(CONSUME_MSG_TIMEOUT) when it did not answer in time.
        """
        check_group(group)
        _check_client_id(client_id)
        header = GetConsumerRunningInfoRequestHeader(group, client_id, bool(jstack), self._client_timeout_ms())
        last: MQBrokerError | None = None
        for addr in self._group_brokers(group):
            try:
                return self.api.get_client_running_info(addr, header, self.timeout_ms)
            except MQBrokerError as exc:
                if not _not_online(exc):
                    raise
                last = exc
        assert last is not None  # _group_brokers names at least one broker
        raise last

    def consume_message_directly(self, group: str, client_id: str, msg_id: str,
                                 topic: str | None = None) -> ConsumeMessageDirectlyResult:
        """Have the client ``client_id`` of ``group`` run the message ``msg_id`` through its listener now,
        outside regular consumption (nothing is retried or committed), and say how that went (RocketMQ's
        consumeMessageDirectly). ``msg_id`` is an offset message id; a message's own id (its unique key)
        needs its ``topic``. Errors as :meth:`consumer_running_info`'s.
        """
        check_group(group)
        _check_client_id(client_id)
        if not isinstance(msg_id, str) or not looks_like_message_id(msg_id):
            raise MQClientError(f"{msg_id!r} is not a message id (32 hex characters)", ResponseCode.MESSAGE_ILLEGAL)
        addr, _ = self._offset_id_broker(msg_id)
        if addr is None:
            if topic is None:
                raise MQClientError(_not_an_offset_id(msg_id), ResponseCode.MESSAGE_ILLEGAL)
            msg_id = self.query_msg_by_unique_key(topic, msg_id).msg_id
            addr, _ = self._offset_id_broker(msg_id)
            if addr is None:
                raise MQClientError(f"the broker storing {msg_id} is not registered", ResponseCode.MESSAGE_ILLEGAL)
        header = ConsumeMessageDirectlyResultRequestHeader(group, client_id, msg_id,
                                                           timeout_millis=self._client_timeout_ms())
        return self.api.consume_message_directly(addr, header, self.timeout_ms)

    def _client_timeout_ms(self) -> int:
        """How long a broker may wait for a client on this admin's behalf: less than this admin waits for the
        broker, so that a client's silence comes back as the broker's answer naming it."""
        return self.timeout_ms - min(1000, self.timeout_ms // 4)

    def _group_brokers(self, group: str) -> list[str]:
        """The masters ``group``'s clients heartbeat to: those of its retry topic's route (created by the
        group's first heartbeat), else every master."""
        try:
            addrs = [addr for _, addr in self._route_masters(retry_topic(group))]
        except MQError:
            addrs = []
        return addrs or self._master_addrs(None)

    def reset_offset_by_time(
        self, group: str, topic: str, timestamp_ms: int, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets in ``topic`` to the first message stored at or after ``timestamp_ms``
        (-1: to the end of each queue), on every master of the topic's route.

        The brokers store the new offsets and push them to the group's running
        clients, so no restart is needed. Without ``force`` a queue whose
        offset is already at or before the target is left where it is.
        Returns the new offset of each queue, in queue order.
        """
        check_group(group)
        if not isinstance(topic, str) or not topic:
            raise MQClientError("give the topic whose offsets to reset", ResponseCode.MESSAGE_ILLEGAL)
        ts = int(timestamp_ms)
        if ts < -1:
            raise MQClientError(f"the timestamp must be epoch ms or -1 (the end), got {ts}",
                                ResponseCode.MESSAGE_ILLEGAL)
        targets = self._route_masters(topic)
        results = self.api.invoke_broker_to_reset_offset([addr for _, addr in targets],
                                                         ResetOffsetRequestHeader(topic, group, ts, bool(force)),
                                                         self.timeout_ms)
        raise_first(results)
        out: dict[MessageQueue, int] = {}
        for (broker_name, addr), data in zip(targets, results, strict=False):
            assert isinstance(data, dict)
            try:
                for e in data.get("offsetTable") or []:
                    mq = MessageQueue(str(e.get("topic") or topic), str(e.get("brokerName") or broker_name),
                                      int(e["queueId"]))
                    out[mq] = int(e["offset"])
            except (KeyError, TypeError, ValueError) as exc:
                raise MQClientError(f"malformed reset answer from {addr}: {exc}") from exc
        return dict(sorted(out.items()))

    def update_subscription_group(
        self,
        group: str,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
        consume_enable: bool = True,
        consume_broadcast_enable: bool = True,
        retry_queue_nums: int = 1,
        retry_max_times: int = 16,
        consume_from_min_enable: bool = True,
        which_broker_when_consume_slowly: int = 1,
        notify_consumer_ids_changed_enable: bool = True,
        broker_id: int = 0,
    ) -> list[str]:
        """Create or replace ``group``'s subscription group config on ``broker_addr``, else on every master of
        ``cluster``, else of all clusters (RocketMQ's updateSubGroup). Returns the broker addresses written to.

        ``consume_enable=False`` makes the brokers refuse the group's pulls
        (NO_PERMISSION); ``retry_max_times`` is how often a message is retried
        before it goes to the group's dead-letter queue.
        """
        check_group(group)
        for name, value in (("retry_queue_nums", retry_queue_nums), ("retry_max_times", retry_max_times),
                            ("which_broker_when_consume_slowly", which_broker_when_consume_slowly),
                            ("broker_id", broker_id)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise MQClientError(f"{name} must be an integer >= 0, got {value!r}", ResponseCode.MESSAGE_ILLEGAL)
        config = {
            "groupName": group,
            "consumeEnable": bool(consume_enable),
            "consumeFromMinEnable": bool(consume_from_min_enable),
            "consumeBroadcastEnable": bool(consume_broadcast_enable),
            "retryQueueNums": retry_queue_nums,
            "retryMaxTimes": retry_max_times,
            "brokerId": broker_id,
            "whichBrokerWhenConsumeSlowly": which_broker_when_consume_slowly,
            "notifyConsumerIdsChangedEnable": bool(notify_consumer_ids_changed_enable),
        }
        addrs = [broker_addr] if broker_addr else self._master_addrs(cluster)
        self.api.update_and_create_subscription_group(addrs, config, self.timeout_ms)
        return addrs

    def subscription_groups(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """A broker's subscription group configs: group -> RocketMQ's SubscriptionGroupConfig fields."""
        return self.api.get_all_subscription_group(broker_addr, self.timeout_ms)

    def delete_subscription_group(self, group: str, cluster: str | None = None) -> None:
        """Delete ``group``'s config and its stored offsets from the masters of ``cluster``, else of all clusters."""
        if not isinstance(group, str) or not group:
            raise MQClientError("give the consumer group to delete", ResponseCode.MESSAGE_ILLEGAL)
        self.api.delete_subscription_group(self._master_addrs(cluster), group, self.timeout_ms)

    # -- messages --------------------------------------------------------------

    def _offset_id_broker(self, msg_id: str) -> tuple[str | None, int]:
        """The broker address and commitlog offset an offset message id names; the address is None when
        no name server knows a broker there (so the id is more likely a client message id)."""
        try:
            ip, port, offset = decode_message_id(msg_id)
        except (ValueError, OSError) as exc:
            raise MQClientError(f"{msg_id!r} is not a message id: {exc}", ResponseCode.MESSAGE_ILLEGAL) from exc
        if not 0 < port < 65536:
            return None, offset
        return self.cluster_info().broker_at(join_addr(ip, port)), offset

    def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message with this offset message id (a SendResult's ``offset_msg_id``), read from the broker
        the id names. MQClientError when the id names no broker the name servers know: a client message id
        (``msg_id``) is found with :meth:`query_msg_by_id` and its topic."""
        addr, offset = self._offset_id_broker(offset_msg_id)
        if addr is None:
            raise MQClientError(_not_an_offset_id(offset_msg_id), ResponseCode.MESSAGE_ILLEGAL)
        return self._view_at(addr, offset)

    def _view_at(self, addr: str, offset: int) -> MessageExt:
        """The record at commitlog ``offset`` of the broker at ``addr`` (VIEW_MESSAGE_BY_ID)."""
        record = self.api.view_message(addr, offset, self.timeout_ms)
        try:
            return decode_record(record)
        except CorruptRecord as exc:
            raise MQClientError(f"the broker at {addr} sent an unreadable record: {exc}") from exc

    def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """A message by either id.

        An offset message id (store host + commitlog offset) of a broker the
        name server knows is read from that broker directly. Otherwise, with
        ``topic`` given, ``msg_id`` is taken as the client's message id (the
        unique key, UNIQ_KEY) and looked up in the topic's index; without
        ``topic`` that is an MQClientError saying the topic is needed.
        """
        if not isinstance(msg_id, str) or not looks_like_message_id(msg_id):
            raise MQClientError(f"{msg_id!r} is not a message id (32 hex characters)", ResponseCode.MESSAGE_ILLEGAL)
        addr, offset = self._offset_id_broker(msg_id)
        if addr is not None:
            try:
                return self._view_at(addr, offset)
            except MQError:
                if topic is None:
                    raise
        if topic is None:
            raise MQClientError(_not_an_offset_id(msg_id), ResponseCode.MESSAGE_ILLEGAL)
        return self.query_msg_by_unique_key(topic, msg_id)

    def query_msg_by_unique_key(self, topic: str, unique_key: str) -> MessageExt:
        """The message whose UNIQ_KEY is ``unique_key`` (the earliest stored, should a retry have stored two)."""
        found = [m for m in self._query(topic, unique_key, 32, 0, None) if m.unique_key == unique_key]
        if not found:
            raise MQClientError(f"no message with unique key {unique_key} in topic {topic!r}", ResponseCode.NO_MESSAGE)
        return min(found, key=lambda m: (m.store_timestamp, m.commitlog_offset))

    def query_msg_by_key(
        self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0, end_ms: int | None = None
    ) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS, stored in [begin_ms, end_ms].

        Asks every broker of the topic at once (up to ``max_num`` each) and
        merges the answers in store-time order.
        """
        sep = MessageConst.KEY_SEPARATOR
        out = [m for m in self._query(topic, key, max_num, begin_ms, end_ms)
               if m.keys is not None and key in m.keys.split(sep)]
        out.sort(key=lambda m: (m.store_timestamp, m.store_host, m.commitlog_offset))
        return out

    def query_msg_trace(
        self, msg_id: str, trace_topic: str | None = None, max_num: int = 64, begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> list[TraceRecord]:
        """The message trace records of the message ``msg_id`` (its id, or for its Pub its offset id) in
        ``trace_topic`` (default RMQ_SYS_TRACE_TOPIC), oldest first (RocketMQ's queryMsgTraceById).

        A record's ``client_host`` is, unless it carries one, the host that sent its trace message (the traced
        client's, as RocketMQ's TraceView takes it). A trace message that is no trace is skipped.
        """
        out: list[TraceRecord] = []
        for m in self.query_msg_by_key(trace_topic or TRACE_TOPIC, msg_id, max_num, begin_ms, end_ms):
            try:
                records = decode_trace(m.body.decode("utf-8", errors="replace"))
            except TraceDecodeError:
                continue
            for r in records:
                if r.msg_id == msg_id or r.offset_msg_id == msg_id:
                    if not r.client_host:
                        r.client_host = m.born_host.rpartition(":")[0] or m.born_host
                    out.append(r)
        out.sort(key=lambda r: r.timestamp)
        return out

    # -- retries and dead letters ---------------------------------------------

    def dlq_messages(self, group: str, max_num: int = 100) -> list[DeadLetter]:
        """Up to ``max_num`` messages of ``group``'s dead-letter queue ``%DLQ%<group>`` (id, original topic,
        reconsume times, store time, body), read from the brokers directly ([] when there are none)."""
        return DeadLetters(self).list(group, max_num)

    def resend_dlq(self, group: str, msg_id: str | None = None) -> list[ResendResult]:
        """Resend one dead letter of ``group`` (``msg_id``: its unique key or offset id) or, without
        ``msg_id``, all of them, to the original topic as new messages (same body, tags, keys, user
        properties). MQClientError(NO_MESSAGE) when there is no such message; see :class:`DeadLetters`."""
        return DeadLetters(self).resend(group, msg_id)

    def retry_history(self, msg_id: str, group: str | None = None, topic: str | None = None) -> list[MessageExt]:
        """Every stored copy of a message (original, retries, dead letter), oldest first; see
        :meth:`DeadLetters.retry_history`."""
        return DeadLetters(self).retry_history(msg_id, group, topic)

    def inner_producer(self, group: str) -> Producer:
        """A producer of ``group`` on this admin's name servers, started on first use, shut down by close()."""
        producer = self._producers.get(group)
        if producer is None:
            producer = self._producers[group] = Producer(group, self.namesrv_addrs, instance_name=self._instance_name,
                                                         **self._credentials)
            producer.start()
        return producer

    # -- transactions ----------------------------------------------------------

    def pending_half_messages(self, topic: str, max_num: int = 100) -> list[PendingHalfMessage]:
        """Half messages of ``topic`` whose transaction is not decided yet (neither committed, rolled back nor
        given up), oldest first, up to ``max_num`` from each master broker; [] when there are none."""
        check_topic(topic)
        if not isinstance(max_num, int) or isinstance(max_num, bool) or max_num < 1:
            raise MQClientError(f"max_num must be an integer >= 1, got {max_num!r}", ResponseCode.MESSAGE_ILLEGAL)
        masters = [b for b in self.cluster_info().brokers() if b.is_master]
        if not masters:
            raise MQClientError("no master broker registered with the name servers",
                                ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        out: list[PendingHalfMessage] = []
        results = self.api.get_pending_half_messages([b.addr for b in masters],
                                                     PendingHalfMessagesRequestHeader(topic, max_num), self.timeout_ms)
        raise_first(results)
        for broker, entries in zip(masters, results, strict=False):
            assert isinstance(entries, list)
            try:
                out.extend(PendingHalfMessage(
                    str(e["transactionId"]), str(e["topic"]), int(e["queueId"]), broker.broker_name,
                    str(e["producerGroup"]), int(e["checkTimes"]), int(e["bornTimestamp"]),
                    int(e["storeTimestamp"]), int(e["halfQueueOffset"]), int(e["commitLogOffset"]),
                    str(e["offsetMsgId"]), str(e.get("keys") or ""), str(e.get("tags") or "")) for e in entries)
            except (KeyError, TypeError, ValueError) as exc:
                raise MQClientError(f"malformed pending half messages from {broker.addr}: {exc}") from exc
        out.sort(key=lambda p: (p.born_timestamp, p.transaction_id))
        return out

    def wait_topic_route(self, topic: str, timeout_s: float = 10.0, interval_s: float = 0.1) -> TopicRouteData:
        """Poll until the name servers have a route for ``topic`` (after create_topic), at most ``timeout_s``.

        Raises the last MQBrokerError(TOPIC_NOT_EXIST) when none appeared in time.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.topic_route(topic)
            except MQBrokerError as exc:
                if exc.response_code != ResponseCode.TOPIC_NOT_EXIST or time.monotonic() >= deadline:
                    raise
            time.sleep(interval_s)

    # -- internals -------------------------------------------------------------

    def _query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int | None) -> list[MessageExt]:
        route = self.topic_route(topic)
        addrs = [a for a in (bd.select_addr() for bd in route.broker_datas) if a]
        if not addrs:
            raise MQClientError(f"topic {topic!r} has no broker to ask", ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        # No end: the header's own default, the end of time.
        header = (QueryMessageRequestHeader(topic, key, max_num, int(begin_ms)) if end_ms is None
                  else QueryMessageRequestHeader(topic, key, max_num, int(begin_ms), int(end_ms)))
        found: list[MessageExt] = []
        errors: list[MQError] = []
        for addr, res in zip(addrs, self.api.query_message(addrs, header, self.timeout_ms), strict=False):
            if isinstance(res, MQBrokerError) and res.response_code == ResponseCode.QUERY_NOT_FOUND:
                continue
            if isinstance(res, MQError):
                errors.append(res)
            else:
                try:
                    found.extend(m for m in decode_records(res) if m.topic == topic)
                except CorruptRecord as exc:
                    errors.append(MQClientError(f"the broker at {addr} sent unreadable records: {exc}"))
        if errors and len(errors) == len(addrs):
            raise errors[0]
        return found

    def _master_addrs(self, cluster: str | None) -> list[str]:
        info = self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise MQClientError(f"no cluster named {cluster!r}; known: {info.cluster_names()}",
                                ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        addrs = info.master_addrs(cluster)
        if not addrs:
            raise MQClientError("no master broker registered with the name servers",
                                ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        return addrs

    def _route_masters(self, topic: str) -> list[tuple[str, str]]:
        """(broker name, master address) of each broker in ``topic``'s route that has a master."""
        route = self.topic_route(topic)
        targets = [(bd.broker_name, bd.master_addr) for bd in route.broker_datas if bd.master_addr]
        if not targets:
            raise MQClientError(f"topic {topic!r} has no master broker in its route",
                                ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        return targets

    def __repr__(self) -> str:
        return f"Admin(namesrv={';'.join(self.namesrv_addrs)!r})"


def _online(results: list[T | MQError]) -> list[T]:
    """The answers of the brokers that know the group: CONSUMER_NOT_ONLINE is skipped, any other failure raised."""
    out = []
    for res in results:
        if isinstance(res, MQBrokerError) and res.response_code == ResponseCode.CONSUMER_NOT_ONLINE:
            continue
        if isinstance(res, MQError):
            raise res
        out.append(res)
    return out


def _merge_connections(answers: Iterable[dict[str, Any]], group: str) -> list[Connection]:
    """The clients of brokers' connection lists (their ``connectionSet``), by client id; a client several
    brokers list comes once, with its latest heartbeat."""
    conns: dict[str, Connection] = {}
    try:
        for data in answers:
            for c in data.get("connectionSet") or []:
                conn = Connection.from_json(c)
                seen = conns.get(conn.client_id)
                if seen is None or seen.last_update_timestamp < conn.last_update_timestamp:
                    conns[conn.client_id] = conn
    except (TypeError, ValueError) as exc:
        raise MQClientError(f"malformed connection list of group {group!r}: {exc}") from exc
    return sorted(conns.values(), key=lambda c: c.client_id)


def _no_producer(exc: MQBrokerError) -> bool:
    """The broker's answer that it has no client of the producer group (RocketMQ's remark)."""
    return exc.response_code == ResponseCode.SYSTEM_ERROR and "not exist" in (exc.remark or "")


def _not_online(exc: MQBrokerError) -> bool:
    """The broker's answer that the client is not one of its consumers (RocketMQ's remark)."""
    return exc.response_code == ResponseCode.SYSTEM_ERROR and "not online" in (exc.remark or "")


def _check_client_id(client_id: str) -> None:
    if not isinstance(client_id, str) or not client_id:
        raise MQClientError(f"give the client id (as consumer-connection lists it), got {client_id!r}",
                            ResponseCode.MESSAGE_ILLEGAL)


def _not_an_offset_id(msg_id: str) -> str:
    return (f"{msg_id} is not the offset message id of any broker the name servers know, so it is taken to be a "
            "client message id (the msgId a send returns), which is found by its topic: give the topic "
            f"(rocketmesh admin query-msg-by-id -i {msg_id} -t TOPIC, or Admin.query_msg_by_id(msg_id, topic))")
