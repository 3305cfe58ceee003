"""BrokerController: one broker process — store, remoting server, processors, background services."""

from __future__ import annotations

import functools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rocketmesh import __version__
from rocketmesh.acl.config import resolve_acl_file
from rocketmesh.acl.signer import signer_for
from rocketmesh.acl.validator import PlainAccessValidator
from rocketmesh.broker import cpu_latency
from rocketmesh.broker.client.manager import ClientManager
from rocketmesh.broker.client.rebalance_lock import RebalanceLockManager
from rocketmesh.broker.config import BrokerConfig
from rocketmesh.broker.cpu_latency import CpuLatencyRequest
from rocketmesh.broker.metadata.consumer_offsets import ConsumerOffsetManager, OffsetPersister
from rocketmesh.broker.metadata.subscription_group import SubscriptionGroupManager
from rocketmesh.broker.metadata.topic_config import TopicConfigManager
from rocketmesh.broker.metrics import BrokerMetrics
from rocketmesh.broker.parts import BrokerParts
from rocketmesh.broker.processor.admin import AdminProcessor
from rocketmesh.broker.processor.client_call import ClientCallProcessor
from rocketmesh.broker.processor.consumer_manage import ConsumerManageProcessor
from rocketmesh.broker.processor.delivery import DeliveryProcessor
from rocketmesh.broker.processor.ha import HaProcessor
from rocketmesh.broker.processor.handlers import guarded
from rocketmesh.broker.processor.pull import PullMessageProcessor
from rocketmesh.broker.processor.send import SendMessageProcessor
from rocketmesh.broker.processor.send_back import SendBackProcessor
from rocketmesh.broker.processor.transaction import TransactionProcessor
from rocketmesh.broker.registration import NamesrvRegistration
from rocketmesh.broker.slave_sync import SlaveSynchronize
from rocketmesh.broker.stats import GroupGetRates, RateSampler
from rocketmesh.broker.store import MessageStore, MessageStoreConfig
from rocketmesh.broker.tracing import traced
from rocketmesh.remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    RequestContext,
    ResponseCode,
    parse_addr_list,
    request,
    response_to,
)
from rocketmesh.remoting.protocol.command import MAX_HEADER_SIZE
from rocketmesh.remoting.protocol.headers import ConsumerGroupRequestHeader, RegisterBrokerRequestHeader
from rocketmesh.remoting.transport.tcp_door import TcpDoor, door_frame_size
from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.service_thread import ServiceThread


class _ClientScanner(ServiceThread):
    def __init__(self, clients: ClientManager, interval_ms: int) -> None:
        super().__init__("ClientHousekeeping", interval_ms / 1000)
        self.clients = clients

    def run_once(self) -> None:
        self.clients.scan_expired()


