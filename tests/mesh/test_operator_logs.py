"""The events a RocketMQ operator looks for, as JSON lines at INFO: the name server's broker registration
(once, not once a heartbeat), the broker's queue locks for an orderly consumer and its transaction check-back,
a client's route change. Every service line is one JSON object naming its service (and a broker's, its
broker name)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest

from clientkit import FAST_CLIENT
from procs import FAST_BROKER, FAST_CHECKER, BrokerProcess, ServiceProcess, TxnCheckerProcess, wait_for
from rocketmesh import Admin, LocalTransactionState, Message, TransactionProducer
from rocketmesh.client.consumer import ConsumeOrderlyStatus, PushConsumer
from rocketmesh.model.message import MessageExt

HEARTBEAT_MS = 300


def events(proc: ServiceProcess, service: str) -> list[dict]:
    """Every line of ``proc``'s stderr as JSON (each must parse), each naming ``service``."""
    out = []
    for line in proc.stderr_text().splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        assert event.get("service") == service, line
        out.append(event)
    return out


def named(evts: list[dict], name: str, level: str = "info") -> list[dict]:
    return [e for e in evts if e["event"] == name and e["level"] == level]


def client_events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict]:
    """The SDK's structlog events ``name`` in this (the application's) process."""
    return [e for e in (getattr(r, "rocketmesh_event", None) for r in caplog.records)
            if e is not None and e["event"] == name]


class TxListener:
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW  # the checker asks later

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


def test_operator_events_are_logged_once_at_info(
        monkeypatch, start_namesrv, start_broker: Callable[..., BrokerProcess],
        start_txn_checker: Callable[..., TxnCheckerProcess], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rocketmesh")
    monkeypatch.setenv("ROCKETMESH_LOG_LEVEL", "DEBUG")  # the name server shows its heartbeats, at DEBUG
    namesrv = start_namesrv()
    monkeypatch.setenv("ROCKETMESH_LOG_LEVEL", "INFO")
    broker = start_broker(namesrv.addr, name="broker-ops", registerNameServerPeriod=HEARTBEAT_MS, **FAST_BROKER)

    # Registered: one INFO line, however many heartbeats follow.
    def heartbeats() -> list[dict]:
        beats = named(events(namesrv, "namesrv"), "broker_heartbeat", "debug")
        return [e for e in beats if e["addr"] == broker.addr]
    wait_for(lambda: len(heartbeats()) >= 4, 10, what="four broker heartbeats")
    ns_events = events(namesrv, "namesrv")
    registered = [e for e in named(ns_events, "broker_registered") if e["addr"] == broker.addr]
    assert [e["change"] for e in registered] == ["new"], registered
    assert registered[0]["broker"] == "broker-ops" and registered[0]["broker_id"] == 0
    assert not named(ns_events, "broker_heartbeat")  # never at INFO

    with Admin(namesrv.addr) as admin:
        for topic in ("OpsOrderly", "OpsTx"):
            admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
            admin.wait_topic_route(topic)

        # An orderly consumer: the broker logs each queue lock it takes, and its release.
        def lock_events(name: str) -> list[dict]:
            return [e for e in named(events(broker, "broker"), name)
                    if e["group"] == "ops-orderly" and e["mq"].startswith("OpsOrderly@")]
        consumer = PushConsumer("ops-orderly", namesrv.addr, instance_name="ops-orderly", **FAST_CLIENT)
        consumer.subscribe("OpsOrderly", "*")
        consumer.register_listener(lambda msgs: ConsumeOrderlyStatus.SUCCESS, orderly=True)
        consumer.start()
        try:
            client_id = consumer.client_id
            wait_for(lambda: len(lock_events("queue_locked")) == 2, 10, what="two queue_locked lines")
            routes = wait_for(lambda: [e for e in client_events(caplog, "topic_route_changed")
                                       if e["topic"] == "OpsOrderly"], 10, what="topic_route_changed")
            # A renewal (the consumer locks its queues again every 20 s) is no news: still two.
            consumer._core.rebalance.lock_all()
        finally:
            consumer.shutdown()
        locked = lock_events("queue_locked")
        assert len(locked) == 2 and {e["client_id"] for e in locked} == {client_id}, locked
        wait_for(lambda: len(lock_events("queue_unlocked")) == 2, 10, what="two queue_unlocked lines")
        [route] = routes[:1]
        assert route["level"] == "info" and route["client_id"] and "broker-ops" in route["queues"]
        assert route["brokers"]["broker-ops"] == {"0": broker.addr}

        # A transaction left open is checked back: the broker logs the check at INFO.
        start_txn_checker(namesrv.addr, **FAST_CHECKER)
        with TransactionProducer("ops-tx-p", namesrv.addr, TxListener(), **FAST_CLIENT) as producer:
            result = producer.send_message_in_transaction(Message("OpsTx", "later"))
            [checked] = wait_for(lambda: [e for e in named(events(broker, "broker"), "transaction_checked")
                                          if e["producer_group"] == "ops-tx-p"], 15, what="transaction_checked")
            assert checked["transaction_id"] == result.transaction_id
            assert checked["client_id"] == producer.client_id and checked["check_times"] == 1

    # Every broker line names the broker; the name server's names none of its own.
    broker_events = events(broker, "broker")
    assert all(e.get("broker") == "broker-ops" for e in broker_events), \
        [e for e in broker_events if e.get("broker") != "broker-ops"][:3]
