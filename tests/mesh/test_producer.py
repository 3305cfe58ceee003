"""Producer against real name server and broker processes (black box).

What a send did is checked through the broker's own answers: Admin's
topic_status and offset look-ups, and messages read back by id and key.
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Callable, Iterator

import pytest

from clientkit import make_topic
from procs import BrokerProcess, freeze, thaw, wait_for
from rocketmesh import (
    Admin,
    Message,
    MQBrokerError,
    MQClientError,
    Producer,
    PullConsumer,
    RequestTimeoutError,
    SendStatus,
)
from rocketmesh.client import ClientErrorCode, ResponseCode, SelectMessageQueueByHash
from rocketmesh.model.message import MessageQueue

StartBroker = Callable[..., BrokerProcess]


@pytest.fixture
def admin(namesrv) -> Iterator[Admin]:
    with Admin(namesrv.addr) as a:
        yield a


@pytest.fixture
def producer(namesrv) -> Iterator[Producer]:
    with Producer("test-producer", namesrv.addr) as p:
        yield p


def max_offsets(admin: Admin, topic: str) -> dict[MessageQueue, int]:
    return {mq: off.max_offset for mq, off in admin.topic_status(topic).items()}


def wait_max_offsets(admin: Admin, topic: str, expected: Callable[[dict[MessageQueue, int]], bool],
                     timeout_s: float = 10.0) -> dict[MessageQueue, int]:
    """The queues' max offsets once ``expected`` holds."""
    seen: dict[MessageQueue, int] = {}

    def check() -> bool:
        seen.clear()
        seen.update(max_offsets(admin, topic))
        return expected(seen)

    try:
        wait_for(check, timeout_s, what="max offsets")
    except AssertionError:
        raise AssertionError(f"max offsets of {topic} still {seen}") from None
    return seen


def assert_consecutive(results) -> collections.Counter:
    """Per queue, the offsets handed out are 0..n-1, each once."""
    by_queue: dict[MessageQueue, list[int]] = collections.defaultdict(list)
    for r in results:
        by_queue[r.message_queue].append(r.queue_offset)
    for mq, offsets in by_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), mq
    return collections.Counter({mq: len(v) for mq, v in by_queue.items()})


def test_sync_sends_land_in_queues_with_offsets(start_broker: StartBroker, namesrv, admin: Admin,
                                                producer: Producer) -> None:
    start_broker(namesrv.addr)
    make_topic(admin, "SyncT")
    results = [producer.send(Message("SyncT", f"m{i}".encode(), keys=f"k{i}")) for i in range(40)]
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    counts = assert_consecutive(results)
    assert set(counts.values()) == {10}  # round robin over the 4 queues
    assert wait_max_offsets(admin, "SyncT", lambda m: sum(m.values()) == 40) == {mq: 10 for mq in counts}
    for i, r in enumerate(results[:8]):
        stored = admin.view_message(r.offset_msg_id)
        assert stored.body == f"m{i}".encode() and stored.topic == "SyncT"
        assert stored.queue_id == r.message_queue.queue_id and stored.queue_offset == r.queue_offset
        assert stored.unique_key == r.msg_id and stored.keys == f"k{i}"


def test_async_sends(start_broker: StartBroker, namesrv, admin: Admin, producer: Producer) -> None:
    start_broker(namesrv.addr)
    make_topic(admin, "AsyncT")
    callbacks: list = []
    futures = [producer.send_async(Message("AsyncT", b"a" * 100), callback=callbacks.append) for _ in range(300)]
    results = [f.result(10) for f in futures]
    counts = assert_consecutive(results)
    assert sum(counts.values()) == 300
    stored = wait_max_offsets(admin, "AsyncT", lambda m: sum(m.values()) >= 300)
    # Auto batching may leave a queue without any of them: it is then empty.
    assert {q: n for q, n in stored.items() if n} == dict(counts)
    wait_for(lambda: len(callbacks) == 300, what="all callbacks")
    assert len({r.msg_id for r in results}) == 300


def test_oneway_sends(start_broker: StartBroker, namesrv, admin: Admin, producer: Producer) -> None:
    start_broker(namesrv.addr)
    make_topic(admin, "OnewayT")
    for _ in range(50):
        producer.send_oneway(Message("OnewayT", b"fire and forget"))
    wait_max_offsets(admin, "OnewayT", lambda m: sum(m.values()) == 50)


