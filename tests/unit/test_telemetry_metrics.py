"""rocketmesh.telemetry.metrics without a network: tallies, the cheap histogram, snapshots and config keys."""

from __future__ import annotations

from rocketmesh.broker.config import load_broker_config
from rocketmesh.runtime.config import load_config
from rocketmesh.scheduler.config import SchedulerConfig
from rocketmesh.telemetry.metrics import MetricsConfig, MetricsExporterType, ServiceMetrics


def rows(metrics: ServiceMetrics, name: str) -> list[tuple[dict, float]]:
    return [(r["labels"], r["value"]) for r in metrics.snapshot() if r["name"] == name]


def test_counters_gauges_and_histograms_show_in_a_snapshot_with_node_labels():
    m = ServiceMetrics("broker", MetricsConfig(), node_labels={"node_type": "broker", "node_id": "b-0"})
    tally = m.counter("rocketmq_messages_in_total", "in", ("topic", "message_type"))
    tally.add(("T", "Normal"), 3)
    tally.add(("T", "Normal"), 2)
    m.gauge("rocketmq_consumer_lag_messages", "lag", lambda: [(7, {"topic": "T", "consumer_group": "g"})])
    hist = m.histogram("rocketmq_rpc_latency", "ms", ("request_code",), (1, 10))
    for ms in (0.5, 5, 50):
        hist.record(("send_message",), ms)
    assert rows(m, "rocketmq_messages_in_total") == [
        ({"node_type": "broker", "node_id": "b-0", "topic": "T", "message_type": "Normal"}, 5)]
    assert rows(m, "rocketmq_consumer_lag_messages")[0][1] == 7
    assert rows(m, "rocketmq_rpc_latency_count")[0][1] == 3
    assert rows(m, "rocketmq_rpc_latency_sum")[0][1] == 55.5
    assert m.start() == ""  # DISABLE: nothing served, the snapshot still answers
    m.shutdown()


def test_a_failing_gauge_leaves_the_others_readable():
    m = ServiceMetrics("scheduler", MetricsConfig())
    m.gauge("rocketmq_bad", "raises", lambda: 1 / 0)
    m.gauge("rocketmq_good", "fine", lambda: [(1, {})])
    assert rows(m, "rocketmq_good") == [({"node_type": "scheduler"}, 1)]
    m.shutdown()


def test_exporter_keys_as_rocketmq_names_them():
    broker, _store = load_broker_config(None, {"metricsExporterType": "prom", "metricsPromExporterPort": "6001"},
                                        environ={})
    assert broker.metrics_exporter_type is MetricsExporterType.PROM and broker.metrics_prom_exporter_port == 6001
    assert broker.metrics_prom_exporter_host == ""  # the listen address
    sched = load_config(SchedulerConfig, environ={})
    assert sched.metrics_exporter_type is MetricsExporterType.DISABLE and sched.metrics_prom_exporter_port == 5558
