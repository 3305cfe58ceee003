"""Metrics, black-box: a broker with metricsExporterType=PROM serves RocketMQ 5's metrics over HTTP,
the counters move with sends and pulls, a group's lag with what it commits, and ``rocketmesh admin stats``
prints the same numbers without Prometheus; the name server, scheduler, txn-checker and ha services serve
their own endpoints."""

from __future__ import annotations

import signal
import subprocess

import pytest

from clientkit import FAST_CLIENT, sample, scrape
from procs import FAST_SCHEDULER, cli_command, free_port, read_until_up, run_cli, wait_for
from rocketmesh import Admin, LocalTransactionState, Message, Producer, TransactionProducer
from rocketmesh.client.consumer import PullConsumer
from rocketmesh.model.message import MessageExt

TOPIC = "MetricsTopic"
GROUP = "metrics-group"


def poll_until(consumer: PullConsumer, n: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    wait_for(lambda: got.extend(consumer.poll(timeout_ms=500)) or len(got) >= n, timeout_s=20, what=f"{n} polled")
    assert len(got) == n
    return got


@pytest.fixture
def prom_port() -> int:
    return free_port()


@pytest.fixture
def broker_args(prom_port: int) -> dict[str, object]:
    """The broker serves Prometheus on the port picked for the test."""
    return dict(metricsExporterType="PROM", metricsPromExporterPort=prom_port)


def admin_stats(namesrv_addr: str, *args: str) -> str:
    out = run_cli("admin", "stats", "-n", namesrv_addr, *args, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_broker_metrics_move_with_sends_and_consumes(namesrv, broker, admin, producer, prom_port):
    url = f"http://127.0.0.1:{prom_port}/metrics"
    admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    admin.wait_topic_route(TOPIC)
    for i in range(10):
        producer.send(Message(TOPIC, f"body-{i}"))
    text = scrape(url)
    assert sample(text, "rocketmq_messages_in_total", topic=TOPIC, message_type="Normal") == 10
    assert sample(text, "rocketmq_throughput_in_total", topic=TOPIC) == sum(len(f"body-{i}") for i in range(10))
    assert "rocketmq_rpc_latency_count" in text and 'request_code="send_message"' in text

    consumer = PullConsumer(GROUP, namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET", auto_commit=False,
                            pull_batch_size=1, **FAST_CLIENT)
    consumer.subscribe(TOPIC)
    consumer.start()
    try:
        got = poll_until(consumer, 4)
        # Pulled (4, and what the consumer pulled ahead) and not committed yet.
        assert 4 <= sample(scrape(url), "rocketmq_consumer_inflight_messages", topic=TOPIC, consumer_group=GROUP) <= 10
        consumer.commit()
        wait_for(lambda: sample(scrape(url), "rocketmq_consumer_lag_messages", topic=TOPIC, consumer_group=GROUP) == 6,
                 what="lag 6 after 4 of 10 committed")
        text = scrape(url)
        # Of the 6 not committed, what the group has not pulled yet; the oldest of them waits since it was sent.
        assert 0 <= sample(text, "rocketmq_consumer_ready_messages", topic=TOPIC, consumer_group=GROUP) <= 6
        assert sample(text, "rocketmq_consumer_lag_latency", topic=TOPIC, consumer_group=GROUP) > 0
        got += poll_until(consumer, 6)
        consumer.commit()
        wait_for(lambda: sample(scrape(url), "rocketmq_consumer_lag_messages", topic=TOPIC, consumer_group=GROUP) == 0,
                 what="lag 0 after all 10 committed")
    finally:
        consumer.shutdown()
    text = scrape(url)
    assert sample(text, "rocketmq_messages_out_total", topic=TOPIC, consumer_group=GROUP) == 10
    # The stored records pulled: each body and its headers.
    assert sample(text, "rocketmq_throughput_out_total", topic=TOPIC, consumer_group=GROUP) > \
        sum(len(f"body-{i}") for i in range(10))
    assert sample(text, "rocketmq_consumer_inflight_messages", topic=TOPIC, consumer_group=GROUP) == 0
    assert sample(text, "rocketmq_consumer_lag_messages", topic=TOPIC, consumer_group=GROUP) == 0
    assert sample(text, "rocketmq_storage_size") > 0
    # The commitlog's flushes (ASYNC_FLUSH: the flusher's, every flushIntervalCommitLog) are timed.
    wait_for(lambda: sample(scrape(url), "rocketmq_storage_flush_latency_count") > 0, what="a timed flush")
    assert sample(text, "rocketmq_consumer_ready_messages", topic=TOPIC, consumer_group=GROUP) == 0
    assert sample(text, "rocketmq_consumer_lag_latency", topic=TOPIC, consumer_group=GROUP) == 0
    assert sample(text, "rocketmq_storage_message_reserve_time") > 0
    # Ten bodies of 6 bytes, each in the first bucket (<= 1 KiB).
    assert sample(text, "rocketmq_message_size_bucket", topic=TOPIC, message_type="Normal", le="1024") == 10
    assert sample(text, "rocketmq_message_size_count", topic=TOPIC, message_type="Normal") == 10

    stats = admin_stats(namesrv.addr, "-b", broker.addr)
    assert url in stats
    assert f'rocketmq_messages_in_total{{message_type="Normal",topic="{TOPIC}"}} 10' in stats
    assert f'rocketmq_consumer_lag_messages{{consumer_group="{GROUP}",topic="{TOPIC}"}} 0' in stats


def test_scheduler_serves_pending_per_level_and_lateness(namesrv, broker, admin, producer, start_scheduler):
    port = free_port()
    start_scheduler(namesrv.addr, metricsExporterType="PROM", metricsPromExporterPort=port, **FAST_SCHEDULER)
    url = f"http://127.0.0.1:{port}/metrics"
    admin.create_topic("MetricsDelayT", read_queue_nums=1, write_queue_nums=1)
    admin.wait_topic_route("MetricsDelayT")
    producer.send(Message("MetricsDelayT", "later", delay_level=2))  # 5 s
    wait_for(lambda: sample(scrape(url), "rocketmq_timing_messages", delay_level="2") == 1, timeout_s=5,
             what="the delayed message pending at level 2")
    wait_for(lambda: sample(scrape(url), "rocketmq_timer_dequeue_total") == 1, timeout_s=20,
             what="the delayed message delivered")
    text = scrape(url)
    assert sample(text, "rocketmq_timing_messages", delay_level="2") == 0
    assert sample(text, "rocketmq_delay_message_latency_count") == 1


def test_namesrv_serves_the_topics_it_routes_and_its_rpc_latency(start_namesrv, start_broker):
    port = free_port()
    ns = start_namesrv(metricsExporterType="PROM", metricsPromExporterPort=port)
    start_broker(ns.addr)
    url = f"http://127.0.0.1:{port}/metrics"
    with Admin(ns.addr) as admin:
        wait_for(lambda: 'request_code="register_broker"' in scrape(url), what="the broker's registration observed")
        before = sample(scrape(url), "rocketmq_namesrv_topics")
        admin.create_topic("MetricsNsT", read_queue_nums=1, write_queue_nums=1)
        admin.wait_topic_route("MetricsNsT")
        wait_for(lambda: sample(scrape(url), "rocketmq_namesrv_topics") == before + 1, what="one topic more routed")
    text = scrape(url)
    assert sample(text, "rocketmq_rpc_latency_count", request_code="get_routeinfo_by_topic",
                  response_code="success") >= 1
    assert 'node_type="namesrv"' in text


class _CheckedBack:
    """A transaction left undecided by the producer (UNKNOW) and committed when the txn-checker asks."""

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


def test_txn_checker_serves_pending_half_messages_and_check_outcomes(namesrv, broker, admin, start_txn_checker):
    port = free_port()
    admin.create_topic("MetricsTxT", read_queue_nums=1, write_queue_nums=1)
    admin.wait_topic_route("MetricsTxT")
    url = f"http://127.0.0.1:{port}/metrics"
    with TransactionProducer("metrics-tx", namesrv.addr, _CheckedBack(), **FAST_CLIENT) as p:
        # First checked 3 s after birth: long enough to see it pending.
        start_txn_checker(namesrv.addr, metricsExporterType="PROM", metricsPromExporterPort=port,
                          transactionTimeOut=3000, transactionCheckInterval=500, heartbeatBrokerIntervalMs=1000,
                          pollNameServerIntervalMs=1000)
        p.send_message_in_transaction(Message("MetricsTxT", "decided-later"))
        wait_for(lambda: sample(scrape(url), "rocketmq_half_messages") == 1, timeout_s=20,
                 what="the half message pending")
        wait_for(lambda: sample(scrape(url), "rocketmq_transaction_checks_total", outcome="checked") == 1,
                 timeout_s=20, what="the half message checked back")
        wait_for(lambda: sample(scrape(url), "rocketmq_half_messages") == 0, timeout_s=20,
                 what="the committed half message no longer pending")
    text = scrape(url)
    assert sample(text, "rocketmq_transaction_checks_total", outcome="failures") == 0
    assert 'node_type="txn-checker"' in text


def test_ha_serves_replication_lag(namesrv, start_broker, start_ha):
    start_broker(namesrv.addr, name="broker-a")
    start_broker(namesrv.addr, name="broker-a", brokerId=1, brokerRole="SLAVE", slaveSyncIntervalMills=500)
    port = free_port()
    start_ha(namesrv.addr, brokerName="broker-a", metricsExporterType="PROM", metricsPromExporterPort=port)
    url = f"http://127.0.0.1:{port}/metrics"
    with Producer("metrics-ha-producer", namesrv.addr) as producer:
        for i in range(5):
            producer.send(Message("MetricsHaT", f"replicated-{i}"))
    wait_for(lambda: "rocketmq_replication_lag_bytes{" in (text := scrape(url))
             and sample(text, "rocketmq_replication_lag_bytes") == 0
             and sample(text, "rocketmq_replication_transferred_bytes_total") > 0, timeout_s=20,
             what="the slave caught up")


def test_up_serves_the_broker_s_metrics_and_prints_the_urls(tmp_path):
    ns_port, broker_port, scheduler_port, checker_port = free_port(), free_port(), free_port(), free_port()
    # The name server's metrics serve one below the broker's and the other services' above it: none of those
    # may be a port given to a service.
    metrics_port = free_port()
    while {ns_port, broker_port, scheduler_port, checker_port} & set(range(metrics_port - 1, metrics_port + 4)):
        metrics_port = free_port()
    up = subprocess.Popen([*cli_command(), "up", "--data-dir", str(tmp_path / "mesh"), "--namesrv-port", str(ns_port),
                           "--no-remoting", "--broker-port", str(broker_port), "--scheduler-port", str(scheduler_port),
                           "--txn-checker-port", str(checker_port), "--metrics-port", str(metrics_port),
                           "--no-dashboard", "--set", "mappedFileSizeCommitLog=4194304"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        assert url in read_until_up(up)
        with Producer("metrics-up-producer", f"127.0.0.1:{ns_port}") as producer:
            producer.send(Message("MetricsUpT", "hello"))
        assert sample(scrape(url), "rocketmq_messages_in_total", topic="MetricsUpT") == 1
    finally:
        up.send_signal(signal.SIGINT)
        up.communicate(timeout=60)