def test_batch_send_goes_to_one_queue(start_broker: StartBroker, namesrv, admin: Admin, producer: Producer) -> None:
    start_broker(namesrv.addr)
    make_topic(admin, "BatchT")
    producer.send(Message("BatchT", b"first"), queue=MessageQueue("BatchT", "broker-a", 2))
    msgs = [Message("BatchT", f"b{i}".encode(), keys=f"bk{i}") for i in range(32)]
    r = producer.send_batch(msgs, queue=MessageQueue("BatchT", "broker-a", 2))
    assert r.ok and r.queue_offset == 1
    ids = r.offset_msg_id.split(",")
    assert len(ids) == 32 and r.msg_id.split(",") == [m.properties["UNIQ_KEY"] for m in msgs]
    q2 = MessageQueue("BatchT", "broker-a", 2)
    assert wait_max_offsets(admin, "BatchT", lambda m: m[q2] >= 33)[q2] == 33
    stored = [admin.view_message(i) for i in ids]
    assert [m.body for m in stored] == [f"b{i}".encode() for i in range(32)]
    assert [m.queue_offset for m in stored] == list(range(1, 33))
    # Unpinned batches are spread round robin like single sends.
    rs = [producer.send_batch([Message("BatchT", b"x")] * 4) for _ in range(4)]
    assert len({r.message_queue for r in rs}) == 4


def test_async_batches_in_flight_all_land(start_broker: StartBroker, namesrv, admin: Admin,
                                          producer: Producer) -> None:
    start_broker(namesrv.addr)
    make_topic(admin, "BatchA")
    futures = [producer.send_batch_async([Message("BatchA", b"%d-%d" % (b, i)) for i in range(16)])
               for b in range(20)]
    results = [f.result(10) for f in futures]
    assert all(r.ok for r in results)
    assert sum(len(r.offset_msg_id.split(",")) for r in results) == 320
    totals = wait_max_offsets(admin, "BatchA", lambda m: sum(m.values()) >= 320)
    assert sum(totals.values()) == 320
    # Every message of one batch is in one queue, in order.
    first = results[0]
    stored = [admin.view_message(i) for i in first.offset_msg_id.split(",")]
    assert {m.queue_id for m in stored} == {first.message_queue.queue_id}
    assert [m.body for m in stored] == [b"0-%d" % i for i in range(16)]


def test_selector_keeps_order_per_key(start_broker: StartBroker, namesrv, admin: Admin, producer: Producer) -> None:
    start_broker(namesrv.addr)
    make_topic(admin, "OrderT", queues=8)
    sel = SelectMessageQueueByHash()
    sent: dict[str, list] = collections.defaultdict(list)
    for step in range(10):
        for order in ("order-1", "order-2", "order-3"):
            r = producer.send(Message("OrderT", f"{order}:{step}".encode(), keys=order), selector=sel, arg=order)
            sent[order].append(r)
    for order, results in sent.items():
        queues = {r.message_queue for r in results}
        assert len(queues) == 1
        mqs = producer.message_queues("OrderT")
        assert queues == {sel.select(mqs, Message("OrderT", b"."), order)}
        offsets = [r.queue_offset for r in results]
        assert offsets == sorted(offsets)
        stored = [admin.view_message(r.offset_msg_id) for r in results]
        assert [m.body for m in stored] == [f"{order}:{s}".encode() for s in range(10)]


def test_find_by_offset_id_unique_key_and_key(start_broker: StartBroker, namesrv, admin: Admin,
                                              producer: Producer) -> None:
    start_broker(namesrv.addr)
    make_topic(admin, "FindT")
    r = producer.send(Message("FindT", b"find me", tags="TagA", keys=["order-77", "user-5"]))
    others = [producer.send(Message("FindT", b"other", keys="order-78")) for _ in range(3)]
    by_offset = admin.query_msg_by_id(r.offset_msg_id)
    assert by_offset.body == b"find me" and by_offset.tags == "TagA"
    by_unique = wait_for(lambda: _try(lambda: admin.query_msg_by_id(r.msg_id, "FindT")), what="unique key indexed")
    assert by_unique.msg_id == r.offset_msg_id and by_unique.unique_key == r.msg_id
    found = wait_for(lambda: admin.query_msg_by_key("FindT", "order-77"), what="key indexed")
    assert [m.msg_id for m in found] == [r.offset_msg_id]
    assert [m.msg_id for m in wait_for(lambda: admin.query_msg_by_key("FindT", "user-5"))] == [r.offset_msg_id]
    assert len(wait_for(lambda: len(admin.query_msg_by_key("FindT", "order-78")) == 3 and
                        admin.query_msg_by_key("FindT", "order-78"))) == len(others)
    assert admin.query_msg_by_key("FindT", "no-such-key") == []


def _try(fn):
    try:
        return fn()
    except MQClientError:
        return None


def test_topic_auto_created_through_default_topic(start_broker: StartBroker, namesrv, admin: Admin,
                                                  producer: Producer) -> None:
    start_broker(namesrv.addr)
    assert "AutoT" not in admin.topic_list()
    results = [producer.send(Message("AutoT", b"auto")) for _ in range(8)]
    assert all(r.ok for r in results)
    assert {r.message_queue.queue_id for r in results} <= set(range(4))  # capped at default_topic_queue_nums
    route = admin.wait_topic_route("AutoT")
    assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("broker-a", 4)]
    assert sum(wait_max_offsets(admin, "AutoT", lambda m: sum(m.values()) >= 8).values()) == 8


