"""Push and pull consumers against real name server and broker processes (black box, SDK only)."""

from __future__ import annotations

import collections
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
from procs import FAST_BROKER, wait_for
from rocketmesh import Admin, Message, MQClientError, Producer
from rocketmesh.client import SelectMessageQueueByHash
from rocketmesh.client.consumer import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    MessageModel,
    PullConsumer,
    PushConsumer,
)
from rocketmesh.client.consumer.allocate import AllocateAveragely, AllocateAveragelyByCircle
from rocketmesh.model.message import MessageExt, MessageQueue

SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
#: Short client timings so joins, leaves and expiries show within seconds.
BROKER_ARGS = dict(FAST_BROKER, enablePropertyFilter="true")


class Collector:
    """A listener that records what it got, by consumer, thread-safely."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[str, MessageExt]] = []
        self.delay_s = delay_s

    def listener(self, name: str) -> Callable[[list[MessageExt]], ConsumeConcurrentlyStatus]:
        def on(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            if self.delay_s:
                time.sleep(self.delay_s)
            with self.lock:
                self.got.extend((name, m) for m in msgs)
            return SUCCESS
        return on

    def bodies(self, name: str | None = None) -> list[str]:
        with self.lock:
            return [m.body.decode() for n, m in self.got if name is None or n == name]


def push_consumer(namesrv_addr: str, group: str, name: str, topic: str, listener, expression: str = "*",
                  **kw) -> PushConsumer:
    c = PushConsumer(group, namesrv_addr, instance_name=name, consume_from="CONSUME_FROM_FIRST_OFFSET",
                     **FAST_CLIENT, **kw)
    c.subscribe(topic, expression)
    c.register_listener(listener)
    return c.start()


def wait_split(consumers: list[PushConsumer], total: int, timeout_s: float = 15.0) -> dict[str, list[MessageQueue]]:
    """Until the consumers' assignments cover ``total`` queues with no overlap."""
    def check():
        assigned = {c.client_id: c.assigned_queues() for c in consumers}
        flat = [mq for qs in assigned.values() for mq in qs]
        return assigned if len(flat) == total and len(set(flat)) == total else None
    return wait_for(check, timeout_s, what=f"{len(consumers)} consumers splitting {total} queues")


# --- clustering ---

@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle()], ids=lambda s: s.name)
def test_three_consumers_split_eight_queues_as_the_strategy_says_and_consume_each_message_once(
        namesrv, admin, producer, strategy):
    topic = "SplitTopic"
    make_topic(admin, topic, 8)
    got = Collector()
    consumers = [push_consumer(namesrv.addr, "split-group", f"c{i}", topic, got.listener(f"c{i}"), allocate=strategy)
                 for i in range(3)]
    try:
        assigned = wait_split(consumers, 8)
        all_mqs = sorted(mq for qs in assigned.values() for mq in qs)
        cids = sorted(assigned)
        for cid in cids:
            assert sorted(assigned[cid]) == sorted(strategy.allocate("split-group", cid, all_mqs, cids))
        assert sorted(len(q) for q in assigned.values()) == [2, 3, 3]
        sent = [f"m{i}" for i in range(300)]
        for body in sent:
            producer.send(Message(topic, body))
        wait_for(lambda: len(got.bodies()) >= len(sent), 20, what="all messages consumed")
        time.sleep(0.5)
        assert sorted(got.bodies()) == sorted(sent)  # each exactly once
        # Each consumer saw only messages of its own queues.
        with got.lock:
            for name, m in got.got:
                owner = next(c for c in consumers if c.client_id.endswith("@" + name))
                assert MessageQueue(topic, "broker-a", m.queue_id) in assigned[owner.client_id]
    finally:
        for c in consumers:
            c.shutdown()


