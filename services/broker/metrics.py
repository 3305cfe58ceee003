"""The broker's metrics, named as RocketMQ 5's (BrokerMetricsConstant, DefaultStoreMetricsConstant).

Sends and pulls add to plain tallies (no OpenTelemetry call on the request path); every gauge reads
the state the broker keeps anyway (store, consumer offsets, client tables, replicas) when scraped.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from rocketmesh.broker.metadata.consumer_offsets import TOPIC_GROUP_SEPARATOR
from rocketmesh.model.topics import SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_CHECK_GROUP, TRANS_HALF_TOPIC
from rocketmesh.server.metrics import ServiceMetrics, observe_rpc_latency

if TYPE_CHECKING:
    from rocketmesh.broker.parts import BrokerParts

#: Bucket bounds of rocketmq_storage_flush_latency (ms).
FLUSH_LATENCY_BOUNDS_MS = (0.1, 0.5, 1, 2, 5, 10, 50, 100, 500, 1000)
#: Bucket bounds of rocketmq_message_size (bytes), RocketMQ 5's: 1 KiB, 4 KiB, 512 KiB, 1, 2 and 4 MiB.
MESSAGE_SIZE_BOUNDS = (1024, 4096, 512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 4 * 1024 * 1024)


def message_type_of(topic: str, stored_topic: str) -> str:
    """RocketMQ 5's message_type label from where a send was stored: Transaction, Delay or Normal."""
    if stored_topic == topic:
        return "Normal"
    if stored_topic == TRANS_HALF_TOPIC:
        return "Transaction"
    if stored_topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        return "Delay"
    return "Normal"


