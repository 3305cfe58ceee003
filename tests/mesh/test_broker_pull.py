"""PULL_MESSAGE on a real broker, over the wire: statuses, offsets, filters, long polling, bad input."""

from __future__ import annotations

import time
from collections.abc import Iterator

import orjson
import pytest

from procs import BrokerProcess
from rocketmesh import Admin, Message, Producer
from rocketmesh.model.codec import decode_records, tags_hash_code
from rocketmesh.remoting import RemotingClient, RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.headers import (
    PullMessageRequestHeader,
    PullSysFlag,
    QueryConsumeQueueRequestHeader,
)

TOPIC = "PullTopic"


@pytest.fixture
def sent(namesrv, broker) -> Iterator[list[str]]:
    """Five messages in queue 0 of a one-queue topic, tags A, B, A, B, A, all in the consume queue."""
    bodies = [f"m{i}" for i in range(5)]
    with Admin(namesrv.addr) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        admin.wait_topic_route(TOPIC)
        with Producer("pull-test", namesrv.addr) as p:
            for i, body in enumerate(bodies):
                p.send(Message(TOPIC, body, tags="A" if i % 2 == 0 else "B"))
        mq = next(iter(admin.topic_status(TOPIC)))
        assert admin.max_offset(mq) == 5  # readable as soon as the sends returned
    yield bodies


def pull(client: RemotingClient, broker: BrokerProcess, offset: int, max_nums: int = 32, topic: str = TOPIC,
         subscription: str = "*", expression_type: str = "TAG", sys_flag: int = 0, suspend_ms: int = 0,
         timeout_ms: int = 3000):
    header = PullMessageRequestHeader("pull-group", topic, 0, offset, max_nums, sys_flag,
                                      suspend_timeout_millis=suspend_ms, subscription=subscription,
                                      expression_type=expression_type)
    return client.invoke_sync(broker.addr, request(RequestCode.PULL_MESSAGE, header.to_ext()), timeout_ms)


def bodies_of(resp) -> list[str]:
    return [m.body.decode() for m in decode_records(resp.body)]


def test_found_returns_records_and_the_next_offset(remoting_client, broker, sent):
    resp = pull(remoting_client, broker, 0, max_nums=3)
    assert resp.code == ResponseCode.SUCCESS
    assert bodies_of(resp) == sent[:3]
    assert (resp.ext["nextBeginOffset"], resp.ext["minOffset"], resp.ext["maxOffset"]) == (3, 0, 5)


def test_end_of_queue_and_offsets_out_of_range(remoting_client, broker, sent):
    at_end = pull(remoting_client, broker, 5)
    assert at_end.code == ResponseCode.PULL_NOT_FOUND and at_end.ext["nextBeginOffset"] == 5
    too_far = pull(remoting_client, broker, 100)
    # As RocketMQ: past the end of a queue that still starts at 0, start over from 0.
    assert too_far.code == ResponseCode.PULL_OFFSET_MOVED and too_far.ext["nextBeginOffset"] == 0


def test_tag_filter_on_the_broker_and_a_stretch_with_no_match(remoting_client, broker, sent):
    only_b = pull(remoting_client, broker, 0, subscription="B")
    assert bodies_of(only_b) == ["m1", "m3"]
    none = pull(remoting_client, broker, 0, subscription="C")
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.ext["nextBeginOffset"] == 5


def test_a_held_pull_is_answered_when_a_message_arrives(namesrv, remoting_client, broker, sent):
    header = PullMessageRequestHeader("pull-group", TOPIC, 0, 5, 32, PullSysFlag.SUSPEND, suspend_timeout_millis=10_000)
    fut = remoting_client.invoke_async(broker.addr, request(RequestCode.PULL_MESSAGE, header.to_ext()), 15_000)
    time.sleep(0.5)
    assert not fut.done()  # held, not answered "nothing new"
    with Producer("pull-test-2", namesrv.addr) as p:
        p.send(Message(TOPIC, "late"))
        sent_at = time.monotonic()
    resp = fut.result(5)
    assert time.monotonic() - sent_at < 2.0
    assert resp.code == ResponseCode.SUCCESS and bodies_of(resp) == ["late"]


