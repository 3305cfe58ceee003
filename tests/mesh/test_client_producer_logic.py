"""Producer logic against in-process fake name server and brokers: retries, statuses, fallbacks, heartbeats.

The real services are exercised by test_producer.py; these pin down the
client's own decisions (which broker a retry goes to, which codes are
retried, what a result holds) where a real broker could not be made to
answer on cue.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator

import pytest

from clientkit import FakeBroker, FakeNamesrv
from procs import free_port
from rocketmesh import Message, MQBrokerError, MQClientError, Producer, RequestTimeoutError, SendStatus
from rocketmesh.client import ClientErrorCode, ResponseCode, SelectMessageQueueByHash
from rocketmesh.model.codec import decode_batch, decode_properties
from rocketmesh.model.message import MessageConst, MessageQueue
from rocketmesh.remoting.protocol.headers import SendMessageRequestHeader


@pytest.fixture
def mesh() -> Iterator[tuple[FakeNamesrv, FakeBroker, FakeBroker]]:
    ns = FakeNamesrv()
    a, b = FakeBroker("broker-a"), FakeBroker("broker-b")
    ns.add_topic("T", [a, b])
    ns.add_topic("TBW102", [a, b], queues=8)
    yield ns, a, b
    for s in (a, b, ns):
        s.stop()


@pytest.fixture
def producer(mesh) -> Iterator[Producer]:
    ns, _, _ = mesh
    p = Producer("logic-group", ns.addr, send_msg_timeout_ms=3000)
    yield p
    p.shutdown()


def test_send_result_and_header(mesh, producer: Producer) -> None:
    _, a, b = mesh
    msg = Message("T", b"hello", tags="TagA", keys=["k1", "k2"])
    r = producer.send(msg)
    assert r.send_status is SendStatus.SEND_OK and r.ok
    assert r.msg_id == msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
    assert len(r.offset_msg_id) == 32 and r.queue_offset == 0
    assert r.message_queue.topic == "T" and r.message_queue.broker_name in ("broker-a", "broker-b")
    broker = a if r.message_queue.broker_name == "broker-a" else b
    ext, body, oneway = broker.sends[-1]
    assert body == b"hello" and not oneway
    header = SendMessageRequestHeader.from_ext(ext)
    assert header.producer_group == "logic-group" and header.topic == "T"
    assert header.queue_id == r.message_queue.queue_id and not header.batch
    props = decode_properties(header.properties.encode())
    assert props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2" and props["UNIQ_KEY"] == r.msg_id
    assert abs(header.born_timestamp - time.time() * 1000) < 5000


def test_round_robin_over_all_queues(mesh, producer: Producer) -> None:
    results = [producer.send(Message("T", b"x")) for _ in range(16)]
    assert {r.message_queue for r in results} == {MessageQueue("T", n, q) for n in ("broker-a", "broker-b")
                                                   for q in range(4)}
    assert producer.message_queues("T") == sorted({r.message_queue for r in results})


@pytest.mark.parametrize("code", [ResponseCode.SYSTEM_ERROR, ResponseCode.TOPIC_NOT_EXIST,
                                  ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.NO_PERMISSION])
def test_retryable_code_retried_on_the_other_broker(mesh, producer: Producer, code: int) -> None:
    _, a, b = mesh
    for _ in range(4):
        a.sends.clear()
        b.sends.clear()
        a.script.append(code)
        b.script.append(code)
        # attempt 1 fails on one broker, attempt 2 on the other, attempt 3 goes back to the first.
        r = producer.send(Message("T", b"x"))
        assert r.ok
        winner, loser = (a, b) if r.message_queue.broker_name == "broker-a" else (b, a)
        assert len(winner.sends) == 2 and len(loser.sends) == 1


def test_non_retryable_code_raises_at_once(mesh, producer: Producer) -> None:
    _, a, b = mesh
    a.script.append(ResponseCode.MESSAGE_ILLEGAL)
    b.script.append(ResponseCode.MESSAGE_ILLEGAL)
    with pytest.raises(MQBrokerError) as ei:
        producer.send(Message("T", b"x"))
    assert ei.value.response_code == ResponseCode.MESSAGE_ILLEGAL
    assert "scripted MESSAGE_ILLEGAL" in ei.value.remark
    assert ei.value.broker_addr in (a.addr, b.addr)
    assert len(a.sends) + len(b.sends) == 1


def test_all_attempts_fail_raises_last_error_with_note(mesh, producer: Producer) -> None:
    _, a, b = mesh
    a.script.extend([ResponseCode.SYSTEM_ERROR] * 3)
    b.script.extend([ResponseCode.SYSTEM_ERROR] * 3)
    with pytest.raises(MQBrokerError) as ei:
        producer.send(Message("T", b"x"))
    assert ei.value.response_code == ResponseCode.SYSTEM_ERROR
    assert len(a.sends) + len(b.sends) == 3
    assert any("send failed 3 time(s)" in n for n in ei.value.__notes__)


def test_stored_statuses(mesh, producer: Producer) -> None:
    _, a, b = mesh
    for code, status in ((ResponseCode.FLUSH_DISK_TIMEOUT, SendStatus.FLUSH_DISK_TIMEOUT),
                         (ResponseCode.FLUSH_SLAVE_TIMEOUT, SendStatus.FLUSH_SLAVE_TIMEOUT),
                         (ResponseCode.SLAVE_NOT_AVAILABLE, SendStatus.SLAVE_NOT_AVAILABLE)):
        a.script.append(code)
        b.script.append(code)
        before = len(a.sends) + len(b.sends)
        r = producer.send(Message("T", b"x"))
        assert r.send_status is status and not r.ok
        assert len(a.sends) + len(b.sends) == before + 1  # stored: not retried
        a.script.clear()
        b.script.clear()


def test_retry_another_broker_when_not_store_ok(mesh) -> None:
    ns, a, b = mesh
    with Producer("g2", ns.addr, retry_another_broker_when_not_store_ok=True) as p:
        a.script.append(ResponseCode.FLUSH_DISK_TIMEOUT)
        b.script.append(ResponseCode.FLUSH_DISK_TIMEOUT)
        r = p.send(Message("T", b"x"))
        assert r.send_status is SendStatus.SEND_OK
        assert len(a.sends) + len(b.sends) == 3  # not stored OK twice, then OK


def test_timeout_retried_elsewhere_and_bounded(mesh, producer: Producer) -> None:
    _, a, b = mesh
    a.script.append(None)
    b.script.append(None)
    t0 = time.monotonic()
    r = producer.send(Message("T", b"x"), timeout_ms=1500)
    assert r.ok
    assert time.monotonic() - t0 < 1.6
    a.script.extend([None] * 3)
    b.script.extend([None] * 3)
    t0 = time.monotonic()
    with pytest.raises(RequestTimeoutError) as ei:
        producer.send(Message("T", b"x"), timeout_ms=900)
    assert time.monotonic() - t0 < 1.3
    assert ei.value.response_code == ClientErrorCode.ACCESS_BROKER_TIMEOUT


def test_dead_broker_is_skipped(mesh) -> None:
    ns, a, b = mesh
    dead = f"127.0.0.1:{free_port()}"
    ns.add_topic("D", [a])
    ns.add_dead_broker("D", "broker-dead", dead)
    with Producer("g-dead", ns.addr, send_msg_timeout_ms=3000) as p:
        t0 = time.monotonic()
        results = [p.send(Message("D", b"x")) for _ in range(20)]
        elapsed = time.monotonic() - t0
    assert all(r.message_queue.broker_name == "broker-a" for r in results)
    # At most one attempt waited on the dead broker (a third of the timeout); the rest skipped it.
    assert elapsed < 2.5


def test_pinned_queue_and_selector(mesh, producer: Producer) -> None:
    _, a, b = mesh
    mq = MessageQueue("T", "broker-b", 3)
    assert all(producer.send(Message("T", b"x"), queue=mq).message_queue == mq for _ in range(3))
    sel = SelectMessageQueueByHash()
    got = {producer.send(Message("T", b"x"), selector=sel, arg="order-7").message_queue for _ in range(5)}
    assert len(got) == 1
    got = {producer.send(Message("T", b"x"), selector=lambda mqs, m, arg: mqs[arg], arg=5).message_queue
           for _ in range(3)}
    assert got == {MessageQueue("T", "broker-b", 1)}
    # A pinned send is not retried elsewhere.
    b.script.append(ResponseCode.SYSTEM_ERROR)
    with pytest.raises(MQBrokerError):
        producer.send(Message("T", b"x"), queue=mq)


def test_async_success_and_callback(mesh, producer: Producer) -> None:
    done = threading.Event()
    seen: list = []

    def cb(fut) -> None:
        seen.append((threading.current_thread().name, fut.result()))
        done.set()

    fut = producer.send_async(Message("T", b"x"), callback=cb)
    r = fut.result(5)
    assert r.ok
    assert done.wait(5)
    assert seen[0][1] is r and "callback" in seen[0][0]


def test_async_timeout_retried_on_same_broker(mesh) -> None:
    ns, a, b = mesh
    with Producer("g-async", ns.addr, send_msg_timeout_ms=400, retry_times_when_send_async_failed=2) as p:
        a.script.extend([None])
        b.script.extend([None])
        r = p.send_async(Message("T", b"x")).result(5)
        assert r.ok
        broker = a if r.message_queue.broker_name == "broker-a" else b
        other = b if broker is a else a
        assert len(broker.sends) == 2 and len(other.sends) == 0


def test_async_gives_up_after_retries(mesh) -> None:
    ns, a, b = mesh
    with Producer("g-async2", ns.addr, send_msg_timeout_ms=300, retry_times_when_send_async_failed=1) as p:
        a.script.extend([None] * 5)
        b.script.extend([None] * 5)
        fut = p.send_async(Message("T", b"x"))
        with pytest.raises(RequestTimeoutError):
            fut.result(5)
        assert len(a.sends) + len(b.sends) == 2


def test_async_broker_error_not_retried(mesh, producer: Producer) -> None:
    _, a, b = mesh
    a.script.append(ResponseCode.SYSTEM_BUSY)
    b.script.append(ResponseCode.SYSTEM_BUSY)
    fut = producer.send_async(Message("T", b"x"))
    with pytest.raises(MQBrokerError) as ei:
        fut.result(5)
    assert ei.value.response_code == ResponseCode.SYSTEM_BUSY
    assert len(a.sends) + len(b.sends) == 1


def test_oneway(mesh, producer: Producer) -> None:
    _, a, b = mesh
    producer.send_oneway(Message("T", b"fire"))
    deadline = time.monotonic() + 5
    while not (a.sends or b.sends) and time.monotonic() < deadline:
        time.sleep(0.01)
    ext, body, oneway = (a.sends or b.sends)[0]
    assert body == b"fire" and oneway


def test_batch(mesh, producer: Producer) -> None:
    _, a, b = mesh
    msgs = [Message("T", f"m{i}".encode(), keys=f"k{i}") for i in range(5)]
    r = producer.send_batch(msgs)
    assert r.ok and len(r.msg_id.split(",")) == 5 and len(r.offset_msg_id.split(",")) == 5
    assert r.msg_id.split(",") == [m.properties["UNIQ_KEY"] for m in msgs]
    broker = a if r.message_queue.broker_name == "broker-a" else b
    ext, body, _ = broker.sends[-1]
    assert ext["batch"] is True and ext["queueId"] == r.message_queue.queue_id
    assert [m.body for m in decode_batch("T", body)] == [f"m{i}".encode() for i in range(5)]


def _sent(a: FakeBroker, b: FakeBroker, n: int) -> list[tuple[dict, bytes, bool]]:
    """The first ``n`` requests the fake brokers got (oneway ones arrive a moment after the call returns)."""
    deadline = time.monotonic() + 5
    while len(a.sends) + len(b.sends) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return a.sends + b.sends


def test_single_sends_over_the_threshold_go_zlib_compressed_with_sysflag_bit_0(mesh, producer: Producer) -> None:
    _, a, b = mesh
    big = bytes(range(256)) * 40  # 10 KiB
    assert producer.compress_msg_body_over_howmuch == 4096 and producer.compress_level == 5
    msgs = [Message("T", big), Message("T", big), Message("T", big), Message("T", big, keys="k"),
            Message("T", b"x" * 4096), Message("T", b"y" * 4095), Message("T", b"z" * 1024)]
    producer.send(msgs[0])
    producer.send_async(msgs[1]).result(5)
    producer.send_oneway(msgs[2])
    producer.send(msgs[3], selector=SelectMessageQueueByHash(), arg="k")
    for m in msgs[4:]:
        producer.send(m)
    sent = _sent(a, b, len(msgs))
    assert len(sent) == len(msgs)
    by_uniq = {decode_properties(ext["properties"].encode())["UNIQ_KEY"]: (ext, body) for ext, body, _ in sent}
    for m in msgs:
        ext, body = by_uniq[m.properties["UNIQ_KEY"]]
        if len(m.body) >= 4096:  # RocketMQ compares with >=: a body of exactly 4096 bytes is compressed
            assert ext["sysFlag"] == 1 and body == zlib.compress(m.body, 5) and len(body) < len(m.body)
        else:
            assert ext["sysFlag"] == 0 and body == m.body
    # The caller's messages keep their bodies.
    assert [m.body for m in msgs[:4]] == [big] * 4


def test_batches_are_never_compressed_and_the_threshold_and_level_are_settings(mesh) -> None:
    ns, a, b = mesh
    big = b"batch me " * 1000
    with Producer("g-compress", ns.addr, compress_msg_body_over_howmuch=100, compress_level=9) as p:
        p.send_batch([Message("T", big), Message("T", big)])
        p.send(Message("T", b"q" * 100))
        p.send(Message("T", b"q" * 99))
    sent = _sent(a, b, 3)
    [(batch_ext, batch_body)] = [(ext, body) for ext, body, _ in sent if ext.get("batch")]
    assert batch_ext["sysFlag"] == 0 and [m.body for m in decode_batch("T", batch_body)] == [big, big]
    singles = sorted((ext["sysFlag"], body) for ext, body, _ in sent if not ext.get("batch"))
    assert singles == [(0, b"q" * 99), (1, zlib.compress(b"q" * 100, 9))]
    # Auto batching leaves a body that a single send compresses alone, compressed; smaller ones batch,
    # and batches go uncompressed.
    a.sends.clear()
    b.sends.clear()
    with Producer("g-compress-auto", ns.addr, compress_msg_body_over_howmuch=100, compress_level=9,
                  batch_max_delay_ms=200) as p:
        futures = [p.send_async(Message("T", big)) for _ in range(3)]
        futures += [p.send_async(Message("T", b"s" * 99)) for _ in range(50)]
        assert all(f.result(5).ok for f in futures)
    sent = [(ext, body) for ext, body, _ in _sent(a, b, 1)]
    alone = [(ext["sysFlag"], body) for ext, body in sent if not ext.get("batch")]
    assert [a for a in alone if a[0]] == [(1, zlib.compress(big, 9))] * 3
    # A small one that finds nothing of its topic in flight goes at once as its own (uncompressed) request.
    lone = [body for flag, body in alone if not flag]
    batched = [m.body for ext, body in sent if ext.get("batch") for m in decode_batch("T", body)]
    assert sorted(batched + lone) == [b"s" * 99] * 50 and len(sent) < 3 + 50
    assert all(ext["sysFlag"] == 0 for ext, _ in sent if ext.get("batch"))
    for option, value in (("compress_level", 10), ("compress_level", -2), ("compress_msg_body_over_howmuch", -1),
                          ("compress_level", "5")):
        with pytest.raises(MQClientError, match=option):
            Producer("g-bad", ns.addr, **{option: value})


def test_default_topic_route_for_new_topic(mesh, producer: Producer) -> None:
    ns, a, b = mesh
    r = producer.send(Message("Brand-New", b"x"))
    assert r.ok
    ext = (a.sends or b.sends)[-1][0]
    assert ext["topic"] == "Brand-New" and ext["defaultTopic"] == "TBW102" and ext["defaultTopicQueueNums"] == 4
    # TBW102 has 8 queues per broker; the producer caps them at default_topic_queue_nums.
    assert {mq.queue_id for mq in producer.message_queues("Brand-New")} == {0, 1, 2, 3}


def test_no_route_at_all(mesh) -> None:
    ns, a, b = mesh
    del ns.routes["TBW102"]
    with Producer("g-noroute", ns.addr) as p:
        with pytest.raises(MQClientError) as ei:
            p.send(Message("Nowhere", b"x"))
    assert ei.value.response_code == ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION
    assert "Nowhere" in str(ei.value)


def test_namesrv_failover(mesh) -> None:
    ns, a, b = mesh
    dead = f"127.0.0.1:{free_port()}"
    with Producer("g-fail", [dead, ns.addr], send_msg_timeout_ms=3000) as p:
        for _ in range(3):
            assert p.send(Message("T", b"x")).ok


def test_heartbeat_and_unregister(mesh) -> None:
    ns, a, b = mesh
    p = Producer("hb-group", ns.addr)
    p.send(Message("T", b"x"))
    deadline = time.monotonic() + 5
    while not (a.heartbeats and b.heartbeats) and time.monotonic() < deadline:
        time.sleep(0.02)
    hb = a.heartbeats[-1]
    assert hb["clientID"] == p.client_id and "@" in hb["clientID"]
    assert {"groupName": "hb-group"} in hb["producerDataSet"] and hb["consumerDataSet"] == []
    p.shutdown()
    assert any(u.get("producerGroup") == "hb-group" and u["clientID"] == hb["clientID"] for u in a.unregisters)


def test_retry_topic_header_fields(mesh, producer: Producer) -> None:
    ns, a, b = mesh
    ns.add_topic("%RETRY%cg", [a])
    msg = Message("%RETRY%cg", b"x", properties={MessageConst.RECONSUME_TIME: "3",
                                                  MessageConst.MAX_RECONSUME_TIMES: "16"})
    producer.send(msg)
    ext = a.sends[-1][0]
    assert ext["reconsumeTimes"] == 3 and ext["maxReconsumeTimes"] == 16
    assert "RECONSUME_TIME" not in ext["properties"]


def test_latency_fault_tolerance_benches_a_failing_broker(mesh) -> None:
    ns, a, b = mesh
    with Producer("g-latency", ns.addr, send_latency_fault_enable=True) as p:
        a.script.append(ResponseCode.SYSTEM_ERROR)
        b.script.append(ResponseCode.SYSTEM_ERROR)
        r = p.send(Message("T", b"x"))  # fails on one broker, then the other, then succeeds
        assert r.ok
        # Both failed once (isolated 600 s); the least bad is picked, consistently.
        brokers = {p.send(Message("T", b"y")).message_queue.broker_name for _ in range(10)}
        assert len(brokers) == 1
    with Producer("g-latency2", ns.addr, send_latency_fault_enable=True) as p:
        p.send(Message("T", b"warm"))
        a.script.append(ResponseCode.SYSTEM_ERROR)
        sends_before = len(a.sends)
        results = [p.send(Message("T", b"z")) for _ in range(10)]
        # After at most one failure on broker-a, everything goes to broker-b.
        assert len(a.sends) - sends_before <= 1
        assert sum(r.message_queue.broker_name == "broker-b" for r in results) >= 9
