"""Producer auto batching (RocketMQ 5's autoBatch / ProduceAccumulator) against real processes (black box).

What a send did is checked through what a user can see: each message's own
SendResult, the messages read back with a PullConsumer or by id, and the
broker's answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from clientkit import make_topic, read_back
from procs import BrokerProcess, freeze, thaw, wait_for
from rocketmesh import (
    Admin,
    Message,
    MQBrokerError,
    MQClientError,
    Producer,
    RequestTimeoutError,
    SendStatus,
)
from rocketmesh.client import ClientErrorCode, ResponseCode, SelectMessageQueueByHash
from rocketmesh.model.message import MessageQueue

StartBroker = Callable[..., BrokerProcess]


@pytest.fixture
def auto(namesrv, broker) -> Iterator[Producer]:
    with Producer("auto-producer", namesrv.addr, auto_batch=True) as p:
        yield p


def runs(results) -> list[int]:
    """Lengths of the runs of results (in send order) stored one after another in one queue: the batches."""
    lengths = [1]
    for prev, cur in zip(results, results[1:], strict=False):
        if cur.message_queue == prev.message_queue and cur.queue_offset == prev.queue_offset + 1:
            lengths[-1] += 1
        else:
            lengths.append(1)
    return lengths


def test_async_sends_each_get_their_own_result_and_land_once(namesrv, admin: Admin, auto: Producer) -> None:
    make_topic(admin, "AutoA")
    callbacks: list = []
    msgs = [Message("AutoA", f"m{i}".encode(), keys=f"k{i}", tags="T" if i % 2 else None) for i in range(2000)]
    futures = [auto.send_async(m, callback=callbacks.append) for m in msgs]
    results = [f.result(15) for f in futures]
    assert all(r.send_status is SendStatus.SEND_OK for r in results)
    assert len({(r.message_queue, r.queue_offset) for r in results}) == 2000
    assert [r.msg_id for r in results] == [m.properties["UNIQ_KEY"] for m in msgs]
    assert len({r.offset_msg_id for r in results}) == 2000 and not any("," in r.offset_msg_id for r in results)
    stored = read_back(namesrv, "AutoA", 2000)
    assert sorted(m.body for m in stored.values()) == sorted(m.body for m in msgs)  # every body, once
    for m, r in zip(msgs, results, strict=False):
        s = stored[(r.message_queue.queue_id, r.queue_offset)]
        assert s.body == m.body and s.unique_key == r.msg_id and s.msg_id == r.offset_msg_id
        assert s.keys == m.keys and s.tags == m.tags
    wait_for(lambda: len(callbacks) == 2000, what="every callback")
    assert {id(f) for f in callbacks} == {id(f) for f in futures}


def test_batches_form_under_load_and_respect_batch_max_bytes(namesrv, admin: Admin) -> None:
    make_topic(admin, "AutoB")
    # Without batching consecutive sends go round robin over the queues: 2,000 runs of one.
    with Producer("auto-b", namesrv.addr, auto_batch=True) as p:
        results = [f.result(15) for f in [p.send_async(Message("AutoB", b"x" * 100)) for _ in range(2000)]]
    lengths = runs(results)
    assert sum(lengths) == 2000
    assert len(lengths) <= 2000 / 8 and max(lengths) >= 16, lengths
    # Each batch holds at most batch_max_bytes of encoded messages: 100-byte bodies encode to ~170 bytes.
    with Producer("auto-b-small", namesrv.addr, auto_batch=True, batch_max_bytes=1024) as p:
        results = [f.result(15) for f in [p.send_async(Message("AutoB", b"y" * 100)) for _ in range(500)]]
    lengths = runs(results)
    assert max(lengths) <= 6 and len(lengths) < 500, lengths
    assert all(r.ok for r in results)


def test_a_lone_send_goes_at_once_and_a_waiting_one_within_the_delay(namesrv, broker, admin: Admin) -> None:
    make_topic(admin, "AutoS")
    with Producer("auto-s", namesrv.addr, auto_batch=True, batch_max_delay_ms=30_000) as p:
        assert p.send(Message("AutoS", b"warm")).ok  # route and connection
        t0 = time.monotonic()
        r = p.send(Message("AutoS", b"alone", keys="alone-key"))
        assert time.monotonic() - t0 < 1.0  # nothing in flight: sent at once, not after the 30 s delay
        assert r.ok and "," not in r.msg_id
        stored = admin.view_message(r.offset_msg_id)
        assert stored.body == b"alone" and stored.unique_key == r.msg_id and stored.keys == "alone-key"
        assert (stored.queue_id, stored.queue_offset) == (r.message_queue.queue_id, r.queue_offset)
        t0 = time.monotonic()
        assert p.send_async(Message("AutoS", b"alone too")).result(5).ok
        assert time.monotonic() - t0 < 1.0
    with Producer("auto-s2", namesrv.addr, auto_batch=True, batch_max_delay_ms=300) as p:
        assert p.send(Message("AutoS", b"warm")).ok
        freeze(broker.pid)
        try:
            first = p.send_async(Message("AutoS", b"in flight"))  # sent, unanswered
            time.sleep(0.1)
            sent_at_ms = time.time() * 1000
            second = p.send_async(Message("AutoS", b"waits"))  # a batch is in flight: waits for the delay
            time.sleep(0.8)
            assert not first.done() and not second.done()
        finally:
            thaw(broker.pid)
        assert first.result(5).ok
        r = second.result(5)
    # The batch's born time is when it was sent: the delay after the send, not the broker's thaw.
    waited_ms = admin.view_message(r.offset_msg_id).born_timestamp - sent_at_ms
    assert 250 <= waited_ms <= 700, waited_ms


def test_delayed_selector_and_queue_sends_go_alone(namesrv, admin: Admin, auto: Producer) -> None:
    make_topic(admin, "AutoD", queues=8)
    r = auto.send(Message("AutoD", b"later", delay_level=1))  # a batch holding it would be refused
    assert r.ok and auto.send_async(Message("AutoD", b"later too", delay_level=2)).result(5).ok
    stored = admin.view_message(r.offset_msg_id)
    assert stored.body == b"later" and stored.delay_level == 1
    sel = SelectMessageQueueByHash()
    want = sel.select(auto.message_queues("AutoD"), Message("AutoD", b"."), "order-9")
    by_selector = [auto.send(Message("AutoD", f"o{i}"), selector=sel, arg="order-9") for i in range(5)]
    by_selector += [f.result(5) for f in [auto.send_async(Message("AutoD", f"a{i}"), selector=sel, arg="order-9")
                                          for i in range(5)]]
    assert {r.message_queue for r in by_selector} == {want}
    q5 = MessageQueue("AutoD", "broker-a", 5)
    pinned = [f.result(5) for f in [auto.send_async(Message("AutoD", b"q"), queue=q5) for _ in range(10)]]
    pinned.append(auto.send(Message("AutoD", b"q"), queue=q5))
    assert {r.message_queue for r in pinned} == {q5}
    offsets = sorted(r.queue_offset for r in pinned)
    assert offsets == list(range(offsets[0], offsets[0] + 11))
    stored = admin.view_message(pinned[-1].offset_msg_id)
    assert stored.queue_id == 5 and stored.body == b"q"


def test_a_failed_batch_fails_every_message_with_the_broker_error(namesrv, start_broker: StartBroker) -> None:
    start_broker(namesrv.addr, autoCreateTopicEnable="false")
    with Admin(namesrv.addr) as admin, Producer("auto-f", namesrv.addr, auto_batch=True) as p:
        # A topic the broker no longer has (deleted after the producer cached its route): with
        # autoCreateTopicEnable off the broker answers TOPIC_NOT_EXIST to every batch.
        make_topic(admin, "AutoGone")
        assert p.send(Message("AutoGone", b"before")).ok
        admin.delete_topic("AutoGone")
        futures = [p.send_async(Message("AutoGone", f"g{i}")) for i in range(300)]
        for f in futures:
            with pytest.raises(MQBrokerError) as ei:
                f.result(10)
            assert ei.value.response_code == ResponseCode.TOPIC_NOT_EXIST and ei.value.broker_addr
        with pytest.raises(MQBrokerError) as ei:
            p.send(Message("AutoGone", b"sync"))
        assert ei.value.response_code == ResponseCode.TOPIC_NOT_EXIST
        # A topic without any route is refused at the call, as without auto batch.
        with pytest.raises(MQClientError) as ei2:
            p.send_async(Message("NoSuchTopic", b"x"))
        assert ei2.value.response_code == ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION


def test_shutdown_sends_what_is_pending(namesrv, broker, admin: Admin) -> None:
    make_topic(admin, "AutoQ")
    p = Producer("auto-q", namesrv.addr, auto_batch=True, batch_max_delay_ms=30_000)
    assert p.send(Message("AutoQ", b"warm")).ok
    freeze(broker.pid)
    try:
        first = p.send_async(Message("AutoQ", b"in flight"))
        pending = [p.send_async(Message("AutoQ", f"p{i}")) for i in range(100)]  # wait behind it for 30 s
        time.sleep(0.3)
        assert not any(f.done() for f in pending)
    finally:
        threading.Timer(0.5, thaw, (broker.pid,)).start()
    t0 = time.monotonic()
    p.shutdown(timeout_s=10)
    assert time.monotonic() - t0 < 5
    results = [f.result(0) for f in [first, *pending]]
    assert all(r.ok for r in results)
    assert len({(r.message_queue, r.queue_offset) for r in results}) == 101
    with pytest.raises(MQClientError):
        p.send_async(Message("AutoQ", b"after"))


def test_memory_bound_waits_for_room_then_fails_clearly(namesrv, broker, admin: Admin) -> None:
    make_topic(admin, "AutoM")
    with Producer("auto-m", namesrv.addr, auto_batch=True, total_batch_max_bytes=2048) as p:
        assert p.send(Message("AutoM", b"warm")).ok
        freeze(broker.pid)
        try:
            first = p.send_async(Message("AutoM", b"a" * 1024))  # ~1.1 KB held while unanswered
            t0 = time.monotonic()
            with pytest.raises(MQClientError, match="total_batch_max_bytes"):
                p.send_async(Message("AutoM", b"b" * 1024), timeout_ms=300)
            assert 0.25 < time.monotonic() - t0 < 1.5
            with pytest.raises(RequestTimeoutError):  # a sync send waits at most its timeout
                p.send(Message("AutoM", b"c"), timeout_ms=400)
            # Room frees when the broker answers: a waiting send then goes.
            threading.Timer(0.3, thaw, (broker.pid,)).start()
            second = p.send_async(Message("AutoM", b"d" * 1024), timeout_ms=5000)
        finally:
            thaw(broker.pid)
        assert first.result(5).ok and second.result(5).ok


@pytest.mark.parametrize("kw", [
    {"batch_max_delay_ms": 0}, {"batch_max_delay_ms": 30_001}, {"batch_max_delay_ms": "10"},
    {"batch_max_bytes": 0}, {"batch_max_bytes": 2 * 1024 * 1024 + 1}, {"batch_max_bytes": 1.5},
    {"total_batch_max_bytes": 0}, {"total_batch_max_bytes": True}, {"auto_batch": "yes"}, {"auto_batch": 1},
])
def test_bad_settings_are_refused(kw) -> None:
    with pytest.raises(MQClientError):
        Producer("auto-bad", "127.0.0.1:9", **kw)


def test_defaults_are_rocketmq_5s() -> None:
    p = Producer("auto-defaults", "127.0.0.1:9")
    assert (p.auto_batch, p.batch_max_delay_ms, p.batch_max_bytes, p.total_batch_max_bytes) == (
        False, 10, 32 * 1024, 32 * 1024 * 1024)