def test_a_held_pull_is_answered_by_the_put_and_the_next_pull_at_the_end_is_nothing_yet(
        namesrv, remoting_client, broker, sent):
    """A pull held at the queue's end gets the new message its filter takes, a pull that comes after the
    put reads it too, and the next pull, at the queue's end, is "nothing yet", not an offset to correct."""
    held = PullMessageRequestHeader("pull-group", TOPIC, 0, 5, 32, PullSysFlag.SUSPEND,
                                    suspend_timeout_millis=10_000, subscription="A || C")
    fut = remoting_client.invoke_async(broker.addr, request(RequestCode.PULL_MESSAGE, held.to_ext()), 15_000)
    time.sleep(0.3)
    with Producer("pull-test-4", namesrv.addr) as p:
        p.send(Message(TOPIC, "not-for-you", tags="B"))  # offset 5: the held pull's filter refuses it
        p.send(Message(TOPIC, "early", tags="C"))  # offset 6
    resp = fut.result(5)
    assert resp.code == ResponseCode.SUCCESS and bodies_of(resp) == ["early"]
    assert resp.ext["nextBeginOffset"] == 7
    nxt = pull(remoting_client, broker, 7)
    assert nxt.code == ResponseCode.PULL_NOT_FOUND and nxt.ext["nextBeginOffset"] == 7
    assert pull(remoting_client, broker, 8).code == ResponseCode.PULL_OFFSET_MOVED  # past the stored end
    late = pull(remoting_client, broker, 5)
    assert late.code == ResponseCode.SUCCESS and bodies_of(late) == ["not-for-you", "early"]
    assert late.ext["nextBeginOffset"] == 7 and late.ext["maxOffset"] == 7
    only_c = pull(remoting_client, broker, 5, subscription="C")
    assert bodies_of(only_c) == ["early"] and only_c.ext["nextBeginOffset"] == 7


def test_a_held_pull_whose_filter_matches_nothing_keeps_waiting_then_times_out(namesrv, remoting_client, broker,
                                                                               sent):
    header = PullMessageRequestHeader("pull-group", TOPIC, 0, 5, 32, PullSysFlag.SUSPEND, suspend_timeout_millis=1500,
                                      subscription="Z")
    started = time.monotonic()
    fut = remoting_client.invoke_async(broker.addr, request(RequestCode.PULL_MESSAGE, header.to_ext()), 10_000)
    time.sleep(0.5)
    # Held. (A pull that came after the send would find only a refused message and be answered
    # PULL_RETRY_IMMEDIATELY at once, as RocketMQ does.)
    assert not fut.done()
    with Producer("pull-test-3", namesrv.addr) as p:
        p.send(Message(TOPIC, "not-for-you", tags="A"))
    resp = fut.result(5)
    assert time.monotonic() - started >= 1.4
    assert resp.code == ResponseCode.PULL_NOT_FOUND and resp.ext["nextBeginOffset"] == 6


def test_bad_requests_are_answered_and_the_broker_keeps_serving(remoting_client, broker, sent):
    unknown = pull(remoting_client, broker, 0, topic="NoSuchTopic")
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    sql = pull(remoting_client, broker, 0, subscription="a > 1", expression_type="SQL92")
    assert sql.code == ResponseCode.SYSTEM_ERROR and "enablePropertyFilter" in sql.remark
    bad = remoting_client.invoke_sync(broker.addr, request(RequestCode.PULL_MESSAGE, {"topic": TOPIC}), 3000)
    assert bad.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in bad.remark
    assert pull(remoting_client, broker, 0).code == ResponseCode.SUCCESS


def cq_file_entries(broker: BrokerProcess, topic: str, first: int, count: int) -> list[tuple[int, int, int]]:
    """Entries ``first``.. of queue 0's first consume-queue file (all zero while there is no file)."""
    import struct

    path = broker.store_dir / "consumequeue" / topic / "0" / f"{0:020d}"
    raw = path.read_bytes() if path.exists() else b""
    raw = raw.ljust((first + count) * 20, b"\0")
    return [struct.unpack_from(">qiq", raw, i * 20) for i in range(first, first + count)]


def queue_tag_codes(client: RemotingClient, broker: BrokerProcess, topic: str) -> list[int]:
    """The tag codes QUERY_CONSUME_QUEUE lists for queue 0 of ``topic``."""
    header = QueryConsumeQueueRequestHeader(topic, 0, 0, 32)
    resp = client.invoke_sync(broker.addr, request(RequestCode.QUERY_CONSUME_QUEUE, header.to_ext()), 3000)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return [e["tagsCode"] for e in orjson.loads(resp.body)["queueData"]]


def test_a_sent_message_is_in_its_consume_queue_file_with_its_tag_code_once_read(
        namesrv, remoting_client, broker):
    """No second copy of the queue anywhere: once the sends returned and a read saw them, the file holds
    each entry, tag code and all, and a filtered pull, a plain pull and an admin's listing read it there."""
    with Admin(namesrv.addr) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        admin.wait_topic_route(TOPIC)
        with Producer("pull-test-5", namesrv.addr) as p:
            for i, tag in enumerate("ABAB"):
                p.send(Message(TOPIC, f"m{i}", tags=tag))
        mq = next(iter(admin.topic_status(TOPIC)))
        assert admin.max_offset(mq) == 4
        entries = cq_file_entries(broker, TOPIC, 0, 4)
        assert [size > 0 for _, size, _ in entries] == [True] * 4
        assert [code for _, _, code in entries] == [tags_hash_code(t) for t in "ABAB"]
    only_b = pull(remoting_client, broker, 0, subscription="B")
    assert bodies_of(only_b) == ["m1", "m3"] and only_b.ext["nextBeginOffset"] == 4
    assert bodies_of(pull(remoting_client, broker, 1)) == ["m1", "m2", "m3"]
    assert queue_tag_codes(remoting_client, broker, TOPIC) == [tags_hash_code(t) for t in "ABAB"]