def test_a_consumer_joining_or_leaving_rebalances_within_seconds(namesrv, admin, producer):
    topic = "JoinLeave"
    make_topic(admin, topic, 8)
    got = Collector()
    first = push_consumer(namesrv.addr, "join-group", "j0", topic, got.listener("j0"))
    try:
        wait_split([first], 8)
        t0 = time.monotonic()
        second = push_consumer(namesrv.addr, "join-group", "j1", topic, got.listener("j1"))
        wait_split([first, second], 8, timeout_s=10)
        join_s = time.monotonic() - t0
        assert len(first.assigned_queues()) == 4 and len(second.assigned_queues()) == 4
        t0 = time.monotonic()
        second.shutdown()
        wait_for(lambda: len(first.assigned_queues()) == 8, 10, what="the remaining consumer taking all queues")
        leave_s = time.monotonic() - t0
        assert join_s < 8 and leave_s < 8  # NOTIFY, not the 20 s rebalance period
        for i in range(40):
            producer.send(Message(topic, f"after-{i}"))
        wait_for(lambda: len([b for b in got.bodies("j0") if b.startswith("after-")]) == 40, 15,
                 what="messages after the leave consumed by the remaining consumer")
    finally:
        first.shutdown()


CRASH_CONSUMER = r"""
import sys, time, os
from rocketmesh.client.consumer import PushConsumer, ConsumeConcurrentlyStatus
namesrv, group, topic, out = sys.argv[1:5]
f = open(out, "a", buffering=1)
def on(msgs):
    for m in msgs:
        time.sleep(0.02)
        f.write(m.body.decode() + "\n")
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
c = PushConsumer(group, namesrv, instance_name="victim", consume_from="CONSUME_FROM_FIRST_OFFSET",
                 heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000,
                 persist_consumer_offset_interval_ms=1000, consume_thread_nums=4)
c.subscribe(topic, "*")
c.register_listener(on)
c.start()
print("started", flush=True)
while True:
    time.sleep(1)
"""


