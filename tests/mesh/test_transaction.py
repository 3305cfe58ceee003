"""Transactional messages against real processes: producers, brokers, txn-checker replicas, consumers.

What a user checks: committed transactions are consumed once, rolled-back ones
never, half messages are never seen by consumers of the real topic, a
producer that dies mid-transaction is stood in for by another instance of its
group, checks stop after transactionCheckMax, and the checker's work survives
the loss of a replica.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clientkit import FAST_CLIENT, make_topic
from procs import FAST_BROKER, FAST_CHECKER, BrokerProcess, TxnCheckerProcess, wait_for
from rocketmesh import Admin, LocalTransactionState, Message, MQClientError, TransactionProducer
from rocketmesh.cli import main as cli_main
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.model.codec import decode_message_id, encode_batch
from rocketmesh.model.message import MessageConst, MessageExt
from rocketmesh.model.topics import TRANS_CHECK_GROUP, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketmesh.remoting import RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.headers import EndTransactionRequestHeader

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
BROKER_ARGS = FAST_BROKER

StartBroker = Callable[..., BrokerProcess]
StartChecker = Callable[..., TxnCheckerProcess]


class Listener:
    """A transaction listener deciding by the message's keys; records what it was asked."""

    def __init__(self, execute: Callable[[Message], LocalTransactionState] = lambda m: UNKNOW,
                 check: Callable[[MessageExt], LocalTransactionState] = lambda m: UNKNOW) -> None:
        self._execute = execute
        self._check = check
        self.lock = threading.Lock()
        self.executed: list[str] = []
        self.checked: list[tuple[str, str]] = []

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        with self.lock:
            self.executed.append(msg.keys or "")
        return self._execute(msg)

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked.append((msg.keys or "", msg.topic))
        return self._check(msg)

    def checks_of(self, key: str) -> int:
        with self.lock:
            return sum(1 for k, _ in self.checked if k == key)


