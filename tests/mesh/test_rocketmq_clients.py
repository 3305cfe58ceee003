"""RocketMQ's own C++ client (PyPI ``rocketmq`` 0.4.4, the C++ client 1.x behind ctypes) against a real name
server, broker and scheduler through their TCP doors, beside rocketmesh's SDK on the ZeroMQ door: its
producer's sync, oneway, ordered (queue selector) and batch sends with tags, keys, user properties, delay
levels and bodies it compresses; its push consumer clustering, broadcasting, orderly (beside an SDK orderly
consumer of the same group) and filtering by tags, and its pull consumer. A message crossing between the two
clients keeps its id (UNIQ_KEY), keys, tags, user properties and reconsume count; its delay level parks it
at that level and it arrives no earlier than the level's delay (the delivered copy drops DELAY, as in
RocketMQ); a message the C++ consumer refuses comes back through %RETRY%, then goes to %DLQ%; an admin's
offset reset reaches a running C++ consumer; a client that shuts down unregisters.

The clients run in subprocesses (tests/rmqclients.py, tests/rocketmq_drivers/cpp_044.py), in a venv of their
own, cached; when a test fails its output shows each client's log tail (the broker's remark of a request
it refused) and the broker's. One mesh serves the module; each test has topics and groups of its own.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clientkit import FAST_CLIENT, make_topic
from procs import FAST_SCHEDULER, BrokerProcess, NamesrvProcess, SchedulerProcess, wait_for
from rmqclients import CPP_044, ClientRuns, InstalledClient, require
from rocketmesh import Admin, Message, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, PullConsumer, PushConsumer
from rocketmesh.model.message import MessageExt
from rocketmesh.model.topics import SCHEDULE_TOPIC

#: Real clients and real services, tens of seconds: scheduled first (tests/conftest.py).
pytestmark = pytest.mark.heavy

#: Level 1 is RocketMQ's 1 s (the delay test); a consumer's first retry (level 3) comes after 2 s, time for
#: the test to hand the group over to another client before it is delivered.
LEVELS = "1s 1s 2s 2s 2s"
#: Default client expiry (120 s): the C++ client heartbeats every 30 s, and a closed connection is noticed at once.
BROKER_ARGS: dict[str, Any] = dict(messageDelayLevel=LEVELS)
SCHEDULER_ARGS: dict[str, Any] = dict(FAST_SCHEDULER)
FAST_CONSUMER = dict(FAST_CLIENT, rebalance_interval_ms=1000, consume_from="CONSUME_FROM_FIRST_OFFSET")
USER_PROPS = ["color", "n"]
#: 9,600 bytes of text (the C++ client's bodies end at a NUL): over the 4 KiB RocketMQ's producers compress from.
BIG_BODY = "".join(f"rocketmq-{i:05d};" for i in range(640))
_names = itertools.count()


@dataclass
class Mesh:
    namesrv: NamesrvProcess
    broker: BrokerProcess
    scheduler: SchedulerProcess
    admin: Admin

    @property
    def door(self) -> str:
        """The name server address a RocketMQ client is given."""
        assert self.namesrv.door_addr is not None
        return self.namesrv.door_addr

    def topic(self, stem: str, queues: int = 4) -> str:
        """A new topic of this test, routed on both doors."""
        name = f"{stem}-{next(_names)}"
        make_topic(self.admin, name, queues)
        return name


@pytest.fixture(scope="module")
def client() -> InstalledClient:
    return require(CPP_044)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory, client: InstalledClient) -> Iterator[Mesh]:
    root = tmp_path_factory.mktemp("mesh")
    namesrv = NamesrvProcess(root / "namesrv", door=True)
    broker = BrokerProcess(root / "broker-a", namesrv.addr, door=True, **BROKER_ARGS)
    scheduler = SchedulerProcess(root / "scheduler", namesrv.addr, name="scheduler0", **SCHEDULER_ARGS)
    try:
        namesrv.start()
        broker.start(timeout_s=30)
        broker.wait_registered()
        scheduler.start(timeout_s=30)
        with Admin(namesrv.addr) as admin:
            yield Mesh(namesrv, broker, scheduler, admin)
    finally:
        for proc in (scheduler, broker, namesrv):
            proc.stop()


@pytest.fixture
def cpp(mesh: Mesh, client: InstalledClient, tmp_path: Path) -> Iterator[ClientRuns]:
    """The C++ client runs of a test; at its end they stop and their reports (and the broker's output) are
    printed, which pytest shows for a failed test."""
    runs = ClientRuns(client, tmp_path, mesh.door, [mesh.broker])
    yield runs
    runs.stop_all()


# --- helpers -----------------------------------------------------------------------------------------------


def spec(topic: str, body: str, **fields: Any) -> dict[str, Any]:
    """A message for the C++ driver (see driverkit.build_message)."""
    return {"topic": topic, "body": body, **fields}


def sdk_poll(mesh: Mesh, topic: str, count: int, timeout_s: float = 20.0) -> list[MessageExt]:
    """What a new group of the SDK's PullConsumer reads of ``topic`` until it has ``count`` messages."""
    got: list[MessageExt] = []
    with PullConsumer(f"sdk-pull-{topic}", mesh.namesrv.addr, **FAST_CLIENT) as consumer:
        consumer.subscribe(topic)
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            got += consumer.poll(500)
    assert len(got) >= count, f"the SDK read {len(got)} of {count} messages of {topic}"
    return got


class Received:
    """An SDK push consumer's listener: every delivery with its arrival time; ``decide(msg)`` answers
    (success by default: ``orderly`` says which listener's success)."""

    def __init__(self, decide: Callable[[MessageExt], object] | None = None, orderly: bool = False) -> None:
        self.decide = decide
        self.success: object = ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        self.lock = threading.Lock()
        self.got: list[tuple[int, MessageExt]] = []

    def __call__(self, msgs: list[MessageExt]) -> object:
        answer = self.success
        for m in msgs:
            with self.lock:
                self.got.append((int(time.time() * 1000), m))
            if self.decide is not None:
                answer = self.decide(m)
        return answer

    def messages(self) -> list[MessageExt]:
        with self.lock:
            return [m for _, m in self.got]


def sdk_push(mesh: Mesh, group: str, topic: str, listener: Received) -> PushConsumer:
    consumer = PushConsumer(group, mesh.namesrv.addr, instance_name=f"sdk-{group}", **FAST_CONSUMER)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    return consumer.start()


def user_props(msg: MessageExt) -> dict[str, str | None]:
    return {name: msg.get_property(name) for name in USER_PROPS}


def by_keys(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["keys"]: e for e in events}


def wait_consumers(mesh: Mesh, group: str, count: int, timeout_s: float = 20.0) -> None:
    """Until the broker knows ``count`` clients of ``group`` (their heartbeats came through)."""
    wait_for(lambda: len(mesh.admin.consumer_ids(group)) >= count, timeout_s, f"{count} consumers of {group}")


# --- the producer -------------------------------------------------------------------------------------------


def test_sync_sends_keep_id_keys_tags_and_properties_for_the_sdk(mesh, cpp):
    topic = mesh.topic("CppSync")
    sends = [{"mode": "sync", "message": spec(topic, f"sync-{i}", tags="TagA", keys=f"k{i}",
                                                props={"color": "blue", "n": str(i)})} for i in range(5)]
    sent = cpp.start("producer", group=f"pg-{topic}", sends=sends).sent()
    assert [e["status"] for e in sent] == [0] * 5  # SEND_OK
    got = {m.keys: m for m in sdk_poll(mesh, topic, 5)}
    assert sorted(got) == [f"k{i}" for i in range(5)]
    for i, result in enumerate(sent):
        msg = got[f"k{i}"]
        assert (msg.unique_key, msg.tags, msg.body, user_props(msg)) == (
            result["msg_id"], "TagA", f"sync-{i}".encode(), {"color": "blue", "n": str(i)})
        assert msg.queue_offset == result["offset"]
        assert (msg.reconsume_times, msg.delay_level) == (0, 0)
    # The broker's index has the C++ client's keys.
    assert [m.body for m in mesh.admin.query_msg_by_key(topic, "k3")] == [b"sync-3"]


def test_oneway_sends_arrive(mesh, cpp):
    topic = mesh.topic("CppOneway")
    sends = [{"mode": "oneway", "message": spec(topic, f"oneway-{i}", keys=f"o{i}")} for i in range(5)]
    cpp.start("producer", group=f"pg-{topic}", sends=sends).sent()
    assert sorted(m.body.decode() for m in sdk_poll(mesh, topic, 5)) == [f"oneway-{i}" for i in range(5)]


def test_orderly_sends_put_one_selector_arg_in_one_queue_in_order(mesh, cpp):
    topic = mesh.topic("CppOrderly")
    # The selector is the library's hashing one: queue = arg % queues.
    sends = [{"mode": "orderly", "arg": i % 3, "message": spec(topic, f"{i % 3}:{i // 3}", keys=f"ord{i}")}
             for i in range(15)]
    sent = cpp.start("producer", group=f"pg-{topic}", sends=sends).sent()
    assert len(sent) == 15
    per_arg: dict[int, list[MessageExt]] = collections.defaultdict(list)
    for msg in sdk_poll(mesh, topic, 15):
        per_arg[int(msg.body.decode().split(":")[0])].append(msg)
    for arg, msgs in per_arg.items():
        assert {m.queue_id for m in msgs} == {arg}, f"arg {arg} spread over queues"
        msgs.sort(key=lambda m: m.queue_offset)
        assert [m.body.decode() for m in msgs] == [f"{arg}:{seq}" for seq in range(5)]


def test_batch_send_stores_each_message_with_its_keys_and_properties(mesh, cpp):
    topic = mesh.topic("CppBatch")
    batch = [spec(topic, f"batch-{i}", tags="TagB", keys=f"b{i}", props={"color": "red", "n": str(i)})
             for i in range(5)]
    sent = cpp.start("producer", group=f"pg-{topic}", sends=[{"mode": "batch", "messages": batch}]).sent()
    assert sent[0]["status"] == 0
    got = {m.keys: m for m in sdk_poll(mesh, topic, 5)}
    assert sorted(got) == [f"b{i}" for i in range(5)]
    for i in range(5):
        msg = got[f"b{i}"]
        assert (msg.tags, msg.body, user_props(msg)) == ("TagB", f"batch-{i}".encode(), {"color": "red", "n": str(i)})
        assert msg.unique_key, "a batch member has its own UNIQ_KEY"
    assert len({m.unique_key for m in got.values()}) == 5


def test_delay_level_is_delivered_by_the_scheduler_no_earlier_than_its_delay(mesh, cpp):
    topic = mesh.topic("CppDelay")
    listener = Received()
    consumer = sdk_push(mesh, f"sdk-{topic}", topic, listener)
    try:
        sent = cpp.start("producer", group=f"pg-{topic}",
                         sends=[{"mode": "sync", "message": spec(topic, "later", keys="d1", delay=1)}]).sent()
        wait_for(lambda: listener.messages(), 15, "the delayed message")
        arrived, msg = listener.got[0]
    finally:
        consumer.shutdown()
    assert arrived - sent[0]["t_ms"] >= 1000, "level 1 is 1 s"
    assert (msg.unique_key, msg.keys, msg.topic) == (sent[0]["msg_id"], "d1", topic)
    assert msg.get_property("DELAY") is None  # as RocketMQ's scheduler, the delivered copy drops it
    # The copy the broker parked for the scheduler carries the C++ client's level and the real topic.
    parked = mesh.admin.query_msg_by_unique_key(SCHEDULE_TOPIC, sent[0]["msg_id"])
    assert (parked.delay_level, parked.get_property("REAL_TOPIC"), parked.keys) == (1, topic, "d1")


def test_a_body_the_cpp_client_compresses_reaches_the_sdk_as_sent(mesh, cpp):
    topic = mesh.topic("CppZip")
    body = BIG_BODY  # over the C++ producer's compressMsgBodyOverHowmuch (4 KiB): it deflates it
    sent = cpp.start("producer", group=f"pg-{topic}",
                     sends=[{"mode": "sync", "message": spec(topic, body, keys="z1")}]).sent()
    (msg,) = sdk_poll(mesh, topic, 1)
    assert msg.store_size < len(body), "stored compressed"
    assert (msg.unique_key, len(msg.body), msg.body) == (sent[0]["msg_id"], len(body), body.encode())


# --- the consumers ------------------------------------------------------------------------------------------


def test_sdk_messages_reach_a_cpp_push_consumer_with_id_keys_tags_properties_and_delay(mesh, cpp):
    topic = mesh.topic("SdkToCpp")
    results = {}
    with Producer(f"sdk-pg-{topic}", mesh.namesrv.addr) as producer:
        for i in range(4):
            msg = Message(topic, f"sdk-{i}", tags="TagS", keys=f"s{i}")
            msg.put_user_property("color", "green")
            msg.put_user_property("n", str(i))
            if i == 3:
                msg.delay_level = 1
                delayed_at = int(time.time() * 1000)
            results[f"s{i}"] = producer.send(msg)
    run = cpp.start("push", group=f"cg-{topic}", topic=topic, props=USER_PROPS)
    got = by_keys(run.wait_for("msg", 4))
    assert sorted(got) == sorted(results)
    for key, result in results.items():
        e = got[key]
        assert (e["id"], e["tags"], e["body"], e["props"]["color"], e["props"]["n"]) == (
            result.msg_id, "TagS", f"sdk-{key[1:]}", "green", key[1:])
        assert (e["reconsume_times"], e["delay_time_level"]) == (0, 0)  # the scheduler's copy drops DELAY
    assert got["s3"]["t_ms"] - delayed_at >= 1000, "level 1 is 1 s"


def test_a_large_sdk_body_is_compressed_as_rocketmq_does_and_the_cpp_consumer_inflates_it(mesh, cpp):
    topic = mesh.topic("SdkZip")
    with Producer(f"sdk-pg-{topic}", mesh.namesrv.addr) as producer:
        result = producer.send(Message(topic, BIG_BODY, keys="z2"))
    run = cpp.start("push", group=f"cg-{topic}", topic=topic)
    (e,) = run.wait_for("msg", 1)
    assert (e["id"], len(e["body"]), e["body"]) == (result.msg_id, len(BIG_BODY), BIG_BODY)
    (stored,) = mesh.admin.query_msg_by_key(topic, "z2")
    assert stored.store_size < len(BIG_BODY), "over 4 KiB, the SDK's producer deflates the body as RocketMQ's"


def test_a_cpp_consumer_gets_only_the_tags_it_subscribed(mesh, cpp):
    topic = mesh.topic("CppTags")
    with Producer(f"sdk-pg-{topic}", mesh.namesrv.addr) as producer:
        for i in range(9):
            producer.send(Message(topic, f"t{i}", tags="ABC"[i % 3], keys=f"t{i}"))
    # The C++ client's heartbeat sends the expression with no tag hashes: the broker computes them.
    run = cpp.start("push", group=f"cg-{topic}", topic=topic, expression="A || C")
    run.wait_for("msg", 6)
    time.sleep(1)  # nothing else comes
    assert sorted((e["tags"], e["body"]) for e in run.messages) == sorted(
        ("ABC"[i % 3], f"t{i}") for i in range(9) if i % 3 != 1)


def test_cpp_push_consumers_of_one_group_share_the_queues(mesh, cpp):
    topic = mesh.topic("CppCluster")
    group = f"cg-{topic}"
    runs = [cpp.start("push", name=f"member{i}", group=group, topic=topic, instance=f"member{i}")
            for i in range(2)]
    for run in runs:
        run.wait_started()
    wait_consumers(mesh, group, 2)
    time.sleep(2)  # the first member gives up the queues the second one took
    with Producer(f"sdk-pg-{topic}", mesh.namesrv.addr) as producer:
        for i in range(40):
            producer.send(Message(topic, f"c{i}", keys=f"c{i}"))
    wait_for(lambda: {e["keys"] for r in runs for e in r.messages} == {f"c{i}" for i in range(40)}, 20,
             "all 40 messages consumed by the group")
    queues = [{e["queue_id"] for e in run.messages} for run in runs]
    assert all(queues), f"each member consumed some queues: {queues}"
    assert not queues[0] & queues[1], f"no queue consumed by both: {queues}"


def test_cpp_broadcasting_consumers_each_get_everything(mesh, cpp):
    topic = mesh.topic("CppBroadcast")
    group = f"cg-{topic}"
    runs = [cpp.start("push", name=f"listener{i}", group=group, topic=topic, model="broadcasting",
                      instance=f"listener{i}") for i in range(2)]
    for run in runs:
        run.wait_started()
    wait_consumers(mesh, group, 2)
    with Producer(f"sdk-pg-{topic}", mesh.namesrv.addr) as producer:
        for i in range(20):
            producer.send(Message(topic, f"b{i}", keys=f"b{i}"))
    for run in runs:
        run.wait(lambda r: {e["keys"] for e in r.messages} >= {f"b{i}" for i in range(20)}, 20,
                 "all 20 messages")


def test_cpp_orderly_consumer_gets_each_queue_in_order(mesh, cpp):
    topic = mesh.topic("CppOrderlyPush")
    sends = [{"mode": "orderly", "arg": i % 4, "message": spec(topic, f"{i % 4}:{i // 4}", keys=f"q{i}")}
             for i in range(24)]
    cpp.start("producer", name="producer", group=f"pg-{topic}", sends=sends).sent()
    run = cpp.start("push", name="orderly", group=f"cg-{topic}", topic=topic, orderly=True)
    run.wait_for("msg", 24)
    per_queue: dict[int, list[str]] = collections.defaultdict(list)
    for e in run.messages:
        per_queue[e["queue_id"]].append(e["body"])
    assert per_queue == {q: [f"{q}:{seq}" for seq in range(6)] for q in range(4)}


def test_cpp_and_sdk_orderly_consumers_of_one_group_each_hold_their_queues_in_order(mesh, cpp):
    """The C++ client's queue locks (LOCK_BATCH_MQ) and the SDK's are one table: each queue is consumed by
    one member of the group, in order."""
    topic = mesh.topic("MixedOrderly")
    group = f"cg-{topic}"
    run = cpp.start("push", name="cpp-orderly", group=group, topic=topic, orderly=True, instance="cpp-orderly")
    run.wait_started()
    wait_consumers(mesh, group, 1)
    listener = Received(orderly=True)
    consumer = PushConsumer(group, mesh.namesrv.addr, instance_name="sdk-orderly", **FAST_CONSUMER)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener, orderly=True)
    consumer.start()
    try:
        wait_consumers(mesh, group, 2)
        time.sleep(2)  # the C++ member unlocks the queues it gives up; the SDK member locks them
        sends = [{"mode": "orderly", "arg": i % 4, "message": spec(topic, f"{i % 4}:{i // 4}", keys=f"m{i}")}
                 for i in range(24)]
        cpp.start("producer", name="producer", group=f"pg-{topic}", sends=sends).sent()
        wait_for(lambda: len(run.messages) + len(listener.messages()) >= 24, 20, "24 messages consumed")
        time.sleep(1)  # nothing else comes
    finally:
        consumer.shutdown()
    cpp_queues: dict[int, list[str]] = collections.defaultdict(list)
    for e in run.messages:
        cpp_queues[e["queue_id"]].append(e["body"])
    sdk_queues: dict[int, list[str]] = collections.defaultdict(list)
    for m in listener.messages():
        sdk_queues[m.queue_id].append(m.body.decode())
    assert cpp_queues and sdk_queues, f"both members consumed: C++ {dict(cpp_queues)}, SDK {dict(sdk_queues)}"
    assert not cpp_queues.keys() & sdk_queues.keys(), "no queue consumed by both"
    assert {**cpp_queues, **sdk_queues} == {q: [f"{q}:{seq}" for seq in range(6)] for q in range(4)}


