"""rocketmesh.server.metrics: tallies, the cheap histogram, snapshots and config keys (the Prometheus port
taken from a range, on loopback sockets, is tests/mesh/test_metrics_port_range.py)."""

from __future__ import annotations

import pytest

from rocketmesh.broker.config import load_broker_config
from rocketmesh.runtime.config import ConfigError, load_config
from rocketmesh.scheduler.config import SchedulerConfig
from rocketmesh.server.metrics import MetricsConfig, MetricsExporterType, PortRange, ServiceMetrics


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


def test_counters_of_one_tally_are_added_to_together_and_read_apart():
    m = ServiceMetrics("broker", MetricsConfig(), node_labels={"node_type": "broker"})
    produced = m.counters(("topic",), ("rocketmq_messages_in_total", "in"), ("rocketmq_throughput_in_total", "bytes"))
    produced.add(("T",), 3, 300)
    produced.add(("T",), 1, 50)
    produced.add(("U",))  # one more, of no size
    assert sorted((r[0]["topic"], r[1]) for r in rows(m, "rocketmq_messages_in_total")) == [("T", 4), ("U", 1)]
    assert sorted((r[0]["topic"], r[1]) for r in rows(m, "rocketmq_throughput_in_total")) == [("T", 350), ("U", 0)]
    m.shutdown()


@pytest.mark.parametrize("exporter", [MetricsExporterType.DISABLE, MetricsExporterType.PROM])
def test_rpc_latency_is_recorded_only_where_it_is_exported(exporter):
    # A service whose metrics are off spends nothing per response on the histogram; counters are kept
    # either way (the test above), for ``admin stats``.
    from rocketmesh.remoting import RemotingServer
    from rocketmesh.server.metrics import observe_rpc_latency

    m = ServiceMetrics("namesrv", MetricsConfig(metrics_exporter_type=exporter, metrics_prom_exporter_port="0"))
    server = RemotingServer("127.0.0.1:0", "test")
    observe_rpc_latency(m, server)
    assert m.enabled is (exporter is MetricsExporterType.PROM)
    assert (server.response_observer is not None) is m.enabled
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
    assert broker.metrics_exporter_type is MetricsExporterType.PROM and broker.metrics_prom_exporter_port == "6001"
    assert broker.metrics_prom_exporter_host == ""  # the listen address
    sched = load_config(SchedulerConfig, environ={})
    assert sched.metrics_exporter_type is MetricsExporterType.DISABLE and sched.metrics_prom_exporter_port == "5558"


def test_the_port_key_takes_a_port_a_range_or_zero():
    assert PortRange("5570-5579").ports == range(5570, 5580)
    assert PortRange(" 5570 - 5571 ") == "5570-5571" and PortRange("5557").ports == range(5557, 5558)
    assert PortRange(6001) == "6001" and PortRange("0").ports == range(0, 1) and PortRange("5560-5560") == "5560"
    for bad in ("", "55a", "5579-5570", "0-10", "5570-70000", "5570,5571", "-5570"):
        with pytest.raises(ValueError):
            PortRange(bad)
    sched = load_config(SchedulerConfig, environ={"metricsPromExporterPort": "5570-5579"})
    assert sched.metrics_prom_exporter_port.ports == range(5570, 5580)
    assert load_config(SchedulerConfig, overrides={"metricsPromExporterPort": 6001}, environ={}
                       ).metrics_prom_exporter_port == "6001"  # an int from code, as the mesh tests pass
    with pytest.raises(ConfigError, match="metricsPromExporterPort"):
        load_config(SchedulerConfig, overrides={"metricsPromExporterPort": "5579-5570"}, environ={})