class Bodies:
    """A push consumer's listener that keeps every body it got (duplicates included)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[str] = []
        self.topics: set[str] = set()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with self.lock:
            self.got.extend(m.body.decode() for m in msgs)
            self.topics.update(m.topic for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def snapshot(self) -> list[str]:
        with self.lock:
            return list(self.got)


def consumer(namesrv: str, group: str, topic: str, got: Bodies) -> PushConsumer:
    c = PushConsumer(group, namesrv, instance_name=f"consumer-{group}", consume_from="CONSUME_FROM_FIRST_OFFSET",
                     **FAST_CLIENT)
    c.subscribe(topic, "*")
    c.register_listener(got)
    return c.start()


def settle(got: Bodies, expected: list[str], timeout_s: float = 20.0, quiet_s: float = 1.5) -> list[str]:
    """Wait until ``got`` holds ``expected`` (as a multiset) and stays so for ``quiet_s``; returns what it holds."""
    wait_for(lambda: sorted(got.snapshot()) == sorted(expected), timeout_s,
             what=f"{len(expected)} messages consumed (have {len(got.snapshot())})")
    time.sleep(quiet_s)
    return got.snapshot()


# --- commit, rollback, visibility ---

def test_committed_transactions_are_consumed_once_rolled_back_and_open_ones_never(namesrv, broker, admin):
    topic = "TxOrders"
    make_topic(admin, topic)
    decide = {"c": COMMIT, "r": ROLLBACK, "u": UNKNOW}
    listener = Listener(execute=lambda m: decide[m.keys[0]])
    got = Bodies()
    c = consumer(namesrv.addr, "tx-orders-consumer", topic, got)
    try:
        with TransactionProducer("tx-orders", namesrv.addr, listener, instance_name="p1", **FAST_CLIENT) as p:
            results = {}
            for i in range(30):
                key = "cru"[i % 3] + str(i)
                results[key] = p.send_message_in_transaction(Message(topic, f"body-{key}", keys=key), arg=i)
        committed = [f"body-{k}" for k in results if k[0] == "c"]
        assert settle(got, committed) and sorted(got.snapshot()) == sorted(committed)
        assert got.topics == {topic}
        for key, r in results.items():
            assert r.ok and r.transaction_id == r.msg_id and r.message_queue.topic == topic
            assert r.local_transaction_state is decide[key[0]]
        # The open ones are listed as pending, the decided ones are not.
        pending = admin.pending_half_messages(topic)
        assert sorted(h.transaction_id for h in pending) == sorted(r.msg_id for k, r in results.items() if k[0] == "u")
        assert all(h.producer_group == "tx-orders" and h.check_times == 0 and h.topic == topic for h in pending)
        assert sorted(h.keys for h in pending) == sorted(k for k in results if k[0] == "u")
    finally:
        c.shutdown()


def test_an_exception_in_the_local_transaction_counts_as_unknown(namesrv, broker, admin, capsys):
    topic = "TxRaises"
    make_topic(admin, topic, 1)

    def boom(msg: Message) -> LocalTransactionState:
        raise RuntimeError("the database is down")
    with TransactionProducer("tx-raises", namesrv.addr, Listener(execute=boom), instance_name="p1",
                             **FAST_CLIENT) as p:
        result = p.send_message_in_transaction(Message(topic, "x", keys="k"))
    assert result.ok and result.local_transaction_state is UNKNOW
    assert [h.transaction_id for h in admin.pending_half_messages(topic)] == [result.msg_id]
    # The admin command lists it too.
    assert cli_main(["admin", "pending-half-messages", "-n", namesrv.addr, "-t", topic]) == 0
    out = capsys.readouterr().out
    assert result.msg_id in out and "tx-raises" in out and "1 half message(s)" in out


def test_transactional_messages_refuse_delays_timers_and_batches(namesrv, broker, admin, remoting_client):
    topic = "TxRefused"
    make_topic(admin, topic, 1)
    listener = Listener(execute=lambda m: COMMIT)
    with TransactionProducer("tx-refused", namesrv.addr, listener, instance_name="p1") as p:
        for msg, words in ((Message(topic, "x", delay_level=2), "delay_level"),
                           (Message(topic, "x", delay_ms=5000), "timer")):
            with pytest.raises(MQClientError, match=words) as err:
                p.send_message_in_transaction(msg)
            assert err.value.response_code == ResponseCode.MESSAGE_ILLEGAL
        with pytest.raises(MQClientError, match="batch"):
            p.send_message_in_transaction([Message(topic, "a"), Message(topic, "b")])  # type: ignore[arg-type]
        assert listener.executed == []  # nothing was sent, no local transaction ran
        with pytest.raises(MQClientError, match="batch"):
            p.send_batch([Message(topic, "a", properties={MessageConst.TRANSACTION_PREPARED: "true"})])
    # The broker refuses them too, with a clear answer, whoever sends them.
    base = {"producerGroup": "raw", "topic": topic, "queueId": 0, "bornTimestamp": int(time.time() * 1000),
            "sysFlag": 4}
    for props, words in (("DELAY\x013\x02", "delay level"), ("TIMER_DELAY_MS\x015000\x02", "delivery time")):
        resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.SEND_MESSAGE,
                                                                {**base, "properties": props}, b"x"), 3000)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and words in resp.remark, resp.remark
    resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.SEND_BATCH_MESSAGE, {**base, "batch": True},
                                                            encode_batch([Message(topic, "a")])), 3000)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "transactional" in resp.remark
    assert admin.pending_half_messages(topic) == []


def test_a_late_or_repeated_end_transaction_changes_nothing(namesrv, broker, admin, remoting_client):
    topic = "TxLate"
    make_topic(admin, topic, 1)
    got = Bodies()
    c = consumer(namesrv.addr, "tx-late-consumer", topic, got)
    try:
        with TransactionProducer("tx-late", namesrv.addr, Listener(execute=lambda m: COMMIT), instance_name="p1",
                                 **FAST_CLIENT) as p:
            result = p.send_message_in_transaction(Message(topic, "once", keys="k"))
        settle(got, ["once"], quiet_s=0.2)
        offset = decode_message_id(result.offset_msg_id)[2]
        for value, from_check in ((8, False), (12, True), (8, True)):
            header = EndTransactionRequestHeader("tx-late", result.queue_offset, offset, value, from_check,
                                                 result.msg_id, result.msg_id)
            resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.END_TRANSACTION, header.to_ext()), 3000)
            assert resp.code == ResponseCode.SUCCESS and "decided before" in resp.remark, resp.remark
        wrong = EndTransactionRequestHeader("someone-else", result.queue_offset, offset, 8)
        resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.END_TRANSACTION, wrong.to_ext()), 3000)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "producer group" in resp.remark
        # A restarted broker still knows (from its op queue) that the transaction was decided.
        broker.stop()
        broker.start(timeout_s=30)
        broker.wait_registered()
        header = EndTransactionRequestHeader("tx-late", result.queue_offset, offset, 8, True, result.msg_id,
                                             result.msg_id)
        resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.END_TRANSACTION, header.to_ext()), 5000)
        assert resp.code == ResponseCode.SUCCESS and "decided before" in resp.remark, resp.remark
        assert settle(got, ["once"]) == ["once"]
    finally:
        c.shutdown()


# --- checks ---

KILLED_PRODUCER = r"""
import sys, threading, time
from rocketmesh import Message, TransactionProducer
namesrv, topic = sys.argv[1:3]
lock = threading.Lock()
class Hang:
    def execute_local_transaction(self, msg, arg):
        with lock:
            print(f"half {msg.keys}", flush=True)
        time.sleep(3600)
    def check_local_transaction(self, msg):
        time.sleep(3600)