def test_a_consumer_killed_mid_batch_loses_nothing(namesrv, admin, producer, tmp_path: Path):
    topic = "CrashTopic"
    make_topic(admin, topic, 4)
    out = tmp_path / "victim.txt"
    victim = subprocess.Popen([sys.executable, "-c", CRASH_CONSUMER, namesrv.addr, "crash-group", topic, str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env={**os.environ, "ROCKETMESH_LOG_LEVEL": "warning"})
    got = Collector(delay_s=0.005)
    survivor = None
    try:
        assert "started" in victim.stdout.readline()
        survivor = push_consumer(namesrv.addr, "crash-group", "survivor", topic, got.listener("s"))
        wait_for(lambda: len(survivor.assigned_queues()) == 2, 15, what="the two consumers splitting the queues")
        sent = [f"k{i}" for i in range(400)]
        for body in sent:
            producer.send(Message(topic, body))
        wait_for(lambda: out.exists() and len(out.read_text().splitlines()) >= 30, 20, what="the victim consuming")
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        # The broker drops the silent client (3 s here), tells the survivor, which takes every queue.
        wait_for(lambda: len(survivor.assigned_queues()) == 4, 20, what="the survivor taking the victim's queues")
        seen_victim = out.read_text().splitlines()
        wait_for(lambda: set(sent) <= set(got.bodies()) | set(seen_victim), 30, what="every message consumed")
        counts = collections.Counter(got.bodies() + seen_victim)
        assert set(counts) == set(sent)
        duplicates = sum(n - 1 for n in counts.values())
        print(f"victim consumed {len(seen_victim)}, survivor {len(got.bodies())}, duplicates {duplicates}")
    finally:
        if victim.poll() is None:
            victim.kill()
        if survivor is not None:
            survivor.shutdown()


# --- broadcasting ---

def test_broadcasting_delivers_every_message_to_every_client(namesrv, admin, producer, tmp_path: Path):
    topic = "Broadcast"
    make_topic(admin, topic, 4)
    got = Collector()
    consumers = [push_consumer(namesrv.addr, "bc-group", f"b{i}", topic, got.listener(f"b{i}"),
                               message_model=MessageModel.BROADCASTING, offset_store_dir=str(tmp_path / "offsets"))
                 for i in range(2)]
    try:
        for c in consumers:
            wait_for(lambda c=c: len(c.assigned_queues()) == 4, 10, what="each broadcast client holding all queues")
        sent = [f"b{i}" for i in range(60)]
        for body in sent:
            producer.send(Message(topic, body))
        for name in ("b0", "b1"):
            wait_for(lambda name=name: len(got.bodies(name)) >= len(sent), 15, what=f"{name} getting every message")
            assert sorted(got.bodies(name)) == sorted(sent)
    finally:
        for c in consumers:
            c.shutdown()
    # Broadcasting offsets are kept locally, one file per client.
    files = list((tmp_path / "offsets").rglob("offsets.json"))
    assert len(files) == 2


# --- orderly ---

def test_orderly_consumption_keeps_per_key_order_across_a_rebalance(namesrv, admin, producer):
    topic = "OrderEvents"
    make_topic(admin, topic, 4)
    lock = threading.Lock()
    stream: list[tuple[str, int]] = []

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        time.sleep(0.002)
        with lock:
            for m in msgs:
                key, seq = m.body.decode().split(":")
                stream.append((key, int(seq)))
        return ConsumeOrderlyStatus.SUCCESS

    def orderly(name: str) -> PushConsumer:
        c = PushConsumer("order-group", namesrv.addr, instance_name=name, consume_from="CONSUME_FROM_FIRST_OFFSET",
                         **FAST_CLIENT)
        c.subscribe(topic, "*")
        c.register_listener(listener, orderly=True)
        return c.start()

    keys = [f"order{i}" for i in range(12)]
    per_key = 40
    selector = SelectMessageQueueByHash()
    first = orderly("o0")
    second = None
    try:
        wait_for(lambda: len(first.assigned_queues()) == 4, 10, what="the first orderly consumer locking all queues")
        for seq in range(per_key):
            if seq == per_key // 2:
                second = orderly("o1")
            for key in keys:
                producer.send(Message(topic, f"{key}:{seq}"), selector=selector, arg=key)
        wait_for(lambda: len(second.assigned_queues()) == 2, 15, what="the rebalance giving the newcomer its queues")
        wait_for(lambda: {(k, s) for k, s in stream} >= {(k, s) for k in keys for s in range(per_key)}, 30,
                 what="every order event consumed")
    finally:
        for c in (first, second):
            if c is not None:
                c.shutdown()
    with lock:
        by_key: dict[str, list[int]] = collections.defaultdict(list)
        for key, seq in stream:
            by_key[key].append(seq)
    for key, seqs in by_key.items():
        # A batch redelivered at the hand-over repeats itself; nothing ever goes backwards past it.
        assert seqs == sorted(seqs), f"{key} consumed out of order: {seqs}"


def test_orderly_listener_suspend_retries_the_same_message_in_order(namesrv, admin, producer):
    topic = "OrderRetry"
    make_topic(admin, topic, 1)
    seen: list[str] = []
    failures = {"m1": 2}

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        body = msgs[0].body.decode()
        seen.append(body)
        if failures.get(body, 0) > 0:
            failures[body] -= 1
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    c = PushConsumer("order-retry", namesrv.addr, instance_name="or", consume_from="CONSUME_FROM_FIRST_OFFSET",
                     suspend_current_queue_time_ms=100, **FAST_CLIENT)
    c.subscribe(topic)
    c.register_listener(listener, orderly=True)
    c.start()
    try:
        for i in range(4):
            producer.send(Message(topic, f"m{i}"))
        wait_for(lambda: seen.count("m3") == 1, 15, what="the last message consumed")
        assert seen == ["m0", "m1", "m1", "m1", "m2", "m3"]
    finally:
        c.shutdown()


# --- filters ---

FILTER_MESSAGES = [
    # (body, tags, properties)
    ("t1", "TagA", {"a": "1", "region": "eu"}),
    ("t2", "TagB", {"a": "5", "region": "us"}),
    ("t3", "TagC", {"a": "10"}),
    ("t4", None, {"a": "abc", "region": "eu"}),
    ("t5", "TagA", {"flag": "true"}),
    ("t6", "Aa", {"a": "7", "region": "asia"}),   # "Aa" and "BB" share a Java hash code
    ("t7", "BB", {"a": "2"}),
]

TAG_CASES = [
    ("*", {"t1", "t2", "t3", "t4", "t5", "t6", "t7"}),
    ("TagA", {"t1", "t5"}),
    ("TagA || TagB", {"t1", "t2", "t5"}),
    (" TagC ||TagZ", {"t3"}),
    ("Aa", {"t6"}),
    ("BB", {"t7"}),
]

SQL_CASES = [
    ("a > 4", {"t2", "t3", "t6"}),
    ("a BETWEEN 1 AND 5", {"t1", "t2", "t7"}),
    ("a NOT BETWEEN 1 AND 5", {"t3", "t6"}),
    ("region = 'eu'", {"t1", "t4"}),
    ("region <> 'eu'", {"t2", "t6"}),
    ("region IN ('us', 'asia')", {"t2", "t6"}),
    ("region NOT IN ('us', 'asia')", {"t1", "t4"}),
    ("region IS NULL", {"t3", "t5", "t7"}),
    ("region IS NOT NULL", {"t1", "t2", "t4", "t6"}),
    ("TAGS = 'TagA' AND a IS NULL", {"t5"}),
    ("TAGS = 'TagA' OR region = 'us'", {"t1", "t2", "t5"}),
    ("NOT (region = 'eu')", {"t2", "t6"}),
    ("flag = TRUE", {"t5"}),
    # t4's a='abc' is not a number: as in RocketMQ the comparison fails the whole expression,
    # even though region = 'eu' would have matched.
    ("(a > 4 AND a < 8) OR region = 'eu'", {"t1", "t2", "t6"}),
    ("region = 'eu' OR (a > 4 AND a < 8)", {"t1", "t2", "t4", "t6"}),
]


def _poll_all(consumer: PullConsumer, expected_n: int, quiet_s: float = 0.5) -> set[str]:
    got: set[str] = set()
    deadline = time.monotonic() + 15
    last_new = time.monotonic()
    while time.monotonic() < deadline:
        batch = consumer.poll(timeout_ms=200)
        if batch:
            got.update(m.body.decode() for m in batch)
            last_new = time.monotonic()
        elif len(got) >= expected_n and time.monotonic() - last_new > quiet_s:
            break
    return got


def test_tag_and_sql92_subscriptions_receive_exactly_the_matching_messages(namesrv, admin, producer):
    topic = "FilterTopic"
    make_topic(admin, topic, 2)
    for body, tags, props in FILTER_MESSAGES:
        producer.send(Message(topic, body, tags=tags, properties=props))
    cases = TAG_CASES + [("sql:" + e, x) for e, x in SQL_CASES]
    consumers = []
    try:
        for i, (expression, _) in enumerate(cases):
            c = PullConsumer(f"filter-{i}", namesrv.addr, instance_name=f"filter-{i}",
                             consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT)
            if expression.startswith("sql:"):
                c.subscribe(topic, sql=expression[4:])
            else:
                c.subscribe(topic, expression)
            consumers.append(c.start())
        got = [_poll_all(c, len(expected)) for c, (_, expected) in zip(consumers, cases, strict=False)]
    finally:
        for c in consumers:
            c.shutdown()
    wrong = {expr: (g, x) for (expr, x), g in zip(cases, got, strict=False) if g != x}
    assert not wrong, f"expression -> (received, expected): {wrong}"


def test_a_bad_sql_expression_fails_at_subscribe_time(namesrv, broker):
    c = PushConsumer("bad-sql", namesrv.addr)
    with pytest.raises(MQClientError, match="SQL92|expression"):
        c.subscribe("AnyTopic", sql="a > ")
    with pytest.raises(MQClientError):
        c.subscribe("AnyTopic", sql="a = 'unterminated")


def test_sql_subscription_on_a_broker_without_property_filter_fails_start(namesrv, start_broker):
    start_broker(namesrv.addr, name="broker-nofilter")
    with Admin(namesrv.addr) as admin:
        make_topic(admin, "NoSql", 1)
    c = PushConsumer("sql-group", namesrv.addr, instance_name="sqlc")
    c.subscribe("NoSql", sql="a > 1")
    c.register_listener(lambda msgs: SUCCESS)
    with pytest.raises(MQClientError, match="enablePropertyFilter"):
        c.start()


# --- offsets ---

def test_a_new_group_reads_a_young_queue_from_its_first_message(namesrv, admin, producer):
    # As RocketMQ's broker: with no offset stored, a queue whose first message is still near the commitlog's
    # end (in the page cache) is read from offset 0, whatever consume_from says.
    make_topic(admin, "YoungQueue", 1)
    for i in range(3):
        producer.send(Message("YoungQueue", f"y{i}"))
    got = Collector()
    c = PushConsumer("young-group", namesrv.addr, instance_name="young", **FAST_CLIENT)  # CONSUME_FROM_LAST_OFFSET
    c.subscribe("YoungQueue", "*")
    c.register_listener(got.listener("young"))
    c.start()
    try:
        wait_for(lambda: len(got.bodies()) >= 3, 15, what="the messages sent before the group started")
        assert got.bodies() == ["y0", "y1", "y2"]
    finally:
        c.shutdown()


def test_a_new_group_reads_an_old_queue_from_its_end(namesrv, start_broker):
    # accessMessageInMemoryMaxRatio=0: every stored message counts as swapped out, so the queue is "old"
    # and CONSUME_FROM_LAST_OFFSET starts after what it holds.
    start_broker(namesrv.addr, name="broker-old", accessMessageInMemoryMaxRatio=0)
    with Admin(namesrv.addr) as admin, Producer("old-producer", namesrv.addr) as producer:
        make_topic(admin, "OldQueue", 1)
        for i in range(3):
            producer.send(Message("OldQueue", f"old{i}"))
        got = Collector()
        c = PushConsumer("old-group", namesrv.addr, instance_name="old", **FAST_CLIENT)
        c.subscribe("OldQueue", "*")
        c.register_listener(got.listener("old"))
        c.start()
        try:
            wait_for(lambda: c.assigned_queues(), 15, what="the queue assigned")
            time.sleep(0.5)  # the first pull is out
            producer.send(Message("OldQueue", "new"))
            wait_for(lambda: got.bodies(), 15, what="the message sent after the group started")
            time.sleep(0.3)
            assert got.bodies() == ["new"]
        finally:
            c.shutdown()


def test_reset_offset_by_time_redelivers_from_the_right_message(namesrv, admin, producer):
    topic = "ResetTopic"
    make_topic(admin, topic, 2)
    got = Collector()
    c = push_consumer(namesrv.addr, "reset-group", "rs", topic, got.listener("rs"))
    try:
        for i in range(10):
            producer.send(Message(topic, f"early{i}"))
        time.sleep(0.05)
        mark = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(10):
            producer.send(Message(topic, f"late{i}"))
        wait_for(lambda: len(got.bodies()) >= 20, 15, what="first pass consumed")
        offsets = admin.reset_offset_by_time("reset-group", topic, mark)
        assert sum(offsets.values()) == 10  # five or so early messages per queue come before the mark
        wait_for(lambda: len(got.bodies()) >= 30, 15, what="late messages redelivered")
        time.sleep(0.5)
        again = got.bodies()[20:]
        assert sorted(again) == sorted(f"late{i}" for i in range(10))
    finally:
        c.shutdown()


def test_pull_consumer_assign_seek_commit_and_committed(namesrv, admin, producer):
    topic = "LitePull"
    make_topic(admin, topic, 1)
    for i in range(20):
        producer.send(Message(topic, f"p{i}"))
    mq = MessageQueue(topic, "broker-a", 0)
    with PullConsumer("lite-group", namesrv.addr, instance_name="lite", auto_commit=False,
                      consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT) as c:
        c.assign([mq])
        got: list[MessageExt] = []
        while len(got) < 20:
            batch = c.poll(timeout_ms=3000)
            assert batch, "poll timed out"
            got.extend(batch)
        assert [m.body.decode() for m in got] == [f"p{i}" for i in range(20)]
        assert [m.queue_offset for m in got] == list(range(20))
        assert c.committed(mq) == 0  # nothing committed yet: a young queue's broker answer, as RocketMQ's
        c.commit()
        assert c.committed(mq) == 20
        c.seek(mq, 5)
        batch = c.poll(timeout_ms=3000)
        assert batch[0].body == b"p5"
        ts = got[12].store_timestamp
        c.seek_to_time(ts, mq)
        batch = c.poll(timeout_ms=3000)
        assert batch[0].store_timestamp >= ts and batch[0].queue_offset <= 12
        with pytest.raises(MQClientError, match="out of range"):
            c.seek(mq, 1000)
    # A new consumer of the group resumes from the committed offset.
    producer.send(Message(topic, "p20"))
    with PullConsumer("lite-group", namesrv.addr, instance_name="lite2", **FAST_CLIENT) as c2:
        c2.assign([mq])
        batch = c2.poll(timeout_ms=5000)
        assert [m.body for m in batch][:1] == [b"p20"]


def test_long_polling_delivers_a_message_sent_while_the_pull_is_held(namesrv, admin, producer):
    topic = "LongPoll"
    make_topic(admin, topic, 1)
    with PullConsumer("lp-group", namesrv.addr, instance_name="lp", **FAST_CLIENT) as c:
        c.subscribe(topic)
        wait_for(lambda: c.assignment(), 10, what="queue assigned")
        assert c.poll(timeout_ms=500) == []  # the pull is now held by the broker
        time.sleep(0.5)
        sent_at = time.monotonic()
        producer.send(Message(topic, "wake"))
        batch = c.poll(timeout_ms=5000)
        latency = time.monotonic() - sent_at
        assert [m.body for m in batch] == [b"wake"]
        assert latency < 1.0  # far below the 15 s hold and any polling interval; the bench measures it


def test_poll_max_records_hands_out_part_of_a_batch_and_keeps_the_rest_for_the_next_poll(namesrv, admin, producer):
    topic = "PollMax"
    make_topic(admin, topic, 1)
    for i in range(25):
        producer.send(Message(topic, f"p{i}"))
    mq = MessageQueue(topic, "broker-a", 0)
    with PullConsumer("pollmax-group", namesrv.addr, instance_name="pollmax", auto_commit=False,
                      consume_from="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=32, **FAST_CLIENT) as c:
        c.assign([mq])
        got: list[MessageExt] = []
        while len(got) < 10:
            batch = c.poll(timeout_ms=3000, max_records=4)
            assert 1 <= len(batch) <= 4
            got.extend(batch)
        c.commit()
        assert c.committed(mq) == len(got)  # only what was handed out counts as consumed
        while len(got) < 25:
            batch = c.poll_nowait(max_records=25 - len(got)) or c.poll(timeout_ms=3000)
            got.extend(batch)
        assert [m.queue_offset for m in got] == list(range(25))
        with pytest.raises(MQClientError, match="max_records"):
            c.poll(max_records=0)