def test_cpp_pull_consumer_reads_what_the_sdk_sent(mesh, cpp):
    topic = mesh.topic("CppPull")
    results = {}
    with Producer(f"sdk-pg-{topic}", mesh.namesrv.addr) as producer:
        for i in range(10):
            msg = Message(topic, f"pull-{i}", tags="TagP", keys=f"p{i}")
            msg.put_user_property("color", "amber")
            results[f"p{i}"] = producer.send(msg)
    run = cpp.start("pull", group=f"cg-{topic}", topic=topic, expect=10, props=USER_PROPS)
    run.wait_for("done")
    got = by_keys(run.messages)
    assert sorted(got) == sorted(results)
    for key, result in results.items():
        assert (got[key]["id"], got[key]["tags"], got[key]["body"], got[key]["props"]["color"]) == (
            result.msg_id, "TagP", f"pull-{key[1:]}", "amber")


def test_an_admin_offset_reset_reaches_a_running_cpp_consumer(mesh, cpp):
    """RESET_CONSUMER_CLIENT_OFFSET, which the broker sends over the C++ client's own connection: the running
    consumer goes back to the time asked and consumes again."""
    topic = mesh.topic("CppReset")
    group = f"cg-{topic}"
    start = int(time.time() * 1000) - 1000
    with Producer(f"sdk-pg-{topic}", mesh.namesrv.addr) as producer:
        for i in range(5):
            producer.send(Message(topic, f"again-{i}", keys=f"a{i}"))
        run = cpp.start("push", group=group, topic=topic)
        run.wait_for("msg", 5)
        mesh.admin.reset_offset_by_time(group, topic, start)
        # The client takes a queue back at its new offset once the pull it has out returns: a message on
        # each queue answers the pulls the broker holds (else they last the client's long-poll timeout).
        for mq in producer.message_queues(topic):
            producer.send(Message(topic, f"wake-{mq.queue_id}"), queue=mq)
        run.wait(lambda r: sum(e["body"].startswith("again-") for e in r.messages) >= 10, 20,
                 "the 5 messages consumed again")
    again = collections.Counter(e["body"] for e in run.messages if e["body"].startswith("again-"))
    assert again == {f"again-{i}": 2 for i in range(5)}