p = TransactionProducer("tx-crash", namesrv, Hang(), instance_name="victim", heartbeat_broker_interval_ms=1000)
for key in ("commit-me", "rollback-me"):
    threading.Thread(target=p.send_message_in_transaction, args=(Message(topic, key, keys=key),), daemon=True).start()
time.sleep(3600)
"""


def test_a_producer_killed_before_end_transaction_is_stood_in_for_by_another_of_its_group(
        namesrv, broker, admin, start_txn_checker: StartChecker, tmp_path: Path):
    topic = "TxCrash"
    make_topic(admin, topic)
    errors = tmp_path / "victim.stderr"
    with open(errors, "w") as err:
        victim = subprocess.Popen([sys.executable, "-c", KILLED_PRODUCER, namesrv.addr, topic], stdout=subprocess.PIPE,
                                  stderr=err, text=True, env={**os.environ, "ROCKETMESH_LOG_LEVEL": "warning"})
    got = Bodies()
    c = consumer(namesrv.addr, "tx-crash-consumer", topic, got)
    listener = Listener(check=lambda m: COMMIT if m.keys == "commit-me" else ROLLBACK)
    try:
        halves = {victim.stdout.readline().strip() for _ in range(2)}
        assert halves == {"half commit-me", "half rollback-me"}, errors.read_text()
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        assert sorted(h.keys for h in admin.pending_half_messages(topic)) == ["commit-me", "rollback-me"]
        with TransactionProducer("tx-crash", namesrv.addr, listener, instance_name="stand-in", **FAST_CLIENT):
            start_txn_checker(namesrv.addr, **FAST_CHECKER)
            assert settle(got, ["commit-me"]) == ["commit-me"]
            wait_for(lambda: admin.pending_half_messages(topic) == [], 10, what="no transaction left open")
        # The stand-in was asked about each, with the message as it was sent (its real topic).
        assert sorted(set(listener.checked)) == [("commit-me", topic), ("rollback-me", topic)]
        assert listener.executed == []
    finally:
        c.shutdown()
        if victim.poll() is None:
            victim.kill()


def test_unknown_answers_repeat_checks_until_the_max_then_the_message_is_given_up(
        namesrv, broker, admin, start_txn_checker: StartChecker):
    topic = "TxGiveUp"
    make_topic(admin, topic, 1)
    got = Bodies()
    c = consumer(namesrv.addr, "tx-giveup-consumer", topic, got)
    listener = Listener(check=lambda m: UNKNOW)
    try:
        with TransactionProducer("tx-giveup", namesrv.addr, listener, instance_name="p1", **FAST_CLIENT) as p:
            checker = start_txn_checker(namesrv.addr, transactionCheckMax=3, **FAST_CHECKER)
            result = p.send_message_in_transaction(Message(topic, "never", keys="k"))
            wait_for(lambda: checker.status()["discarded"] == 1, 20, what="the message given up")
            moved = admin.query_msg_by_unique_key(TRANS_CHECK_MAX_TIME_TOPIC, result.msg_id)
            assert moved.body == b"never" and moved.properties[MessageConst.TRANSACTION_CHECK_TIMES] == "3"
            assert moved.properties[MessageConst.REAL_TOPIC] == topic
            time.sleep(1.5)  # more passes: no further checks
            assert listener.checks_of("k") == 3
            assert checker.status()["checked"] == 3
        assert admin.pending_half_messages(topic) == []
        assert got.snapshot() == []
    finally:
        c.shutdown()


def test_without_a_live_producer_checks_wait_and_no_count_is_lost(
        namesrv, broker, admin, start_txn_checker: StartChecker):
    topic = "TxOrphan"
    make_topic(admin, topic, 1)
    got = Bodies()
    c = consumer(namesrv.addr, "tx-orphan-consumer", topic, got)
    try:
        with TransactionProducer("tx-orphan", namesrv.addr, Listener(), instance_name="p1", **FAST_CLIENT) as p:
            result = p.send_message_in_transaction(Message(topic, "late", keys="k"))
        # The producer left (unregistered): nobody to ask.
        checker = start_txn_checker(namesrv.addr, transactionCheckMax=2, **FAST_CHECKER)
        wait_for(lambda: checker.status()["noProducer"] >= 4, 20, what="several checks finding no producer")
        [pending] = admin.pending_half_messages(topic)
        assert pending.transaction_id == result.msg_id and pending.check_times == 0
        assert checker.status()["discarded"] == 0
        listener = Listener(check=lambda m: COMMIT)
        with TransactionProducer("tx-orphan", namesrv.addr, listener, instance_name="p2", **FAST_CLIENT):
            assert settle(got, ["late"]) == ["late"]
        assert listener.checks_of("k") >= 1
    finally:
        c.shutdown()


def test_two_checkers_one_killed_leave_no_transaction_undecided(
        namesrv, start_broker: StartBroker, start_txn_checker: StartChecker):
    start_broker(namesrv.addr, name="broker-a", **FAST_BROKER)
    start_broker(namesrv.addr, name="broker-b", **FAST_BROKER)
    topic = "TxReplicas"
    with Admin(namesrv.addr) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        wait_for(lambda: len(admin.wait_topic_route(topic).broker_datas) == 2, 10, what="the topic on both brokers")
        checkers = [start_txn_checker(namesrv.addr, name=f"checker{i}", rebalanceIntervalMs=1000,
                                      transactionTimeOut=2000, transactionCheckInterval=500,
                                      heartbeatBrokerIntervalMs=1000, pollNameServerIntervalMs=1000,
                                      persistOffsetIntervalMs=300) for i in range(2)]

        def split() -> bool:
            owned = [set(ch.status()["queues"]) for ch in checkers]
            return all(len(o) == 1 for o in owned) and owned[0] != owned[1]
        wait_for(split, 20, what="the two checkers splitting the two half queues")
        got = Bodies()
        c = consumer(namesrv.addr, "tx-replicas-consumer", topic, got)
        committed = {}
        listener = Listener(check=lambda m: COMMIT if m.keys.startswith("c") else ROLLBACK)
        try:
            with TransactionProducer("tx-replicas", namesrv.addr, listener, instance_name="p1", **FAST_CLIENT) as p:
                for i in range(40):
                    key = ("c" if i % 4 else "r") + str(i)
                    r = p.send_message_in_transaction(Message(topic, key, keys=key))
                    if key[0] == "c":
                        committed[key] = r.message_queue.broker_name
                assert set(committed.values()) == {"broker-a", "broker-b"}
                checkers[0].kill()  # before any of them is old enough to be checked
                wait_for(lambda: len(checkers[1].status()["queues"]) == 2, 20, what="the survivor taking both queues")
                assert settle(got, list(committed), timeout_s=30) and sorted(got.snapshot()) == sorted(committed)
                wait_for(lambda: admin.pending_half_messages(topic) == [], 10, what="no transaction left open")
        finally:
            c.shutdown()


def test_a_restarted_checker_resumes_from_the_progress_kept_on_the_broker(
        namesrv, broker, admin, start_txn_checker: StartChecker):
    topic = "TxResume"
    make_topic(admin, topic, 1)
    got = Bodies()
    c = consumer(namesrv.addr, "tx-resume-consumer", topic, got)
    listener = Listener(check=lambda m: COMMIT)
    try:
        with TransactionProducer("tx-resume", namesrv.addr, listener, instance_name="p1", **FAST_CLIENT) as p:
            first = start_txn_checker(namesrv.addr, **FAST_CHECKER)
            for i in range(5):
                p.send_message_in_transaction(Message(topic, f"a{i}", keys=f"a{i}"))
            settle(got, [f"a{i}" for i in range(5)], quiet_s=0.2)

            def committed() -> bool:
                [q] = first.status()["queues"].values()
                return q["pending"] == 0 and q["opsWaiting"] == 0
            wait_for(committed, 10, what="the first checker's progress settled")
            time.sleep(1.0)  # a persist period
            first.stop()
            checks_before = {f"a{i}": listener.checks_of(f"a{i}") for i in range(5)}
            stats = admin.consume_stats(TRANS_CHECK_GROUP)
            kept = {mq.topic: w for mq, w in stats.offset_table.items()}
            # Five halves (and the copies checks made of some), five ops: all consumed, the offsets on the broker.
            assert kept[TRANS_HALF_TOPIC].consumer_offset == kept[TRANS_HALF_TOPIC].broker_offset >= 5
            assert kept[TRANS_OP_HALF_TOPIC].consumer_offset == kept[TRANS_OP_HALF_TOPIC].broker_offset == 5
            for i in range(3):
                p.send_message_in_transaction(Message(topic, f"b{i}", keys=f"b{i}"))
            second = start_txn_checker(namesrv.addr, name="second", **FAST_CHECKER)
            settle(got, [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(3)])
            # The second checker looked at the new halves only: nothing decided before was checked again.
            assert {f"a{i}": listener.checks_of(f"a{i}") for i in range(5)} == checks_before
            assert all(n >= 1 for n in checks_before.values())
            b_checks = sum(listener.checks_of(f"b{i}") for i in range(3))
            assert b_checks >= 3 and second.status()["checked"] == b_checks
    finally:
        c.shutdown()
