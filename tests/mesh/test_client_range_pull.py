"""pull_range (exactly [start, end) of a queue, by offset, with the broker's filter) and GroupRegistration
(a consumer group registered by heartbeats alone), against a real name server and broker."""

from __future__ import annotations

import pytest

from procs import wait_for
from rocketmesh import Message, MessageQueue
from rocketmesh.client.consumer.core import make_subscription
from rocketmesh.client.stream.group_registration import GroupRegistration
from rocketmesh.client.stream.range_pull import pull_range
from rocketmesh.model.codec import decode_records

TOPIC = "RangeTopic"
#: A broker that filters by SQL92 too.
BROKER_ARGS = dict(enablePropertyFilter="true")


@pytest.fixture
def filled(broker, admin, producer):
    """Queue 0 of TOPIC holds 60 messages: body i, tag A for even i, B for odd, property n = i."""
    admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    admin.wait_topic_route(TOPIC)
    mq = MessageQueue(TOPIC, broker.broker_name, 0)
    producer.send_batch([Message(TOPIC, str(i).encode(), tags="A" if i % 2 == 0 else "B", properties={"n": str(i)})
                         for i in range(60)], queue=mq)
    wait_for(lambda: admin.max_offset(mq) == 60, 10, "60 messages in queue 0")
    return mq


def _pulled(admin, mq, sub, start, end, batch=1024):
    chunks = list(pull_range(admin.instance, "range-reader", mq, sub, start, end, pull_batch_size=batch))
    msgs = [m for c in chunks for m in decode_records(c.records)]
    assert sum(c.count for c in chunks) == len(msgs)
    return chunks, msgs


def test_pull_range_returns_exactly_the_offsets_asked_for(admin, filled):
    chunks, msgs = _pulled(admin, filled, make_subscription(TOPIC), 7, 23, batch=5)
    assert [m.queue_offset for m in msgs] == list(range(7, 23))
    assert [m.body for m in msgs] == [str(i).encode() for i in range(7, 23)]
    assert len(chunks) == 4 and chunks[-1].next_offset == 23
    # Asked past the queue's end: stops at the end, without waiting.
    _, msgs = _pulled(admin, filled, make_subscription(TOPIC), 55, 500)
    assert [m.queue_offset for m in msgs] == list(range(55, 60))


def test_pull_range_filters_on_the_broker_and_never_passes_end(admin, filled):
    _, msgs = _pulled(admin, filled, make_subscription(TOPIC, "B"), 10, 20, batch=3)
    assert [m.queue_offset for m in msgs] == [11, 13, 15, 17, 19]
    _, msgs = _pulled(admin, filled, make_subscription(TOPIC, sql="n >= 30 AND n < 34"), 0, 32)
    assert [m.body for m in msgs] == [b"30", b"31"]
    # A filtered pull reads past what matches; nothing at or past end comes back.
    _, msgs = _pulled(admin, filled, make_subscription(TOPIC, "A"), 0, 5, batch=1)
    assert [m.queue_offset for m in msgs] == [0, 2, 4]


def test_a_group_registration_is_listed_and_commits_offsets(admin, filled):
    group = "range-registered"
    with GroupRegistration(group, admin.namesrv_addrs, [make_subscription(TOPIC)]) as reg:
        conn = wait_for(lambda: admin.consumer_connection(group), 10, "the group's connection")
        assert [c.client_id for c in conn.connections] == [reg.client_id]
        assert TOPIC in conn.subscriptions and conn.consume_type == "CONSUME_ACTIVELY"
        reg.commit({filled: 42})
        assert reg.committed(filled) == 42
        stats = admin.consume_stats(group, TOPIC)
        assert stats.offset_table[filled].consumer_offset == 42
        assert stats.offset_table[filled].broker_offset == 60
    wait_for(lambda: admin.consumer_ids(group) == [], 10, "the group left")
