"""The client instance (RocketMQ's MQClientInstance), shared by the SDK's producers, consumers and admin.

It owns the process's connections (one RemotingClient), the name server
list and which one is in use, the route cache per topic, the table of
broker addresses the routes mention, and one background thread that:

- polls the name server for the route of every topic in use, every
  ``poll_name_server_interval_ms`` (30 s), and at once for topics a failed
  send marked stale;
- sends a heartbeat (client id, producer and consumer groups) to every
  broker of those routes every ``heartbeat_broker_interval_ms`` (30 s), and
  soon after a route names a broker not seen before;
- keeps the table of brokers found unreachable (see ``fault``).

Instances are shared per (client id, name server list, ACL credentials), as
RocketMQ's MQClientManager shares them (but for the credentials: two clients
of one process with different accounts never share a signer): :meth:`ClientInstance.acquire` hands out a
reference, :meth:`ClientInstance.release` gives it back, and the last
release shuts the instance down.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict

import orjson

from rocketmesh import __version__
from rocketmesh.acl.signer import AclSigner, SessionCredentials, signer_for
from rocketmesh.client.api import DEFAULT_TIMEOUT_MS, ClientAPI
from rocketmesh.client.errors import ClientErrorCode, MQBrokerError, MQClientError, MQError, RequestTimeoutError
from rocketmesh.client.fault import ISOLATION_LATENCY_MS, UNREACHABLE_DURATION_MS, LatencyFaultTolerance
from rocketmesh.client.route import TopicPublishInfo, publish_info
from rocketmesh.client.running_info import (
    PROP_CLIENT_VERSION,
    PROP_NAMESERVER_ADDR,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
)
from rocketmesh.client.unique_id import local_ip
from rocketmesh.model.codec import CorruptRecord, decode_record
from rocketmesh.model.message import MessageExt, MessageQueue
from rocketmesh.model.route import MASTER_ID, TopicRouteData
from rocketmesh.model.topics import DEFAULT_TOPIC
from rocketmesh.remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingError,
    RequestCode,
    ResponseCode,
    parse_addr_list,
    response_to,
)
from rocketmesh.remoting.protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    HeaderError,
    ResetOffsetRequestHeader,
    UnregisterClientRequestHeader,
)
from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.service_thread import ServiceThread

NAMESRV_ADDR_ENV = "NAMESRV_ADDR"
#: Upper bound of one background tick, so stop() and stale topics are seen promptly.
_TICK_S = 0.5

#: ``push(addr, cmd)`` handles a request a broker pushed (CHECK_TRANSACTION_STATE ...).
PushHandler = Callable[[str, RemotingCommand], RemotingCommand | None]
#: Returns one entry of a heartbeat's consumerDataSet.
ConsumerDataProvider = Callable[[], dict[str, Any]]


def _route_summary(route: TopicRouteData) -> dict:
    """A route in a log line: queues per broker name (read/write/perm) and the brokers' addresses."""
    queues = {q.broker_name: f"r{q.read_queue_nums}/w{q.write_queue_nums}/p{q.perm}" for q in route.queue_datas}
    brokers = {b.broker_name: {str(i): a for i, a in sorted(b.broker_addrs.items())} for b in route.broker_datas}
    return {"queues": queues, "brokers": brokers}


