"""Producer auto batching (RocketMQ 5's autoBatch / ProduceAccumulator) against real processes (black box).

It is on by default for ``send_async``, so these tests are the case that coalescing single async sends
keeps what a sender of single messages relies on: each message its own SendResult and callback, the
order of one sender's messages in a queue, no wait when nothing is in flight, failures and retries as a
single send's, every property. What a send did is checked through what a user can see: each message's
own SendResult, the messages read back with a PullConsumer or by id, and what the broker counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from clientkit import make_topic, read_back, sample, scrape
from procs import BrokerProcess, free_port, freeze, thaw, wait_for
from rocketmesh import (
    Admin,
    AutoBatch,
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
    """A Producer with the default settings: auto batching of async sends."""
    with Producer("auto-producer", namesrv.addr) as p:
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
    msgs = [Message("AutoA", f"m{i}".encode(), keys=f"k{i}", tags="T" if i % 2 else None, flag=i % 7,
                    properties={"order": str(i), "region": "eu"}) for i in range(2000)]
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
        assert s.keys == m.keys and s.tags == m.tags and s.flag == m.flag
        assert s.properties["order"] == m.properties["order"] and s.properties["region"] == "eu"
    assert max(runs(results)) > 1  # they did share requests
    wait_for(lambda: len(callbacks) == 2000, what="every callback")
    assert {id(f) for f in callbacks} == {id(f) for f in futures}


def test_batches_form_under_load_and_respect_batch_max_bytes(namesrv, admin: Admin) -> None:
    make_topic(admin, "AutoB")
    # Without batching consecutive sends go round robin over the queues: 2,000 runs of one.
    with Producer("auto-b", namesrv.addr) as p:
        results = [f.result(15) for f in [p.send_async(Message("AutoB", b"x" * 100)) for _ in range(2000)]]
    lengths = runs(results)
    assert sum(lengths) == 2000
    assert len(lengths) <= 2000 / 8 and max(lengths) >= 16, lengths
    # Each batch holds at most batch_max_bytes of encoded messages: 100-byte bodies encode to ~170 bytes.
    with Producer("auto-b-small", namesrv.addr, batch_max_bytes=1024) as p:
        results = [f.result(15) for f in [p.send_async(Message("AutoB", b"y" * 100)) for _ in range(500)]]
    lengths = runs(results)
    assert max(lengths) <= 6 and len(lengths) < 500, lengths
    assert all(r.ok for r in results)


def test_a_lone_send_goes_at_once_and_a_waiting_one_within_the_delay(namesrv, broker, admin: Admin) -> None:
    make_topic(admin, "AutoS")
    # A request's born timestamp is taken as it is made: a lone send's is no later than the moment
    # send_async returned, so it did not wait for the (30 s) delay or for anything else.
    with Producer("auto-s", namesrv.addr, batch_max_delay_ms=30_000) as p:
        assert p.send(Message("AutoS", b"warm")).ok  # route and connection
        fut = p.send_async(Message("AutoS", b"alone", keys="alone-key"))
        returned_ms = time.time() * 1000
        r = fut.result(10)
        assert r.ok and "," not in r.msg_id
        stored = admin.view_message(r.offset_msg_id)
        assert stored.body == b"alone" and stored.unique_key == r.msg_id and stored.keys == "alone-key"
        assert (stored.queue_id, stored.queue_offset) == (r.message_queue.queue_id, r.queue_offset)
        assert stored.born_timestamp <= returned_ms
    with Producer("auto-s2", namesrv.addr, batch_max_delay_ms=300) as p:
        assert p.send(Message("AutoS", b"warm")).ok
        freeze(broker.pid)
        try:
            first = p.send_async(Message("AutoS", b"in flight"))  # sent, unanswered
            first_returned_ms = time.time() * 1000
            time.sleep(0.1)
            sent_at_ms = time.time() * 1000
            second = p.send_async(Message("AutoS", b"waits"))  # a batch is in flight: waits for the delay
            time.sleep(0.8)
            assert not first.done() and not second.done()
        finally:
            thaw(broker.pid)
        r1 = first.result(5)
        r = second.result(5)
    assert admin.view_message(r1.offset_msg_id).born_timestamp <= first_returned_ms
    # The batch's born time is when it was sent: the delay after the send, not the broker's thaw.
    waited_ms = admin.view_message(r.offset_msg_id).born_timestamp - sent_at_ms
    assert 250 <= waited_ms <= 700, waited_ms


def test_a_topic_whose_held_sends_gather_nothing_sends_two_at_once_before_it_holds(namesrv, broker,
                                                                                     admin: Admin) -> None:
    # A producer of many topics: a topic's next message rarely comes before its answer, so holding it back
    # gathers nothing. Once a held list carried one message, the topic may have two requests in flight.
    make_topic(admin, "AutoE")
    with Producer("auto-e", namesrv.addr, batch_max_delay_ms=300) as p:
        assert p.send(Message("AutoE", b"warm")).ok

        def born_after(fut, sent_ms: float) -> float:
            return admin.view_message(fut.result(5).offset_msg_id).born_timestamp - sent_ms

        freeze(broker.pid)
        try:
            first = p.send_async(Message("AutoE", b"1"))  # nothing in flight: at once
            sent_ms = time.time() * 1000
            held = p.send_async(Message("AutoE", b"2"))  # one in flight, and holding may gather: held
            time.sleep(0.6)  # past the delay: the held list leaves, alone, before the first is answered
        finally:
            thaw(broker.pid)
        assert first.result(5).ok
        assert born_after(held, sent_ms) >= 250  # left at the delay, alone: the topic gathers nothing
        freeze(broker.pid)
        try:
            a = p.send_async(Message("AutoE", b"a"))
            b_sent_ms = time.time() * 1000
            b = p.send_async(Message("AutoE", b"b"))  # one in flight, holding gathers nothing: at once
            c_sent_ms = time.time() * 1000
            c = p.send_async(Message("AutoE", b"c"))  # two in flight: held again
            time.sleep(0.6)
        finally:
            thaw(broker.pid)
        assert a.result(5).ok
        assert born_after(b, b_sent_ms) <= 50
        assert born_after(c, c_sent_ms) >= 250
    stored = [admin.view_message(f.result(5).offset_msg_id).body for f in (first, held, a, b, c)]
    assert stored == [b"1", b"2", b"a", b"b", b"c"]


def test_one_senders_async_sends_keep_their_order_in_each_queue(namesrv, admin: Admin, auto: Producer) -> None:
    # Small messages batch; every 25th is too large for a batch (or compressed) and goes alone, while the
    # small ones before it may still wait for a batch in flight: it must not overtake them.
    make_topic(admin, "AutoOrder1", queues=1)
    make_topic(admin, "AutoOrder4", queues=4)
    for topic in ("AutoOrder1", "AutoOrder4"):
        bodies = [f"{i:05d}".encode() + (b"L" * 40_000 if i % 50 == 7 else b"c" * 5000 if i % 50 == 32
                                         else b"s" * 100) for i in range(2000)]
        futures = [auto.send_async(Message(topic, body)) for body in bodies]
        results = [f.result(30) for f in futures]
        by_queue: dict[int, list[tuple[int, int]]] = {}
        for i, r in enumerate(results):
            by_queue.setdefault(r.message_queue.queue_id, []).append((r.queue_offset, i))
        for queue_id, offsets in by_queue.items():
            assert [i for _, i in sorted(offsets)] == [i for _, i in offsets], (topic, queue_id)
        stored = read_back(namesrv, topic, 2000)
        for queue_id in by_queue:
            seq = [int(m.body[:5]) for (q, _), m in sorted(stored.items()) if q == queue_id]
            assert seq == sorted(seq) and len(seq) == len(by_queue[queue_id]), (topic, queue_id)
        assert max(runs(results)) > 1


def test_async_sends_batch_by_default_and_sync_sends_do_not(namesrv, start_broker: StartBroker) -> None:
    port = free_port()
    start_broker(namesrv.addr, metricsExporterType="PROM", metricsPromExporterPort=port)
    url = f"http://127.0.0.1:{port}/metrics"

    def requests(code: str) -> float:
        return sample(scrape(url), "rocketmq_rpc_latency_count", request_code=code)

    with Admin(namesrv.addr) as admin:
        make_topic(admin, "AutoCount")
    for n, (auto_batch, batched) in enumerate(((AutoBatch.ASYNC, True), (AutoBatch.OFF, False), (False, False),
                                               (True, True))):
        with Producer(f"auto-count-{n}", namesrv.addr, auto_batch=auto_batch) as p:
            assert p.send(Message("AutoCount", b"warm")).ok
            singles, batches = requests("send_message"), requests("send_batch_message")
            assert all(f.result(15).ok for f in [p.send_async(Message("AutoCount", b"a" * 200))
                                                   for _ in range(500)])
            counted = singles + batches
            wait_for(lambda counted=counted: requests("send_message") + requests("send_batch_message") > counted,
                     what="the sends counted")
            if batched:
                # A send that finds nothing in flight goes at once, alone, as its own SEND_MESSAGE; the rest batch.
                made = requests("send_message") - singles + requests("send_batch_message") - batches
                assert requests("send_batch_message") - batches >= 1 and made < 250
            else:
                assert requests("send_message") - singles == 500 and requests("send_batch_message") == batches
            # Sync sends keep their own requests unless auto_batch is ALL (True): then concurrent ones batch.
            singles, batches = requests("send_message"), requests("send_batch_message")
            senders = [threading.Thread(target=lambda: [p.send(Message("AutoCount", b"s")) for _ in range(40)])
                       for _ in range(8)]
            for t in senders:
                t.start()
            for t in senders:
                t.join(60)
            before = singles + batches
            wait_for(lambda before=before: requests("send_message") + requests("send_batch_message") > before,
                     what="the sync sends counted")
            if auto_batch is True:
                assert requests("send_batch_message") > batches
            else:
                wait_for(lambda before=singles: requests("send_message") - before == 320, what="320 sync sends counted")
                assert requests("send_batch_message") == batches


def test_delayed_compressed_selector_and_queue_sends_go_alone(namesrv, admin: Admin, auto: Producer) -> None:
    make_topic(admin, "AutoD", queues=8)
    # A batch holding a delayed message would be refused whole: with many sends in flight, each delayed
    # one still goes alone and is stored as a delayed message, and its batch-mates are stored.
    futures = [auto.send_async(Message("AutoD", f"now{i}", delay_level=0 if i % 10 else 1 + i % 3))
               for i in range(300)]
    results = [f.result(10) for f in futures]
    assert all(r.ok for r in results)
    for i in (0, 10, 20):
        stored = admin.view_message(results[i].offset_msg_id)
        assert stored.body == f"now{i}".encode() and stored.delay_level == 1 + i % 3
    r = auto.send(Message("AutoD", b"later", delay_level=1))
    stored = admin.view_message(r.offset_msg_id)
    assert stored.body == b"later" and stored.delay_level == 1
    # A body of compress_msg_body_over_howmuch (4 KiB) or more is sent alone, compressed, as without batching.
    big = b"compress me " * 1000
    compressed = [f.result(10) for f in [auto.send_async(Message("AutoD", big)) for _ in range(20)]]
    for r in compressed:
        stored = admin.view_message(r.offset_msg_id)
        assert stored.sys_flag & 1 and stored.body == big and stored.store_size < len(big)
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
    with Admin(namesrv.addr) as admin, Producer("auto-f", namesrv.addr) as p:
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
    p = Producer("auto-q", namesrv.addr, batch_max_delay_ms=30_000)
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
    {"auto_batch": "async"}, {"auto_batch": None},
])
def test_bad_settings_are_refused(kw) -> None:
    with pytest.raises(MQClientError):
        Producer("auto-bad", "127.0.0.1:9", **kw)


def test_defaults_batch_async_sends_with_rocketmq_5s_bounds() -> None:
    p = Producer("auto-defaults", "127.0.0.1:9")
    assert (p.auto_batch, p.batch_max_delay_ms, p.batch_max_bytes, p.total_batch_max_bytes) == (
        AutoBatch.ASYNC, 10, 32 * 1024, 32 * 1024 * 1024)
    assert [Producer("auto-modes", "127.0.0.1:9", auto_batch=v).auto_batch for v in (True, False, AutoBatch.ALL)] == [
        AutoBatch.ALL, AutoBatch.OFF, AutoBatch.ALL]