# --- retries, both ways ---------------------------------------------------------------------------------------


def test_a_message_the_cpp_consumer_refuses_comes_back_through_retry_then_goes_to_the_dlq(mesh, cpp):
    topic = mesh.topic("CppRetry")
    group = f"cg-{topic}"
    # The C++ client sends no maxReconsumeTimes: the group's retryMaxTimes decides.
    mesh.admin.update_subscription_group(group, retry_max_times=1)
    sent = cpp.start("producer", name="producer", group=f"pg-{topic}",
                     sends=[{"mode": "sync", "message": spec(topic, "again", keys="r1", tags="TagR")}]).sent()
    run = cpp.start("push", name="refuser", group=group, topic=topic, fail={"r1": 99})
    first, second = run.wait_for("msg", 2)
    assert (first["answer"], second["answer"]) == ("RECONSUME_LATER", "RECONSUME_LATER")
    assert (first["reconsume_times"], second["reconsume_times"]) == (0, 1)
    assert second["id"] == first["id"] == sent[0]["msg_id"]
    assert (second["topic"], second["keys"], second["tags"], second["body"]) == (topic, "r1", "TagR", "again")
    dead = wait_for(lambda: mesh.admin.dlq_messages(group), 15, f"the message in %DLQ%{group}")
    assert [(d.msg_id, d.original_topic, d.message.keys) for d in dead] == [(sent[0]["msg_id"], topic, "r1")]
    assert len(run.messages) == 2, "a dead letter is not delivered again"


