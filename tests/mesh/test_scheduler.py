"""Delay levels and timer messages through real name server, broker and scheduler processes (black box)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from clientkit import FAST_CLIENT
from procs import FAST_BROKER, FAST_SCHEDULER, BrokerProcess, SchedulerProcess, wait_for
from rocketmesh import Admin, Message, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.client.errors import MQBrokerError
from rocketmesh.model.message import MessageExt, MessageQueue
from rocketmesh.model.topics import SCHEDULE_TOPIC
from rocketmesh.remoting import ResponseCode

StartBroker = Callable[..., BrokerProcess]
StartScheduler = Callable[..., SchedulerProcess]
LEVELS = "1s 2s 3s"
BROKER_ARGS = dict(FAST_BROKER, messageDelayLevel=LEVELS)
#: How far apart the due times of two messages delivered in one round may be (see the timer order test): a
#: round takes every entry due by the time it wakes, and on a busy machine it wakes up to this late.
SAME_ROUND_MS = 250


class Arrivals:
    """A push consumer's listener that records each message with its arrival time (ms)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[int, MessageExt]] = []

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        now = int(time.time() * 1000)
        with self.lock:
            self.got.extend((now, m) for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def bodies(self) -> list[str]:
        with self.lock:
            return [m.body.decode() for _, m in self.got]


def consume(namesrv: str, topic: str, name: str) -> tuple[PushConsumer, Arrivals]:
    arrivals = Arrivals()
    consumer = PushConsumer(f"g-{name}", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", instance_name=name,
                            **FAST_CLIENT)
    consumer.subscribe(topic, "*")
    consumer.register_listener(arrivals)
    consumer.start()
    return consumer, arrivals


def status(proc: SchedulerProcess) -> dict:
    """A scheduler replica's own account (GET_CONSUMER_RUNNING_INFO on its status port)."""
    return proc.status()


def test_delay_levels_arrive_when_due_and_above_max_clamps(namesrv, broker, admin, producer,
                                                           start_scheduler: StartScheduler) -> None:
    admin.create_topic("DelayT", read_queue_nums=2, write_queue_nums=2)
    admin.wait_topic_route("DelayT")
    start_scheduler(namesrv.addr, **FAST_SCHEDULER)
    consumer, arrivals = consume(namesrv.addr, "DelayT", "c-delay")
    try:
        levels = {0: 0, 1: 1000, 2: 2000, 3: 3000, 7: 3000}  # level 7 is above max: clamps to 3
        sent: dict[str, tuple[int, int]] = {}
        for level, delay in levels.items():
            for i in range(3):
                body = f"L{level}-{i}"
                producer.send(Message("DelayT", body, tags="d", delay_level=level))
                sent[body] = (int(time.time() * 1000), delay)
        wait_for(lambda: len(arrivals.bodies()) >= len(sent), 15, "every delayed message delivered")
        time.sleep(0.5)
        assert sorted(arrivals.bodies()) == sorted(sent)  # each once
        for arrived_at, m in arrivals.got:
            sent_at, delay = sent[m.body.decode()]
            assert m.topic == "DelayT" and m.tags == "d"
            assert m.get_property("REAL_TOPIC") is None and m.get_property("DELAY") is None
            # Never early: the re-put's store time is at or after the original's due time.
            assert m.store_timestamp >= m.born_timestamp + delay
            assert arrived_at - sent_at < delay + 1500, f"{m.body!r} came {arrived_at - sent_at} ms after sending"
        info = admin.broker_runtime_info(broker.addr)
        assert int(info["scheduleMessageDelivered"]) == 12
    finally:
        consumer.shutdown()


def test_delayed_message_keeps_its_id_keys_and_properties(namesrv, broker, admin, producer,
                                                          start_scheduler: StartScheduler) -> None:
    admin.create_topic("DelayKeep", read_queue_nums=1, write_queue_nums=1)
    admin.wait_topic_route("DelayKeep")
    start_scheduler(namesrv.addr, **FAST_SCHEDULER)
    consumer, arrivals = consume(namesrv.addr, "DelayKeep", "c-keep")
    try:
        msg = Message("DelayKeep", "payload", tags="t1", keys=["k1", "k2"], delay_level=1)
        msg.put_user_property("color", "blue")
        result = producer.send(msg)
        wait_for(lambda: arrivals.bodies(), 10, "delivery")
        m = arrivals.got[0][1]
        assert m.unique_key == result.msg_id
        assert m.keys == "k1 k2" and m.get_property("color") == "blue" and m.body == b"payload"
        # The broker's index finds it under its key in the real topic.
        found = admin.query_msg_by_key("DelayKeep", "k1")
        assert any(f.topic == "DelayKeep" and f.body == b"payload" for f in found)
    finally:
        consumer.shutdown()


def test_timer_messages_arrive_in_due_order_never_early(namesrv, broker, admin, producer,
                                                        start_scheduler: StartScheduler) -> None:
    admin.create_topic("TimerT", read_queue_nums=4, write_queue_nums=4)
    admin.wait_topic_route("TimerT")
    start_scheduler(namesrv.addr, **FAST_SCHEDULER)
    consumer, arrivals = consume(namesrv.addr, "TimerT", "c-timer")
    try:
        rng = random.Random(7)
        now = int(time.time() * 1000)
        due = {}
        for i in range(60):
            at = now + rng.randrange(300, 4000)
            body = f"t{i}"
            if i % 2:
                producer.send(Message("TimerT", body, deliver_at_ms=at))
            else:
                producer.send(Message("TimerT", body, delay_ms=at - int(time.time() * 1000)))
            due[body] = at
        wait_for(lambda: len(arrivals.bodies()) >= len(due), 15, "every timer delivered")
        time.sleep(0.3)
        assert sorted(arrivals.bodies()) == sorted(due)
        for _arrived_at, m in arrivals.got:
            assert m.store_timestamp >= due[m.body.decode()] - 5, "delivered before its time"
        # In due order, by the time each was stored again (one broker clock). Messages due in the same delivery
        # round (a wake-up that comes a few ms late takes every entry due by then) go to their queues in
        # parallel requests, so only those may trade places.
        by_store = [m.body.decode() for m in sorted((m for _, m in arrivals.got), key=lambda m: m.store_timestamp)]
        dues = [due[b] for b in by_store]
        stored_before_due = [max(dues[:k]) - dues[k] for k in range(1, len(dues))]
        assert max(stored_before_due) <= SAME_ROUND_MS, dues
    finally:
        consumer.shutdown()


def test_timer_beyond_horizon_is_refused_and_past_time_is_immediate(namesrv, start_broker: StartBroker,
                                                                    start_scheduler: StartScheduler) -> None:
    start_broker(namesrv.addr, timerMaxDelaySec=60, **BROKER_ARGS)
    with Admin(namesrv.addr) as admin, Producer("timer-p", namesrv.addr) as producer:
        admin.create_topic("TimerH", read_queue_nums=1, write_queue_nums=1)
        admin.wait_topic_route("TimerH")
        with pytest.raises(MQBrokerError) as err:
            producer.send(Message("TimerH", "late", delay_ms=120_000))
        assert err.value.response_code == ResponseCode.MESSAGE_ILLEGAL
        assert "timerMaxDelaySec" in str(err.value)
        with pytest.raises(MQBrokerError):
            producer.send(Message("TimerH", "both", delay_ms=1000, delay_level=1))
        # A delivery time already past is an ordinary message: readable at once, no scheduler needed.
        producer.send(Message("TimerH", "past", deliver_at_ms=int(time.time() * 1000) - 1000))
        consumer, arrivals = consume(namesrv.addr, "TimerH", "c-horizon")
        try:
            wait_for(lambda: arrivals.bodies() == ["past"], 10, "past-due timer readable at once")
        finally:
            consumer.shutdown()


def test_two_replicas_split_the_queues_and_a_killed_one_hands_over(namesrv, broker, admin, producer,
                                                                    start_scheduler: StartScheduler) -> None:
    admin.create_topic("DelayHA", read_queue_nums=2, write_queue_nums=2)
    admin.wait_topic_route("DelayHA")
    a = start_scheduler(namesrv.addr, name="sched-a", **FAST_SCHEDULER)
    b = start_scheduler(namesrv.addr, name="sched-b", **FAST_SCHEDULER)

    def levels(replica: SchedulerProcess) -> set[int]:
        return {int(q.rpartition(":")[2]) for q in status(replica)["queues"] if q.startswith("SCHEDULE_TOPIC_XXXX")}

    def split() -> bool:
        la, lb = levels(a), levels(b)
        return la | lb == {0, 1, 2} and not la & lb
    wait_for(split, 15, "two replicas sharing the three level queues")
    # Round the replicas: levels 1 and 2 (queues 0 and 1), the busiest, go to different ones.
    assert sorted([sorted(levels(a)), sorted(levels(b))]) == [[0, 2], [1]]

    consumer, arrivals = consume(namesrv.addr, "DelayHA", "c-ha")
    try:
        sent = []
        for i in range(90):
            body = f"m{i}"
            producer.send(Message("DelayHA", body, delay_level=1 + i % 3))
            sent.append(body)
            if i == 40:
                a.kill()
            time.sleep(0.02)
        wait_for(lambda: set(arrivals.bodies()) >= set(sent), 30, "every message delivered after the hand-over")
        time.sleep(1.0)
        got = arrivals.bodies()
        assert sorted(got) == sorted(sent), "lost or duplicated across the hand-over"
        survivor = status(b)
        assert {q for q in survivor["queues"] if q.startswith("SCHEDULE_TOPIC_XXXX")} == {
            f"SCHEDULE_TOPIC_XXXX@broker-a:{i}" for i in range(3)}
        assert survivor["pending"] == 0
    finally:
        consumer.shutdown()


def test_restarted_scheduler_resumes_without_copies(namesrv, broker, admin, producer,
                                                    start_scheduler: StartScheduler) -> None:
    admin.create_topic("DelayRe", read_queue_nums=1, write_queue_nums=1)
    admin.wait_topic_route("DelayRe")
    first = start_scheduler(namesrv.addr, name="sched-1", **FAST_SCHEDULER)
    consumer, arrivals = consume(namesrv.addr, "DelayRe", "c-re")
    try:
        for i in range(20):
            producer.send(Message("DelayRe", f"r{i}", delay_level=1))
        wait_for(lambda: len(arrivals.bodies()) == 20, 10, "first twenty delivered")
        first.kill()  # before it committed its last progress, most likely
        for i in range(20, 30):
            producer.send(Message("DelayRe", f"r{i}", delay_level=2))
        start_scheduler(namesrv.addr, name="sched-2", **FAST_SCHEDULER)
        wait_for(lambda: len(arrivals.bodies()) >= 30, 20, "the rest delivered by the new replica")
        time.sleep(1.5)
        assert sorted(arrivals.bodies()) == sorted(f"r{i}" for i in range(30))
    finally:
        consumer.shutdown()


def test_a_far_timer_is_rolled_so_progress_moves_past_it(namesrv, broker, admin, producer,
                                                          start_scheduler: StartScheduler) -> None:
    admin.create_topic("TimerRoll", read_queue_nums=1, write_queue_nums=1)
    admin.wait_topic_route("TimerRoll")
    sched = start_scheduler(namesrv.addr, timerRollWindowMs=500, **FAST_SCHEDULER)
    consumer, arrivals = consume(namesrv.addr, "TimerRoll", "c-roll")
    try:
        due = int(time.time() * 1000) + 3000
        producer.send(Message("TimerRoll", "far", deliver_at_ms=due))
        timer_queue = "rmq_sys_wheel_timer@broker-a:0"
        # Before it is due, the timer queue's progress has moved past the first copy.
        wait_for(lambda: status(sched)["rolled"] >= 2 and status(sched)["queues"][timer_queue]["committedOffset"] >= 1,
                 5, "the far timer rolled forward")
        assert arrivals.bodies() == []
        wait_for(lambda: arrivals.bodies(), 10, "the rolled timer delivered")
        time.sleep(0.5)
        assert arrivals.bodies() == ["far"]
        m = arrivals.got[0][1]
        assert m.store_timestamp >= due
    finally:
        consumer.shutdown()


def test_a_restarted_broker_still_knows_what_it_delivered(namesrv, start_broker: StartBroker,
                                                          start_scheduler: StartScheduler) -> None:
    broker = start_broker(namesrv.addr, **BROKER_ARGS)
    topic = "DelayRestart"
    with Admin(namesrv.addr) as admin, Producer("restart-p", namesrv.addr) as producer:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        admin.wait_topic_route(topic)
        real_queue = MessageQueue(topic, "broker-a", 0)
        first = start_scheduler(namesrv.addr, name="sched-before", persistOffsetIntervalMs=600_000,
                                **FAST_SCHEDULER)
        for i in range(10):
            producer.send(Message(topic, f"d{i}", delay_level=1))
        wait_for(lambda: admin.max_offset(real_queue) == 10, 10, "ten delivered")
        first.kill()  # its progress since its last pull is lost with it
        stats = admin.consume_stats("CID_RMQ_SYS_SCHEDULE", SCHEDULE_TOPIC).offset_table
        committed = stats[MessageQueue(SCHEDULE_TOPIC, "broker-a", 0)].consumer_offset
        assert committed < 10, "the scheduler's progress got committed; nothing would be read twice"
    broker.stop()
    broker.start(timeout_s=30)
    broker.wait_registered()
    with Admin(namesrv.addr) as admin:
        start_scheduler(namesrv.addr, name="sched-after", **FAST_SCHEDULER)
        # The new replica reads the level queue again from the old progress; the broker re-puts nothing.
        wait_for(lambda: admin.consume_stats("CID_RMQ_SYS_SCHEDULE", SCHEDULE_TOPIC)
                 .offset_table[MessageQueue(SCHEDULE_TOPIC, "broker-a", 0)].consumer_offset == 10,
                 15, "the new replica's progress past the ten")
        assert admin.max_offset(real_queue) == 10