class BrokerMetrics:
    """Declares the broker's instruments on its ServiceMetrics; the processors call ``sent`` and ``pulled``."""

    def __init__(self, broker: BrokerParts) -> None:
        cfg = broker.config
        self.broker = broker
        self.metrics = ServiceMetrics("broker", cfg, cfg.listen_address, meter_name="broker-meter",
                                      node_labels={"cluster": cfg.broker_cluster_name, "node_type": "broker",
                                                   "node_id": f"{cfg.broker_name}-{cfg.broker_id}"})
        m = self.metrics
        #: Messages and their body bytes produced, and pulled (a count and a size each, added to together).
        self.produced = m.counters(("topic", "message_type"),
                                   ("rocketmq_messages_in_total", "Messages produced"),
                                   ("rocketmq_throughput_in_total", "Bytes produced (bodies)"))
        self.consumed = m.counters(("topic", "consumer_group"),
                                   ("rocketmq_messages_out_total", "Messages pulled by consumers"),
                                   ("rocketmq_throughput_out_total", "Bytes pulled by consumers"))
        #: Histograms are recorded only when exported: metrics off cost a send the counters alone.
        self.recording = m.enabled
        self.flush_latency = m.histogram("rocketmq_storage_flush_latency", "Duration of a commitlog flush (ms)",
                                         (), FLUSH_LATENCY_BOUNDS_MS)
        self.message_size = m.histogram("rocketmq_message_size", "Size of the messages produced (body bytes)",
                                        ("topic", "message_type"), MESSAGE_SIZE_BOUNDS)
        observe_rpc_latency(m, broker.server)
        m.gauge("rocketmq_producer_connections", "Producers connected", lambda: [(broker.clients.counts()[0], {})])
        m.gauge("rocketmq_consumer_connections", "Consumers connected", lambda: [(broker.clients.counts()[1], {})])
        m.gauge("rocketmq_consumer_lag_messages", "Messages not yet committed by a group (max - committed offset)",
                self._lag)
        m.gauge("rocketmq_consumer_inflight_messages", "Messages pulled by a group but not yet committed",
                self._inflight)
        m.gauge("rocketmq_consumer_ready_messages", "Messages a group has not pulled yet (max - pulled offset)",
                self._ready)
        m.gauge("rocketmq_consumer_lag_latency", "How long the oldest message a group has not committed has been "
                "stored (ms)", self._lag_latency)
        m.gauge("rocketmq_storage_message_reserve_time", "How long ago the oldest message the store keeps was "
                "stored (ms)", self._reserve_time)
        m.gauge("rocketmq_half_messages", "Half (prepared) messages not yet settled", self._half)
        m.gauge("rocketmq_storage_size", "Bytes of the store's files on disk", self._storage_size)
        m.gauge("rocketmq_storage_dispatch_behind_bytes", "Commitlog bytes not yet dispatched to queues",
                lambda: [(broker.store.dispatch_behind_bytes, {})])
        m.gauge("rocketmq_storage_flush_behind_bytes", "Commitlog bytes not yet flushed",
                lambda: [(max(0, broker.store.commitlog.max_offset - broker.store.commitlog.queue.flushed_where), {})])
        m.gauge("rocketmq_replication_lag_bytes", "Commitlog bytes a slave has not acknowledged", self._replication)
        #: (group, topic, queue) -> the next offset the group's latest pull asked for, for inflight.
        self._pulled_to: dict[tuple[str, str, int], int] = {}
        self._lock = threading.Lock()
        broker.store.flush_observer = lambda ms: self.flush_latency.record((), ms)

    def count_outcomes(self, committed: Callable[[], int], rolled_back: Callable[[], int],
                       dead_lettered: Callable[[], int]) -> None:
        """Counters of what the processors tally: transactions committed and rolled back, messages moved
        to a dead-letter queue (the processors are built after the metrics, which they report to)."""
        m = self.metrics
        m.counter_of("rocketmq_commit_messages_total", "Transactions committed", lambda: [(committed(), {})])
        m.counter_of("rocketmq_rollback_messages_total", "Transactions rolled back", lambda: [(rolled_back(), {})])
        m.counter_of("rocketmq_send_to_dlq_messages_total", "Messages moved to a dead-letter queue",
                     lambda: [(dead_lettered(), {})])

    # --- hot path ---

    def sent(self, topic: str, message_type: str, count: int, body_bytes: int) -> None:
        """A send stored ``count`` messages of ``body_bytes``."""
        key = (topic, message_type)
        self.produced.add(key, count, body_bytes)
        if count and self.recording:  # a batch counts each message at the batch's mean size
            self.message_size.record(key, body_bytes / count, count)

    def pulled(self, group: str, topic: str, queue_id: int, next_offset: int, count: int, size: int) -> None:
        """A pull of ``group`` returned ``count`` messages (``size`` bytes); the next starts at ``next_offset``."""
        self.consumed.add((topic, group), count, size)
        with self._lock:
            self._pulled_to[(group, topic, queue_id)] = next_offset

    # --- gauges ---

    def _group_offsets(self) -> Iterator[tuple[str, str, int, int, int]]:
        """(group, topic, queue, committed offset, max offset) of every committed offset."""
        store = self.broker.store
        for key, queues in self.broker.offsets.table_snapshot().items():
            topic, _, group = key.partition(TOPIC_GROUP_SEPARATOR)
            for queue_id, committed in queues.items():
                yield group, topic, queue_id, committed, store.get_max_offset_in_queue(topic, queue_id)

    def _lag(self) -> list[tuple[float, dict[str, Any]]]:
        lag: dict[tuple[str, str], int] = {}
        for group, topic, _q, committed, max_offset in self._group_offsets():
            lag[(topic, group)] = lag.get((topic, group), 0) + max(0, max_offset - committed)
        return [(v, {"topic": t, "consumer_group": g}) for (t, g), v in lag.items()]

    def _inflight(self) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            pulled = dict(self._pulled_to)
        offsets = self.broker.offsets
        inflight: dict[tuple[str, str], int] = {}
        for (group, topic, queue_id), next_offset in pulled.items():
            committed = offsets.query_offset(group, topic, queue_id)
            inflight[(topic, group)] = inflight.get((topic, group), 0) + max(0, next_offset - max(committed, 0))
        return [(v, {"topic": t, "consumer_group": g}) for (t, g), v in inflight.items()]

    def _ready(self) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            pulled = dict(self._pulled_to)
        ready: dict[tuple[str, str], int] = {}
        for group, topic, queue_id, committed, max_offset in self._group_offsets():
            start = max(committed, pulled.get((group, topic, queue_id), 0))
            ready[(topic, group)] = ready.get((topic, group), 0) + max(0, max_offset - start)
        return [(v, {"topic": t, "consumer_group": g}) for (t, g), v in ready.items()]

    def _lag_latency(self) -> list[tuple[float, dict[str, Any]]]:
        store = self.broker.store
        now = int(time.time() * 1000)
        latency: dict[tuple[str, str], int] = {}
        for group, topic, queue_id, committed, max_offset in self._group_offsets():
            oldest = 0
            if committed < max_offset:
                stored = store.get_message_store_timestamp(topic, queue_id, max(committed, 0))
                oldest = max(0, now - stored) if stored > 0 else 0
            latency[(topic, group)] = max(latency.get((topic, group), 0), oldest)
        return [(v, {"topic": t, "consumer_group": g}) for (t, g), v in latency.items()]

    def _reserve_time(self) -> list[tuple[float, dict[str, Any]]]:
        commitlog = self.broker.store.commitlog
        stored = commitlog.store_timestamp_at(commitlog.min_offset) if commitlog.max_offset > 0 else -1
        if stored <= 0:
            return []
        return [(max(0, int(time.time() * 1000) - stored), {"storage_type": "local"})]

    def _half(self) -> list[tuple[float, dict[str, Any]]]:
        store, offsets = self.broker.store, self.broker.offsets
        max_offset = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, 0)
        checked = max(0, offsets.query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, 0))
        return [(max(0, max_offset - checked), {})]

    def _storage_size(self) -> list[tuple[float, dict[str, Any]]]:
        total = 0
        for root, _dirs, files in os.walk(self.broker.store_config.store_path_root_dir):
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass  # a file expired while we walked
        return [(total, {"storage_type": "local", "storage_medium": "disk"})]

    def _replication(self) -> list[tuple[float, dict[str, Any]]]:
        if self.broker.is_slave:
            return []
        end = self.broker.store.max_physical_offset
        return [(max(0, end - p.acked_offset), {"slave": p.address}) for p in self.broker.store.replicas.progress()]