def test_a_retry_count_crosses_from_a_cpp_consumer_to_the_sdk(mesh, cpp):
    """The C++ consumer refuses a message and leaves its group; the SDK's consumer of the same group gets
    the retry with the C++ client's reconsume count and the message's own id."""
    topic = mesh.topic("CppToSdkRetry")
    group = f"cg-{topic}"
    sent = cpp.start("producer", name="producer", group=f"pg-{topic}",
                     sends=[{"mode": "sync", "message": spec(topic, "x", keys="x1", props={"color": "cyan"})}]
                     ).sent()
    run = cpp.start("push", name="refuser", group=group, topic=topic, fail={"x1": 99})
    run.wait_for("msg", 1)
    time.sleep(0.5)  # its send-back reaches the broker (the retry is due 2 s after)
    run.stop()
    listener = Received()
    consumer = sdk_push(mesh, group, topic, listener)
    try:
        wait_for(lambda: any(m.reconsume_times for m in listener.messages()), 20, "the retry at the SDK")
    finally:
        consumer.shutdown()
    retry = next(m for m in listener.messages() if m.reconsume_times)
    assert (retry.reconsume_times, retry.unique_key, retry.topic, retry.keys, retry.get_property("color")) == (
        1, sent[0]["msg_id"], topic, "x1", "cyan")