class ConsumerHooks(Protocol):
    """What a consumer registered with the instance is told by its brokers."""

    def rebalance_now(self) -> None:
        """The group's member list changed (NOTIFY_CONSUMER_IDS_CHANGED)."""

    def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """An admin moved the group's offsets (RESET_CONSUMER_CLIENT_OFFSET)."""

    def running_info(self) -> ConsumerRunningInfo:
        """An admin asks how the group's consumer is doing (GET_CONSUMER_RUNNING_INFO)."""

    def consume_message_directly(self, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult | None:
        """An admin has the group's listener consume ``msg`` (CONSUME_MESSAGE_DIRECTLY); None without a
        listener."""


def _signer(access_key: str | None, secret_key: str | None) -> AclSigner | None:
    """The ACL signer of these keys (None without), MQClientError when only one is given."""
    try:
        return signer_for(access_key, secret_key)
    except ValueError as exc:
        raise MQClientError(f"ACL credentials: {exc}") from None


def namesrv_addrs_from(namesrv: str | Sequence[str] | None) -> tuple[str, ...]:
    """The name server list from an argument (``"a:1;b:2"`` or a list) or, when None, from NAMESRV_ADDR.

    Raises MQClientError (NO_NAME_SERVER_EXCEPTION) when there is none, or for a malformed address.
    """
    text: str | None
    if namesrv is None:
        text = os.environ.get(NAMESRV_ADDR_ENV)
    elif isinstance(namesrv, str):
        text = namesrv
    else:
        text = ";".join(namesrv)
    try:
        addrs = parse_addr_list(text)
    except RemotingError as exc:
        raise MQClientError(f"bad name server address list {text!r}: {exc}",
                            ClientErrorCode.NO_NAME_SERVER_EXCEPTION) from exc
    if not addrs:
        raise MQClientError(
            f"no name server address: pass namesrv='host:port;host:port' or set {NAMESRV_ADDR_ENV}",
            ClientErrorCode.NO_NAME_SERVER_EXCEPTION,
        )
    return tuple(addrs)


class Credentials(TypedDict):
    """An ACL account as the clients' keyword arguments take it (both or neither)."""

    access_key: str | None
    secret_key: str | None


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Settings of a client instance (RocketMQ's ClientConfig names, snake_case).

    ``instance_name`` None means the process id, so the client id is
    ``ip@pid`` as with RocketMQ's default instance name. ``credentials``: the
    ACL account requests are signed with (None: unsigned); the client id then
    ends in ``#<accessKey>``, so brokers tell apart this process's clients of
    different accounts.
    """

    namesrv_addrs: tuple[str, ...]
    instance_name: str | None = None
    client_ip: str | None = None
    poll_name_server_interval_ms: int = 30_000
    heartbeat_broker_interval_ms: int = 30_000
    request_timeout_ms: int = DEFAULT_TIMEOUT_MS
    credentials: SessionCredentials | None = None

    def client_id(self) -> str:
        """``ip@instance_name`` (``#accessKey`` with credentials), the id brokers know this client by."""
        name = self.instance_name or str(os.getpid())
        account = f"#{self.credentials.access_key}" if self.credentials is not None else ""
        return f"{self.client_ip or local_ip()}@{name}{account}"


class ClientInstance:
    """See the module docstring. Use :meth:`acquire` / :meth:`release` rather than the constructor."""

    _registry: dict[tuple[str, tuple[str, ...], SessionCredentials | None], ClientInstance] = {}
    _registry_lock = threading.Lock()

    # -- sharing ---------------------------------------------------------------

    @classmethod
    def acquire(
        cls,
        namesrv: str | Sequence[str] | None = None,
        *,
        instance_name: str | None = None,
        client_ip: str | None = None,
        poll_name_server_interval_ms: int = 30_000,
        heartbeat_broker_interval_ms: int = 30_000,
        request_timeout_ms: int = DEFAULT_TIMEOUT_MS,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> ClientInstance:
        """A started instance for these name servers, shared with others of the same client id and
        ACL account (``access_key`` and ``secret_key``: both or neither).

        The interval settings of the first acquirer win, as with RocketMQ.
        """
        signer = _signer(access_key, secret_key)
        config = ClientConfig(
            namesrv_addrs_from(namesrv),
            instance_name=instance_name,
            client_ip=client_ip or local_ip(),
            poll_name_server_interval_ms=poll_name_server_interval_ms,
            heartbeat_broker_interval_ms=heartbeat_broker_interval_ms,
            request_timeout_ms=request_timeout_ms,
            credentials=None if signer is None else signer.credentials,
        )
        key = (config.client_id(), config.namesrv_addrs, config.credentials)
        with cls._registry_lock:
            inst = cls._registry.get(key)
            if inst is None or inst._closed:
                inst = cls(config)
                inst.start()
                cls._registry[key] = inst
            inst._refs += 1
            return inst

    def release(self) -> None:
        """Give back a reference from :meth:`acquire`; the last one shuts the instance down."""
        with self._registry_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            key = (self.client_id, self.config.namesrv_addrs, self.config.credentials)
            if self._registry.get(key) is self:
                del self._registry[key]
        self.shutdown()

    # -- life cycle ------------------------------------------------------------

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.client_id = config.client_id()
        self.namesrv_addrs = config.namesrv_addrs
        self.timeout_ms = config.request_timeout_ms
        self._log = get_logger("client", client_id=self.client_id)
        self.remoting: RemotingClient = None  # type: ignore[assignment]  # set by start()
        self._refs = 0
        self._closed = False
        self._started = False
        self._routes: dict[str, TopicRouteData] = {}
        self._publish: dict[str, TopicPublishInfo] = {}
        self._broker_addrs: dict[str, dict[int, str]] = {}
        self._topics: set[str] = set()
        self._stale: set[str] = set()
        self._route_lock = threading.Lock()
        self._producers: dict[str, int] = {}
        self._consumers: dict[str, ConsumerDataProvider] = {}
        self._consumer_hooks: dict[str, ConsumerHooks] = {}
        self._push_handlers: dict[int, PushHandler] = {}
        #: Brokers (by name) no connection came up to; queue choice skips them for a while.
        self.unreachable = LatencyFaultTolerance()
        self._heartbeat_soon = False
        self._tasks = _InstanceTasks(self)
        #: This instance's remote calls, one typed method each (set by start()).
        self.api: ClientAPI = None  # type: ignore[assignment]

    def start(self) -> None:
        """Open the connections and start the background thread (idempotent)."""
        if self._started:
            return
        if self._closed:
            raise MQClientError("the client instance is shut down")
        credentials = self.config.credentials
        signer = None if credentials is None else signer_for(credentials.access_key, credentials.secret_key)
        self.remoting = RemotingClient(on_request=self._on_push, name="client", rpc_hook=signer)
        self.api = ClientAPI(self.remoting, self.namesrv_addrs, self.timeout_ms)
        self._started = True
        self._tasks.start()

    def shutdown(self, timeout_s: float = 3.0) -> None:
        """Unregister from the brokers, stop the background thread, close the connections (bounded)."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            return
        self._tasks.stop(timeout_s)
        for group in list(self._producers):
            self._unregister_at_brokers(producer_group=group, timeout_s=min(timeout_s, 1.0))
        for group in list(self._consumers):
            self._unregister_at_brokers(consumer_group=group, timeout_s=min(timeout_s, 1.0))
        self.remoting.close(timeout_s)

    @property
    def closed(self) -> bool:
        """True once shut down."""
        return self._closed

    # -- registrations ---------------------------------------------------------

    def register_producer(self, group: str) -> None:
        """Count ``group`` among this client's producer groups (sent in heartbeats)."""
        self._producers[group] = self._producers.get(group, 0) + 1
        self._heartbeat_soon = True
        self._tasks.wakeup()

    def unregister_producer(self, group: str, timeout_s: float = 1.0) -> None:
        """Drop one registration of ``group``; when none is left tell the brokers (bounded)."""
        n = self._producers.get(group, 0) - 1
        if n > 0:
            self._producers[group] = n
            return
        self._producers.pop(group, None)
        if not self._closed:
            self._unregister_at_brokers(producer_group=group, timeout_s=timeout_s)

    def register_consumer(self, group: str, provider: ConsumerDataProvider,
                          hooks: ConsumerHooks | None = None) -> None:
        """Add a consumer group; ``provider()`` returns its entry of a heartbeat's consumerDataSet,
        ``hooks`` hears the group's NOTIFY_CONSUMER_IDS_CHANGED and RESET_CONSUMER_CLIENT_OFFSET."""
        if group in self._consumers:
            raise MQClientError(f"the consumer group[{group}] has been created before in this client "
                                "instance, specify another name please")
        self._consumers[group] = provider
        if hooks is not None:
            self._consumer_hooks[group] = hooks
        self._heartbeat_soon = True
        self._tasks.wakeup()

    def unregister_consumer(self, group: str, timeout_s: float = 1.0) -> None:
        """Drop a consumer group and tell the brokers (bounded)."""
        self._consumer_hooks.pop(group, None)
        if self._consumers.pop(group, None) is not None and not self._closed:
            self._unregister_at_brokers(consumer_group=group, timeout_s=timeout_s)

    def register_push_handler(self, code: int, handler: PushHandler) -> None:
        """Handle requests with ``code`` that brokers push to this client."""
        self._push_handlers[int(code)] = handler

    def add_topic(self, topic: str) -> None:
        """Keep ``topic``'s route fresh in the background."""
        self._topics.add(topic)

    # -- name server -----------------------------------------------------------

    def fetch_topic_route(self, topic: str, timeout_ms: int | None = None) -> TopicRouteData | None:
        """The name server's route for ``topic``, or None when it has none (TOPIC_NOT_EXIST)."""
        try:
            return self._api().get_topic_route(topic, timeout_ms)
        except MQBrokerError as exc:
            if exc.response_code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            raise

    # -- routes ----------------------------------------------------------------

    def update_topic_route(self, topic: str, timeout_ms: int | None = None) -> bool:
        """Fetch ``topic``'s route and install it; True when it changed.

        A topic the name server does not know keeps what it had (a route
        derived from the default topic stays until the real one appears).
        """
        route = self.fetch_topic_route(topic, timeout_ms)
        if route is None:
            return False
        with self._route_lock:
            tp = self._publish.get(topic)
            old = self._routes.get(topic)
            if old == route and tp is not None and not tp.from_default_topic:
                return False
            self._install(topic, route, publish_info(route, topic))
        if old != route:
            self._log.info("topic_route_changed", topic=topic, **_route_summary(route),
                           before=None if old is None else _route_summary(old))
        return True

    def _install(self, topic: str, route: TopicRouteData, tp: TopicPublishInfo) -> None:
        new_broker = False
        for bd in route.broker_datas:
            old = self._broker_addrs.get(bd.broker_name)
            if old != bd.broker_addrs:
                known = set(old.values()) if old else set()
                new_broker = new_broker or any(a not in known for a in bd.broker_addrs.values())
                self._broker_addrs[bd.broker_name] = dict(bd.broker_addrs)
        if not tp.from_default_topic:
            self._routes[topic] = route
        self._publish[topic] = tp
        if new_broker and (self._producers or self._consumers):
            self._heartbeat_soon = True
            self._tasks.wakeup()

    def topic_route(self, topic: str) -> TopicRouteData | None:
        """The cached route of ``topic`` (fetched when not cached); None when the name server has none."""
        route = self._routes.get(topic)
        if route is None:
            self.update_topic_route(topic)
            route = self._routes.get(topic)
        return route

    def publish_info(
        self, topic: str, *, create_topic_key: str = DEFAULT_TOPIC, default_topic_queue_nums: int = 4
    ) -> TopicPublishInfo:
        """Where a producer may send ``topic`` (RocketMQ's tryToFindTopicPublishInfo).

        A topic without a route of its own gets the default topic's route
        (``create_topic_key``, TBW102), its queue counts capped at
        ``default_topic_queue_nums``, so that the broker creates the topic on
        the first send. Raises MQClientError (NOT_FOUND_TOPIC_EXCEPTION) when
        neither route exists.
        """
        tp = self._publish.get(topic)
        if tp is not None and tp.ok():
            return tp
        self._topics.add(topic)
        self.update_topic_route(topic)
        tp = self._publish.get(topic)
        if tp is not None and tp.ok():
            return tp
        default_route = self.fetch_topic_route(create_topic_key)
        if default_route is not None:
            route = default_route.with_queue_nums_capped(default_topic_queue_nums)
            tp = publish_info(route, topic, from_default_topic=True)
            if tp.ok():
                with self._route_lock:
                    current = self._publish.get(topic)
                    if current is not None and current.ok():
                        return current
                    self._install(topic, route, tp)
                return tp
        raise MQClientError(
            f"no route info of topic {topic!r}: create it (Admin.create_topic) or enable autoCreateTopicEnable "
            "on a broker", ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION,
        )

    def cached_publish_info(self, topic: str) -> TopicPublishInfo | None:
        """The cached publish info of ``topic`` without asking the name server."""
        return self._publish.get(topic)

    def request_route_refresh(self, topic: str) -> None:
        """Have the background thread refresh ``topic``'s route soon (after a failed send)."""
        self._stale.add(topic)
        self._tasks.wakeup()

    def master_addr(self, broker_name: str) -> str | None:
        """The master address of ``broker_name`` from the routes seen so far."""
        addrs = self._broker_addrs.get(broker_name)
        return None if addrs is None else addrs.get(MASTER_ID)

    def find_master_addr(self, mq: MessageQueue) -> str:
        """The master address of ``mq``'s broker, refreshing ``mq``'s topic route once when it is unknown.

        Raises MQClientError (BROKER_NOT_EXIST_EXCEPTION) when no route names a master for it.
        """
        addr = self.master_addr(mq.broker_name)
        if addr is None:
            self.update_topic_route(mq.topic)
            addr = self.master_addr(mq.broker_name)
        if addr is None:
            raise MQClientError(f"the broker {mq.broker_name!r} of {mq} is in no route of this client "
                                "(or has no master)", ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        return addr

    def find_broker_addr(self, mq: MessageQueue, broker_id: int = MASTER_ID) -> str:
        """Where to read ``mq`` or keep its offsets (RocketMQ's findBrokerAddressInSubscribe and
        findBrokerAddressInAdmin): broker ``broker_id`` of its group when the routes list it, else the
        master, else any slave, so consumption goes on from a slave while the master is gone.

        A master this client cannot reach (its heartbeats fail: a network cut between this host and
        the master's, while the master still registers with the name servers and so stays in the
        routes) is passed over for a slave of its group until a heartbeat reaches it again; RocketMQ's
        client keeps asking such a master until the name servers drop it, which they never do while
        the master reaches them.

        Raises MQClientError (BROKER_NOT_EXIST_EXCEPTION) when no route names any broker of the group.
        """
        name = mq.broker_name
        addr = self.broker_addr(name, broker_id)
        if addr is None:
            self.update_topic_route(mq.topic)
            addr = self.broker_addr(name, broker_id)
        if addr is None:
            raise MQClientError(f"the broker {name!r} of {mq} is in no route of this client",
                                ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
        addrs = self._broker_addrs.get(name, {})
        if addrs.get(MASTER_ID) == addr and len(addrs) > 1 and not self.unreachable.is_available(name):
            return addrs[min(i for i in addrs if i != MASTER_ID)]
        return addr

    def broker_addr(self, broker_name: str, broker_id: int = MASTER_ID) -> str | None:
        """Broker ``broker_id`` of ``broker_name``'s group, else its master, else its first slave, from
        the routes seen so far; None when they name none."""
        addrs = self._broker_addrs.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id) or addrs.get(MASTER_ID)
        return addr if addr is not None else addrs[min(addrs)]

    def broker_addrs(self, broker_name: str) -> dict[int, str]:
        """id -> address of ``broker_name`` from the routes seen so far."""
        return dict(self._broker_addrs.get(broker_name, {}))

    def broker_names(self) -> list[str]:
        """The broker names the routes seen so far mention."""
        return list(self._broker_addrs)

    def mark_broker_unreachable(self, broker_name: str) -> None:
        """Have queue choice skip ``broker_name`` for a while (no connection to it came up)."""
        self.unreachable.update_fault_item(broker_name, ISOLATION_LATENCY_MS, UNREACHABLE_DURATION_MS)

    def mark_broker_reachable(self, broker_name: str) -> None:
        """``broker_name`` answered again: stop skipping it."""
        self.unreachable.mark_reached(broker_name)  # also lifts producers' benches for failed sends
        if broker_name in self.unreachable:
            self.unreachable.remove(broker_name)

    # -- brokers ---------------------------------------------------------------

    def heartbeat_data(self) -> dict[str, Any]:
        """The HEARTBEAT body: client id, producer groups, consumer groups."""
        consumers = []
        for provider in list(self._consumers.values()):
            try:
                consumers.append(provider())
            except Exception:  # noqa: BLE001 - one bad provider must not stop heartbeats
                self._log.exception("consumer_heartbeat_data_failed")
        return {
            "clientID": self.client_id,
            "producerDataSet": [{"groupName": g} for g in list(self._producers)],
            "consumerDataSet": consumers,
        }

    def send_heartbeat_to_all_brokers(self, timeout_ms: int | None = None) -> dict[str, bool]:
        """Heartbeat every master (and slaves too when there are consumers); addr -> answered OK."""
        if self._closed or (not self._producers and not self._consumers):
            return {}
        data = self.heartbeat_data()
        targets: list[tuple[str, int, str]] = []
        for name, addrs in list(self._broker_addrs.items()):
            for broker_id, addr in addrs.items():
                if broker_id == MASTER_ID or self._consumers:
                    targets.append((name, broker_id, addr))
        if not targets:
            return {}
        results = self._api().heartbeat([addr for _, _, addr in targets], data, timeout_ms)
        out: dict[str, bool] = {}
        for (name, broker_id, addr), err in zip(targets, results, strict=False):
            out[addr] = err is None
            if broker_id != MASTER_ID:
                continue
            if err is None or isinstance(err, MQBrokerError):  # it answered
                self.mark_broker_reachable(name)
            elif not self._closed and isinstance(err, (MQClientError, RequestTimeoutError)):
                self.mark_broker_unreachable(name)
                self._log.warning("heartbeat_failed", broker=name, addr=addr, error=str(err))
        return out

    def _unregister_at_brokers(
        self, *, producer_group: str | None = None, consumer_group: str | None = None, timeout_s: float = 1.0
    ) -> None:
        if self.api is None:
            return
        addrs = [addr for addrs in list(self._broker_addrs.values()) for addr in addrs.values()]
        if addrs:
            self.api.unregister_client(addrs, UnregisterClientRequestHeader(self.client_id, producer_group,
                                                                            consumer_group), int(timeout_s * 1000))

    # -- background ------------------------------------------------------------

    def _background_tick(self, now: float) -> None:
        stale = self._stale
        while stale:
            try:
                topic = stale.pop()
            except KeyError:
                break
            self._refresh_quietly(topic)
        tasks = self._tasks
        if now >= tasks.next_route_poll:
            tasks.next_route_poll = now + self.config.poll_name_server_interval_ms / 1000.0
            for topic in list(self._topics):
                if self._closed:
                    return
                self._refresh_quietly(topic)
        if self._heartbeat_soon or now >= tasks.next_heartbeat:
            self._heartbeat_soon = False
            tasks.next_heartbeat = now + self.config.heartbeat_broker_interval_ms / 1000.0
            self.send_heartbeat_to_all_brokers()

    def _refresh_quietly(self, topic: str) -> None:
        try:
            self.update_topic_route(topic)
        except MQError as exc:
            self._log.warning("route_update_failed", topic=topic, error=str(exc))

    def _on_push(self, addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        # The requests brokers push to clients: this instance's own dispatch table.
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            try:
                group = ConsumerGroupRequestHeader.from_ext(cmd.ext).consumer_group
            except HeaderError as exc:
                self._log.warning("bad_notify_consumer_ids_changed", broker=addr, error=str(exc))
                return None
            hooks = self._consumer_hooks.get(group)
            if hooks is not None:
                self._log.info("consumer_ids_changed", group=group, broker=addr)
                hooks.rebalance_now()
            return None
        if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            return self._on_reset_offset(addr, cmd)
        if cmd.code in (RequestCode.GET_CONSUMER_RUNNING_INFO, RequestCode.CONSUME_MESSAGE_DIRECTLY):
            try:
                if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
                    return self._on_running_info(cmd)
                return self._on_consume_directly(addr, cmd)
            except HeaderError as exc:
                return response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        handler = self._push_handlers.get(cmd.code)
        if handler is None:
            return response_to(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported")
        return handler(addr, cmd)

    def _on_reset_offset(self, addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        try:
            header = ResetOffsetRequestHeader.from_ext(cmd.ext)
        except HeaderError as exc:
            self._log.warning("bad_reset_offset_request", broker=addr, error=str(exc))
            return None
        hooks = self._consumer_hooks.get(header.group)
        if hooks is None:
            return None
        try:
            table = orjson.loads(cmd.body).get("offsetTable") or []
            offsets = {MessageQueue(d["topic"], d["brokerName"], int(d["queueId"])): int(d["offset"]) for d in table}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._log.warning("bad_reset_offset_request", broker=addr, error=str(exc))
            return None
        self._log.info("reset_offset", group=header.group, topic=header.topic, broker=addr)
        hooks.reset_offset(header.topic, offsets)
        return None

    def _on_running_info(self, cmd: RemotingCommand) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_ext(cmd.ext)
        hooks = self._consumer_hooks.get(header.consumer_group)
        if hooks is None:
            return _group_not_here(cmd, header.consumer_group)
        info = hooks.running_info()
        info.properties[PROP_NAMESERVER_ADDR] = ";".join(self.namesrv_addrs)
        info.properties[PROP_CLIENT_VERSION] = f"rocketmesh-{__version__}"
        if header.jstack_enable:
            info.jstack = thread_stacks()
        return response_to(cmd, ResponseCode.SUCCESS, None, None, info.encode())

    def _on_consume_directly(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext(cmd.ext)
        hooks = self._consumer_hooks.get(header.consumer_group)
        if hooks is None:
            return _group_not_here(cmd, header.consumer_group)
        try:
            msg = decode_record(cmd.body)
        except CorruptRecord as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"the message from {addr} is unreadable: {exc}")
        result = hooks.consume_message_directly(msg, header.broker_name or "")
        if result is None:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{header.consumer_group}> of "
                                                               "this client has no listener to consume with")
        return response_to(cmd, ResponseCode.SUCCESS, None, None, result.encode())

    def _api(self) -> ClientAPI:
        api = self.api
        if api is None or self._closed:
            raise MQClientError("the client is shut down (or was never started)")
        return api

    def __repr__(self) -> str:
        return f"ClientInstance(client_id={self.client_id!r}, namesrv={';'.join(self.namesrv_addrs)!r})"


def _group_not_here(cmd: RemotingCommand, group: str) -> RemotingCommand:
    return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"The Consumer Group <{group}> not exist in this consumer")


def thread_stacks() -> str:
    """Every thread's stack, as RocketMQ's jstack of a consumer shows them: a header line per thread."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        out.append(f"Thread: {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(out)


class _InstanceTasks(ServiceThread):
    """The instance's background thread: stale routes, route polling, heartbeats."""

    def __init__(self, instance: ClientInstance) -> None:
        super().__init__(f"client-tasks-{instance.client_id}", _TICK_S)
        self._instance = instance
        now = time.monotonic()
        self.next_route_poll = now + instance.config.poll_name_server_interval_ms / 1000.0
        self.next_heartbeat = now + instance.config.heartbeat_broker_interval_ms / 1000.0

    def run_once(self) -> None:
        """One tick: whatever of the instance's periodic work is due."""
        if not self._instance.closed:
            self._instance._background_tick(time.monotonic())