class BrokerController:
    """Builds and runs a broker: ``start()`` until ``shutdown()``."""

    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig) -> None:
        self.config = config
        self.store_config = store_config
        self.log = get_logger("broker", broker=config.broker_name, cluster=config.broker_cluster_name)
        self.server = RemotingServer(f"{config.listen_address}:{config.listen_port}",
                                     name=f"broker-{config.broker_name}", busy_poll_us=config.server_busy_poll_us)
        #: RocketMQ's own clients' door (their remoting protocol over TCP), when remotingListenPort is set.
        self.door = (TcpDoor(self.server, f"{config.listen_address}:{config.remoting_listen_port}",
                             max_frame_size=door_frame_size(store_config.max_message_size + MAX_HEADER_SIZE + 4))
                     if config.remoting_listen_port else None)
        self.client = RemotingClient(rpc_hook=signer_for(config.access_key, config.secret_key))
        self.namesrvs = parse_addr_list(config.namesrv_addr or os.environ.get("NAMESRV_ADDR", ""))
        #: What the processors work with, once ``start()`` has loaded the store.
        self.parts: BrokerParts | None = None
        self.store: MessageStore | None = None
        self.clients = ClientManager(config.channel_expired_timeout)
        self.executor = ThreadPoolExecutor(config.admin_broker_thread_pool_nums, thread_name_prefix="broker-admin")
        self.send: SendMessageProcessor | None = None
        self.pull: PullMessageProcessor | None = None
        self.send_back: SendBackProcessor | None = None
        self.delivery: DeliveryProcessor | None = None
        self.transactions: TransactionProcessor | None = None
        self.ha: HaProcessor | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.offset_persister: OffsetPersister | None = None
        self.locks = RebalanceLockManager(config.rebalance_lock_max_live_time)
        self.registration: NamesrvRegistration | None = None
        self.sampler: RateSampler | None = None
        self.group_get_rates: GroupGetRates | None = None
        self.scanner = _ClientScanner(self.clients, config.client_scan_interval)
        self.started_at = time.time()
        self._stopped = threading.Event()
        self.cpu_latency: CpuLatencyRequest | None = None
        self.metrics: BrokerMetrics | None = None
        #: The plain ACL check of every request, with aclEnable.
        self.acl: PlainAccessValidator | None = None

    @property
    def broker_addr(self) -> str:
        """The ZeroMQ address clients of the mesh are given."""
        return f"{self.config.broker_ip1}:{self.server.port}"

    @property
    def remoting_addr(self) -> str:
        """The TCP door's address RocketMQ's clients are given, "" without a door."""
        return f"{self.config.broker_ip1}:{self.door.port}" if self.door is not None else ""

    def start(self) -> None:
        """Bind, recover the store, serve, register with the name servers."""
        cfg = self.config
        if cfg.cpu_dma_latency_us >= 0:
            try:
                self.cpu_latency = cpu_latency.hold(cfg.cpu_dma_latency_us)
                self.log.info("cpu_latency_requested", cpu_dma_latency_us=cfg.cpu_dma_latency_us)
            except (ValueError, cpu_latency.CpuLatencyError) as exc:
                self.log.warning("cpu_latency_request_failed", cpu_dma_latency_us=cfg.cpu_dma_latency_us,
                                 error=str(exc))
        if cfg.acl_enable:
            # Before anything is served; a file that cannot be used stops the start with its reason.
            acl_path = resolve_acl_file(cfg.acl_file, os.path.join(self.store_config.store_path_root_dir, "config"))
            self.acl = PlainAccessValidator(acl_path, f"broker {cfg.broker_name}", cfg.acl_reload_interval_ms / 1000)
            self.server.request_hook = self.acl.server_hook()
        # Until the store is ready every request is told to come back, never left hanging.
        self.server.register_default(self._starting)
        self.server.start()
        if self.door is not None:
            self.door.start()
        # STOREHOST names the address a RocketMQ client can reach: the door when there is one (the mesh's
        # SDK maps it back to the broker by the route's remotingAddrs).
        self.store_config.store_host = self.remoting_addr or self.broker_addr
        # Set as soon as it exists: a start that fails later still releases the store's lock on shutdown.
        store = self.store = MessageStore(self.store_config)
        store.load()
        config_dir = os.path.join(self.store_config.store_path_root_dir, "config")
        topics = TopicConfigManager(
            os.path.join(config_dir, "topics.json"),
            cfg.broker_cluster_name, cfg.broker_name, cfg.auto_create_topic_enable,
            cfg.default_topic_queue_nums, len(store.delay_levels), cfg.timer_queue_nums, persist_in=self.executor)
        topics.load()
        offsets = ConsumerOffsetManager(os.path.join(config_dir, "consumerOffset.json"))
        offsets.load()
        groups = SubscriptionGroupManager(os.path.join(config_dir, "subscriptionGroup.json"),
                                          cfg.auto_create_subscription_group, persist_in=self.executor)
        groups.load()
        parts = self.parts = BrokerParts(cfg, self.store_config, store, topics, offsets, groups, self.clients,
                                         self.locks, self.server, self.client)
        self.clients.on_consumer_ids_changed = functools.partial(self._notify_consumer_ids_changed, groups)
        # A consumer that left holds no orderly queue: the group's others may lock its queues at once,
        # not a lock lifetime (60 s) later.
        self.clients.on_consumer_left = self.locks.unlock_all
        self.server.on_disconnect(self.clients.channel_closed)
        metrics = self.metrics = BrokerMetrics(parts)
        store.start()
        send = self.send = SendMessageProcessor(parts, metrics)
        send.start()
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            self.server.register(code, traced(code, send.enqueue))
        # What the sends stored on the I/O thread left (their dispatch, their fdatasync under SYNC_FLUSH) is
        # done there once per round of reading, after their answers went out.
        self.server.after_reads(store.flush_pending)
        pull = self.pull = PullMessageProcessor(parts, metrics)
        pull.start()
        self.server.register(RequestCode.PULL_MESSAGE, traced(RequestCode.PULL_MESSAGE, guarded(pull.handle)))
        self.sampler = RateSampler(functools.partial(self._counters, store))
        send_back = self.send_back = SendBackProcessor(parts)
        AdminProcessor(parts, send_back, metrics.metrics, functools.partial(self._runtime_info, parts, self.sampler),
                       self.acl).register(self.server, self.executor)
        rates = self.group_get_rates = GroupGetRates(metrics.consumed.totals)
        ConsumerManageProcessor(parts, rates.tps).register(self.server, self.executor)
        ClientCallProcessor(parts).register(self.server, self.executor)
        send_back.register(self.server, self.executor)
        delivery = self.delivery = DeliveryProcessor(parts, os.path.join(config_dir, "scheduleDelivered.json"))
        delivery.load()
        delivery.register(self.server, self.executor)
        transactions = self.transactions = TransactionProcessor(parts)
        transactions.load()
        transactions.register(self.server, self.executor)
        metrics.count_outcomes(lambda: transactions.committed, lambda: transactions.rolled_back,
                               lambda: send_back.dead_lettered_total)
        ha = self.ha = HaProcessor(parts)
        ha.register(self.server)
        self.offset_persister = OffsetPersister(offsets, cfg.flush_consumer_offset_interval, (delivery,))
        self.offset_persister.start()
        self.server.register_default(self._not_supported)
        self.sampler.start()
        rates.start()
        self.scanner.start()
        metrics_url = metrics.metrics.start()
        registration = self.registration = NamesrvRegistration(
            self.client, self.namesrvs, cfg.register_name_server_period, cfg.register_broker_timeout_mills,
            self._registration_header, topics.snapshot)
        topics.on_change = registration.wakeup
        registration.start()
        if parts.is_slave:
            self.slave_sync = SlaveSynchronize(parts, delivery, registration, cfg.slave_sync_interval_mills)
            self.slave_sync.start()
        # As RocketMQ's start() registers before it returns: once the ready line is out, the name
        # servers route this broker's topics. A name server that is down only delays this, bounded.
        if self.namesrvs and not registration.registered.wait(cfg.register_broker_timeout_mills / 1000 + 1):
            self.log.warning("broker_not_registered_yet", namesrv=self.namesrvs,
                             hint="the name servers did not answer; registration goes on in the background")
        self.log.info("broker_started", address=self.broker_addr, remoting_address=self.remoting_addr or None,
                      namesrv=self.namesrvs,
                      store=self.store_config.store_path_root_dir, broker_id=cfg.broker_id,
                      broker_role=self.store_config.broker_role.value,
                      flush_disk_type=self.store_config.flush_disk_type.value, metrics_url=metrics_url)

    def _starting(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return response_to(req, ResponseCode.SYSTEM_BUSY, "broker is starting, try again shortly")

    def _not_supported(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return response_to(req, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                           f"request code {req.code} is not supported by this broker")

    def _notify_consumer_ids_changed(self, groups: SubscriptionGroupManager, group: str) -> None:
        """Tell every member of ``group`` that the member list changed, so each rebalances now."""
        group_cfg = groups.find(group)
        if group_cfg is not None and not group_cfg.notify_consumer_ids_changed_enable:
            return
        info = self.clients.consumer_group(group)
        if info is None:
            return
        for ch in info.channels.values():
            self.server.push(ch.identity, request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                  ConsumerGroupRequestHeader(group).to_ext()))

    def _registration_header(self) -> RegisterBrokerRequestHeader:
        c = self.config
        return RegisterBrokerRequestHeader(c.broker_name, self.broker_addr, c.broker_cluster_name, c.broker_id,
                                           f"{c.broker_ip1}:{c.ha_listen_port}", self.remoting_addr)

    @staticmethod
    def _counters(store: MessageStore) -> dict[str, int]:
        st = store.stats
        return {"put": st.put_message_times_total, "get": st.get_message_transferred_msg_count}

    def _runtime_info(self, parts: BrokerParts, s: RateSampler) -> dict[str, Any]:
        """GET_BROKER_RUNTIME_INFO: RocketMQ's names, rates as "10s 60s 600s" where it has them."""
        info: dict[str, Any] = dict(parts.store.runtime_info())
        put = [s.rate("put", w) for w in (10, 60, 600)]
        get = [s.rate("get", w) for w in (10, 60, 600)]
        producers, consumers = self.clients.counts()
        info.update(self._ha_info(parts))
        info.update({
            "brokerVersionDesc": f"rocketmesh {__version__}",
            "brokerName": self.config.broker_name,
            "clusterName": self.config.broker_cluster_name,
            "brokerAddr": self.broker_addr,
            "remotingAddr": self.remoting_addr,
            "putTps": " ".join(f"{r:.2f}" for r in put),
            "getTransferedTps": " ".join(f"{r:.2f}" for r in get),
            "runtime": f"{time.time() - self.started_at:.0f}s",
            "producerCount": producers,
            "consumerCount": consumers,
            "sendThreadPoolQueueSize": len(self.send._queue) if self.send else 0,
            "sendBusyRejections": self.send.busy_rejections if self.send else 0,
            "topicCount": len(parts.topics.table),
            "cpuDmaLatencyUs": self.cpu_latency.latency_us if self.cpu_latency is not None else -1,
            "sendBackRetried": self.send_back.retried_total if self.send_back else 0,
            "sendBackDeadLettered": self.send_back.dead_lettered_total if self.send_back else 0,
            "scheduleMessageDelivered": self.delivery.delivered_total if self.delivery else 0,
            **(self.transactions.runtime_info() if self.transactions else {}),
        })
        return info

    def _ha_info(self, parts: BrokerParts) -> dict[str, Any]:
        """Role and replication figures: a master's slaves and how far behind each is; a slave's master."""
        store = parts.store
        end = store.max_physical_offset
        info: dict[str, Any] = {"brokerRole": self.store_config.broker_role.value, "brokerId": self.config.broker_id}
        if parts.is_slave:
            master = self.slave_sync.master_addr() if self.slave_sync is not None else None
            info.update({"masterAddr": master or "", "slaveSyncs": self.slave_sync.syncs if self.slave_sync else 0,
                         "haAppendedBytes": self.ha.appended_bytes if self.ha else 0})
        else:
            slaves = store.replicas.progress()
            info.update({
                "haSlaves": [{"addr": p.address, "ackedOffset": p.acked_offset,
                              "lagBytes": max(0, end - p.acked_offset), "connected": p.connected,
                              "silentSeconds": p.silent_s} for p in slaves],
                "haReplicationLagBytes": min((max(0, end - p.acked_offset) for p in slaves if p.connected),
                                             default=-1),
                "haTransferredBytes": self.ha.transferred_bytes if self.ha else 0,
            })
        return info

    def shutdown(self) -> None:
        """Stop taking requests, answer what is queued, flush, unregister."""
        if self._stopped.is_set():
            return
        self.log.info("broker_stopping")
        if self.registration is not None:
            self.registration.stop(2)
            self.registration.unregister_all()
        # Answer every queued send (later ones hear the broker is stopping), then stop the server.
        if self.send is not None:
            self.send.stop()
        if self.pull is not None:
            self.pull.stop()
        if self.ha is not None:
            self.ha.stop()
        if self.door is not None:
            self.door.stop()
        self.server.stop(grace_s=2.0)
        if self.transactions is not None:
            self.transactions.shutdown()
        for svc in (self.sampler, self.group_get_rates, self.scanner, self.offset_persister, self.slave_sync):
            if svc is not None:
                svc.stop(2)
        self.executor.shutdown(wait=True, cancel_futures=True)
        if self.metrics is not None:
            self.metrics.metrics.shutdown()
        if self.parts is not None:
            self.parts.offsets.persist()
            # What was created on demand is saved on the executor, whose queued work the shutdown dropped.
            self.parts.topics.file.save_logged()
            self.parts.subscription_groups.file.save_logged()
        if self.store is not None:
            self.store.shutdown()
        self.client.close()
        if self.cpu_latency is not None:
            self.cpu_latency.release()
        self.log.info("broker_stopped")
        self._stopped.set()
