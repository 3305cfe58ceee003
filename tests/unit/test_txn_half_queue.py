"""The txn-checker's bookkeeping of one half queue and its op queue (no processes)."""

from __future__ import annotations

import time

from rocketmesh.model.message import MessageConst, MessageExt, MessageQueue
from rocketmesh.txn_checker.half_queue import HalfQueue, immunity_ms

HALF = MessageQueue("RMQ_SYS_TRANS_HALF_TOPIC", "broker-a", 0)
OP = MessageQueue("RMQ_SYS_TRANS_OP_HALF_TOPIC", "broker-a", 0)


def half(offset: int, born_ms: int, **props: str) -> MessageExt:
    return MessageExt("RMQ_SYS_TRANS_HALF_TOPIC", b"", dict(props), 0, 0, offset, 1000 + offset, 0, 0, born_ms,
                      "127.0.0.1:1", born_ms, "127.0.0.1:2", 0, 0, 0, f"id{offset}")


def op(offset: int, half_offset: int | str) -> MessageExt:
    return MessageExt("RMQ_SYS_TRANS_OP_HALF_TOPIC", str(half_offset).encode(), {"TAGS": "d"}, 0, 0, offset,
                      5000 + offset, 0, 0, 0, "127.0.0.1:1", 0, "127.0.0.1:2", 0, 0, 0, f"op{offset}")


def queue(start: int = 0) -> HalfQueue:
    hq = HalfQueue(HALF, OP, start)
    hq.op_next = 0
    return hq


def test_ops_settle_the_halves_they_name_and_the_op_offset_follows_the_half_offset():
    hq = queue()
    now = int(time.time() * 1000)
    hq.add_halves([half(i, now) for i in range(5)], time.monotonic())
    # Decisions arrive out of order: ops for halves 3, 0 and 1.
    assert hq.add_ops([op(0, 3), op(1, 0), op(2, 1)], half_base=0) == 3
    hq.op_next = 3
    assert sorted(m.queue_offset for m in hq.take_decided()) == [0, 1, 3]
    assert hq.pending_count == 2
    # With half 2 still pending the half queue is committed at 2: op 1 (half 0) and op 2 (half 1) are done,
    # op 0 (half 3) is not, so the op queue cannot move past it.
    assert hq.op_commit_offset(half_base=2) == 0
    # Half 2 and 4 settled by checks: the half queue moves to 5 and every op read is done.
    hq.settle([half(2, now), half(4, now)])
    assert hq.op_commit_offset(half_base=5) == 3
    assert hq.ops_waiting == 0


def test_ops_for_halves_below_the_committed_offset_are_done_on_sight_and_bad_bodies_are_skipped():
    hq = queue(start=10)
    assert hq.add_ops([op(0, 4), op(1, "not a number"), op(2, 12)], half_base=10) == 3
    hq.op_next = 3
    assert hq.ops_waiting == 1
    assert hq.op_commit_offset(half_base=10) == 2
    assert hq.op_commit_offset(half_base=13) == 3


def test_an_op_that_arrives_before_its_half_settles_it_when_it_comes():
    hq = queue()
    hq.add_ops([op(0, 7)], half_base=0)
    hq.add_halves([half(7, 0)], time.monotonic())
    assert [m.queue_offset for m in hq.take_decided()] == [7]


def test_due_needs_the_immunity_time_and_an_arrival_before_the_pass():
    hq = queue()
    now = int(time.time() * 1000)
    before = time.monotonic()
    hq.add_halves([half(0, now - 10_000), half(1, now - 500), half(2, now - 10_000, **{
        MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "60"}), half(3, now + 60_000)], before)
    started = time.monotonic()
    due = [m.queue_offset for m in hq.due(now, started, transaction_timeout_ms=6000)]
    # 0: old enough; 1: born 0.5 s ago; 2: immune for 60 s; 3: born in the future by this clock (checked).
    assert due == [0, 3]
    # A copy stored by a check arrives during the pass: it waits for the next one.
    hq.add_halves([half(4, now - 10_000)], time.monotonic())
    assert [m.queue_offset for m in hq.due(now, started, 6000)] == [0, 3]
    assert [m.queue_offset for m in hq.due(now, time.monotonic() + 1, 6000)] == [0, 3, 4]


def test_immunity_time_is_the_property_in_seconds_or_the_timeout():
    assert immunity_ms(half(0, 0), 6000) == 6000
    assert immunity_ms(half(0, 0, **{MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "20"}), 6000) == 20_000
    assert immunity_ms(half(0, 0, **{MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "-1"}), 6000) == 6000
    assert immunity_ms(half(0, 0, **{MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS: "soon"}), 6000) == 6000


def test_nothing_to_commit_before_the_op_queue_was_read():
    hq = HalfQueue(HALF, OP, 0)
    assert hq.op_commit_offset(half_base=5) is None