def test_a_retry_count_crosses_from_the_sdk_to_a_cpp_consumer(mesh, cpp):
    topic = mesh.topic("SdkToCppRetry")
    group = f"cg-{topic}"
    with Producer(f"sdk-pg-{topic}", mesh.namesrv.addr) as producer:
        msg = Message(topic, "y", keys="y1")
        msg.put_user_property("color", "plum")
        result = producer.send(msg)
    listener = Received(decide=lambda m: ConsumeConcurrentlyStatus.RECONSUME_LATER)
    consumer = sdk_push(mesh, group, topic, listener)
    try:
        wait_for(lambda: listener.messages(), 15, "the first delivery at the SDK")
    finally:
        consumer.shutdown()  # its send-back done, its offsets persisted, the group left
    run = cpp.start("push", name="taker", group=group, topic=topic, props=USER_PROPS)
    run.wait(lambda r: any(e["reconsume_times"] for e in r.messages), 20, "the retry at the C++ client")
    e = next(e for e in run.messages if e["reconsume_times"])
    assert (e["reconsume_times"], e["id"], e["topic"], e["keys"], e["props"]["color"]) == (
        1, result.msg_id, topic, "y1", "plum")


# --- leaving ---------------------------------------------------------------------------------------------------


def test_cpp_clients_that_shut_down_unregister_from_the_broker(mesh, cpp):
    topic = mesh.topic("CppLeave")
    group = f"cg-{topic}"
    producer = cpp.start("producer", name="producer", group=f"pg-{topic}",
                         sends=[{"mode": "sync", "message": spec(topic, "bye", keys="l1")}])
    producer.sent()
    consumer = cpp.start("push", name="consumer", group=group, topic=topic)
    consumer.wait_for("msg")
    for run in (producer, consumer):
        run.stop()
        asked = run.log_lines("unregisterClient")
        assert asked and not run.log_lines("unregisterClient fail"), f"{run.name}: UNREGISTER_CLIENT refused: {asked}"
    wait_for(lambda: not mesh.admin.consumer_ids(group), 5, f"{group} empty")


def test_an_admin_reads_a_running_cpp_consumers_state_through_the_broker(mesh, cpp):
    """GET_CONSUMER_RUNNING_INFO: the broker asks the C++ consumer over its own TCP connection."""
    topic = mesh.topic("CppRunning")
    group = f"cg-{topic}"
    cpp.start("push", group=group, topic=topic, expression="TagA").wait_started()
    wait_consumers(mesh, group, 1)
    (client_id,) = mesh.admin.consumer_ids(group)
    info = mesh.admin.consumer_running_info(group, client_id)
    assert [(s.topic, s.sub_string) for s in info.subscriptions if s.topic == topic] == [(topic, "TagA")]
    assert info.consume_type == "CONSUME_PASSIVELY"