def test_no_route_without_auto_create(start_broker: StartBroker, namesrv, admin: Admin, producer: Producer) -> None:
    start_broker(namesrv.addr, autoCreateTopicEnable="false")
    with pytest.raises(MQClientError) as ei:
        producer.send(Message("NoSuchTopic", b"x"))
    assert ei.value.response_code == ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION


def test_retries_go_to_the_live_broker(start_broker: StartBroker, admin: Admin, namesrv) -> None:
    start_broker(namesrv.addr, "broker-a")
    b = start_broker(namesrv.addr, "broker-b")
    make_topic(admin, "TwoT")
    wait_for(lambda: len(admin.topic_route("TwoT").queue_datas) == 2, what="route on both brokers")
    with Producer("two-brokers", namesrv.addr) as p:
        assert {p.send(Message("TwoT", b"x")).message_queue.broker_name for _ in range(8)} == {"broker-a", "broker-b"}
        b.kill()
        t0 = time.monotonic()
        results = [p.send(Message("TwoT", b"after")) for _ in range(30)]
        elapsed = time.monotonic() - t0
    assert {r.message_queue.broker_name for r in results} == {"broker-a"}
    # One attempt may wait out its share of the timeout on the dead broker; later sends skip it.
    assert elapsed < 3.0, elapsed


def test_broker_errors_carry_response_codes(start_broker: StartBroker, namesrv, admin: Admin,
                                            producer: Producer) -> None:
    start_broker(namesrv.addr, maxMessageSize=2048)
    make_topic(admin, "ErrT")
    with pytest.raises(MQBrokerError) as ei:
        producer.send(Message("ErrT", b"x" * 3000))  # under the producer's limit, over the broker's
    assert ei.value.response_code == ResponseCode.MESSAGE_ILLEGAL and ei.value.broker_addr
    with pytest.raises(MQBrokerError) as ei:
        producer.send(Message("ErrT", b"x"), queue=MessageQueue("ErrT", "broker-a", 99))
    assert ei.value.response_code == ResponseCode.SYSTEM_ERROR and "queueId" in ei.value.remark
    make_topic(admin, "ReadOnlyT", perm=4)
    with pytest.raises(MQBrokerError) as ei:
        producer.send(Message("ReadOnlyT", b"x"))
    assert ei.value.response_code == ResponseCode.NO_PERMISSION


def test_a_hung_name_server_is_given_up_on_after_the_client_api_timeout(namesrv) -> None:
    # RocketMQ's mqClientApiTimeout bounds route look-ups (and heartbeats, offset requests): a name server that
    # does not answer costs a client that much, not the default 3 s.
    freeze(namesrv.pid)
    try:
        with Producer("api-timeout-producer", namesrv.addr, mq_client_api_timeout_ms=400) as producer:
            with pytest.raises(MQClientError) as ei:
                producer.send(Message("ApiTimeoutT", b"x"))
        waited = re.search(r"within (\d+) ms", str(ei.value))
        assert waited is not None and int(waited.group(1)) <= 400, str(ei.value)
        with PullConsumer("api-timeout-group", namesrv.addr, mq_client_api_timeout_ms=400) as consumer:
            with pytest.raises(MQClientError) as ei:
                consumer.fetch_message_queues("ApiTimeoutT")
        waited = re.search(r"within (\d+) ms", str(ei.value))
        assert waited is not None and int(waited.group(1)) <= 400, str(ei.value)
        for make in (lambda: Producer("api-timeout-producer", namesrv.addr, mq_client_api_timeout_ms=0),
                     lambda: PullConsumer("api-timeout-group", namesrv.addr, mq_client_api_timeout_ms=0)):
            with pytest.raises(MQClientError, match="mq_client_api_timeout_ms"):
                make()
    finally:
        thaw(namesrv.pid)


def test_timeout_when_broker_hangs(start_broker: StartBroker, namesrv, admin: Admin, producer: Producer) -> None:
    broker = start_broker(namesrv.addr)
    make_topic(admin, "HangT")
    assert producer.send(Message("HangT", b"warm")).ok
    freeze(broker.pid)
    try:
        t0 = time.monotonic()
        with pytest.raises(RequestTimeoutError) as ei:
            producer.send(Message("HangT", b"x"), timeout_ms=600)
        assert 0.5 < time.monotonic() - t0 < 1.5
        assert ei.value.response_code == ClientErrorCode.ACCESS_BROKER_TIMEOUT
        fut = producer.send_async(Message("HangT", b"y"), timeout_ms=300)
        with pytest.raises(RequestTimeoutError):
            fut.result(5)
    finally:
        thaw(broker.pid)
    assert producer.send(Message("HangT", b"again")).ok
