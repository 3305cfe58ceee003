"""AsyncPullConsumer against real name server and broker processes: each test drives its own event loop with
``asyncio.run`` and checks what an application sees (messages, offsets, the loop's responsiveness)."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest
from test_readme import run_example

from aiokit import Ticker
from clientkit import FAST_CLIENT, make_topic
from procs import FAST_BROKER
from rocketmesh import Admin, Message
from rocketmesh.aio import AsyncPullConsumer
from rocketmesh.model.message import MessageExt, MessageQueue

BROKER_ARGS = dict(FAST_BROKER)
#: A new group reads from the first message; fast heartbeats so a second consumer of the group shows at once.
FIRST = dict(consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT)


def send_all(producer, topic: str, n: int, prefix: str = "m") -> list[str]:
    bodies = [f"{prefix}{i}" for i in range(n)]
    for body in bodies:
        producer.send(Message(topic, body))
    return bodies


async def take(consumer: AsyncPullConsumer, n: int, timeout_s: float = 15.0) -> list[MessageExt]:
    """Exactly ``n`` messages from ``getmany`` (never more: the last call asks only for what is missing)."""
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n:
        assert time.monotonic() < deadline, f"only {len(got)} of {n} messages within {timeout_s} s"
        got.extend(await consumer.getmany(timeout_ms=1000, max_records=n - len(got)))
    return got


def offsets(msgs: list[MessageExt]) -> list[int]:
    return [m.queue_offset for m in msgs]


def test_async_for_gets_each_message_once_in_queue_order(namesrv, admin, producer):
    topic = "AioIter"
    make_topic(admin, topic, 4)
    sent = send_all(producer, topic, 200)

    async def main() -> tuple[list[MessageExt], list[MessageExt]]:
        got: list[MessageExt] = []
        async with AsyncPullConsumer("aio-iter", namesrv.addr, instance_name="aio-iter", **FIRST) as consumer:
            consumer.subscribe(topic)
            async for msg in consumer:
                got.append(msg)
                if len(got) == len(sent):
                    break
            extra = await consumer.getmany(timeout_ms=500)
        return got, extra

    got, extra = asyncio.run(main())
    assert extra == []
    assert sorted(m.body.decode() for m in got) == sorted(sent)  # each exactly once
    by_queue: dict[int, list[int]] = collections.defaultdict(list)
    for m in got:
        by_queue[m.queue_id].append(m.queue_offset)
    assert sorted(by_queue) == [0, 1, 2, 3]
    for qid, seen in by_queue.items():
        assert seen == list(range(len(seen))), f"queue {qid} out of order"


def test_getmany_keeps_the_rest_of_a_batch_returns_on_arrival_and_times_out(namesrv, admin, producer):
    topic = "AioMany"
    make_topic(admin, topic, 1)
    send_all(producer, topic, 50)
    mq = MessageQueue(topic, "broker-a", 0)

    async def main() -> None:
        async with AsyncPullConsumer("aio-many", namesrv.addr, instance_name="aio-many", pull_batch_size=32,
                                     **FIRST) as consumer:
            consumer.assign([mq])
            got: list[MessageExt] = []
            while len(got) < 50:
                batch = await consumer.getmany(timeout_ms=3000, max_records=7)
                assert 1 <= len(batch) <= 7
                got.extend(batch)
            # Batches of 32 handed out 7 at a time: nothing lost, nothing reordered, nothing twice.
            assert offsets(got) == list(range(50))
            assert [m.body for m in got] == [f"m{i}".encode() for i in range(50)]

            t0 = time.monotonic()
            assert await consumer.getmany(timeout_ms=400) == []
            waited = time.monotonic() - t0
            assert 0.35 <= waited < 2.0

            waiting = asyncio.create_task(consumer.getmany(timeout_ms=10_000))
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            await asyncio.to_thread(producer.send, Message(topic, "late"))
            batch = await waiting
            assert [m.body for m in batch] == [b"late"]
            assert time.monotonic() - t0 < 2.0  # woken by the arrival, not by the 10 s timeout

    asyncio.run(main())


def test_commit_then_a_new_consumer_of_the_group_starts_after_the_committed_offsets(namesrv, admin, producer):
    topic = "AioCommit"
    make_topic(admin, topic, 1)
    send_all(producer, topic, 30)
    mq = MessageQueue(topic, "broker-a", 0)

    async def main() -> tuple[int, list[int]]:
        async with AsyncPullConsumer("aio-commit", namesrv.addr, instance_name="aio-commit1", auto_commit=False,
                                     **FIRST) as consumer:
            consumer.assign([mq])
            assert offsets(await take(consumer, 20)) == list(range(20))
            await consumer.commit()
            committed = await consumer.committed(mq)
            await take(consumer, 5)  # handed out but never committed (no auto commit): read again below
        async with AsyncPullConsumer("aio-commit", namesrv.addr, instance_name="aio-commit2", auto_commit=False,
                                     **FIRST) as again:
            again.assign([mq])
            rest = await take(again, 10)
        return committed, offsets(rest)

    committed, rest = asyncio.run(main())
    assert committed == 20
    assert rest == list(range(20, 30))


def test_stop_commits_what_was_handed_out(namesrv, admin, producer):
    topic = "AioStop"
    make_topic(admin, topic, 1)
    send_all(producer, topic, 30)

    async def main() -> list[int]:
        # Auto commit every 60 s: only stop() can have committed the first 15.
        async with AsyncPullConsumer("aio-stop", namesrv.addr, instance_name="aio-stop1",
                                     auto_commit_interval_ms=60_000, **FIRST) as consumer:
            consumer.subscribe(topic)
            n = 0
            async for _ in consumer:
                n += 1
                if n == 15:
                    break
        async with AsyncPullConsumer("aio-stop", namesrv.addr, instance_name="aio-stop2", **FIRST) as again:
            again.subscribe(topic)
            return offsets(await take(again, 15))

    assert asyncio.run(main()) == list(range(15, 30))


def test_seek_and_seek_to_time_replay_on_a_queue_assigned_while_running(namesrv, admin, producer):
    topic = "AioSeek"
    make_topic(admin, topic, 1)
    send_all(producer, topic, 20)
    mq = MessageQueue(topic, "broker-a", 0)

    async def main() -> None:
        async with AsyncPullConsumer("aio-seek", namesrv.addr, instance_name="aio-seek", **FIRST) as consumer:
            assert await consumer.fetch_message_queues(topic) == [mq]
            consumer.assign([mq])
            await consumer.seek(mq, 3)  # made after the assignment: the queue is assigned by now
            assert consumer.assignment() == [mq]
            first = await take(consumer, 17)
            assert offsets(first) == list(range(3, 20))

            await consumer.seek(mq, 5)
            assert offsets(await take(consumer, 3)) == [5, 6, 7]

            ts = first[9].store_timestamp  # offset 12
            await consumer.seek_to_time(ts, mq)
            replay = await take(consumer, 1)
            assert replay[0].store_timestamp >= ts and replay[0].queue_offset <= 12

            await consumer.seek_to_begin(mq)
            assert offsets(await take(consumer, 2)) == [0, 1]

            await consumer.seek_to_end(mq)
            assert await consumer.getmany(timeout_ms=500) == []
            await asyncio.to_thread(producer.send, Message(topic, "after-end"))
            assert [m.body for m in await take(consumer, 1)] == [b"after-end"]

    asyncio.run(main())


def test_a_cancelled_getmany_loses_nothing(namesrv, admin, producer):
    topic = "AioCancel"
    make_topic(admin, topic, 1)
    mq = MessageQueue(topic, "broker-a", 0)

    async def main() -> None:
        async with AsyncPullConsumer("aio-cancel", namesrv.addr, instance_name="aio-cancel", **FIRST) as consumer:
            consumer.assign([mq])
            # Cancelled while nothing arrives.
            for _ in range(3):
                with pytest.raises(TimeoutError):  # getmany must not return with nothing sent
                    await asyncio.wait_for(consumer.getmany(timeout_ms=10_000), 0.2)
            # Cancelled right after the messages arrive: the loop is held up (by this very test) while they are
            # sent and pulled, so the waiting calls have been woken but have not run when they are cancelled.
            for i in range(3):
                waiting = [asyncio.create_task(consumer.getmany(timeout_ms=10_000)),
                           asyncio.create_task(anext(aiter(consumer)))]
                await asyncio.sleep(0.05)
                bodies = [f"c{i}-{k}" for k in range(3)]
                producer.send_batch([Message(topic, body) for body in bodies])
                time.sleep(0.3)  # blocks the loop on purpose: the pull lands meanwhile
                for task in waiting:
                    task.cancel()
                outcomes = await asyncio.gather(*waiting, return_exceptions=True)
                assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
                # What the cancelled calls did not return comes to the next one, once and in order.
                assert [m.body.decode() for m in await take(consumer, 3)] == bodies
                assert await consumer.getmany(timeout_ms=300) == []

    asyncio.run(main())


def test_the_loop_stays_responsive_while_the_consumer_drains_thousands_of_messages(namesrv, admin, producer):
    topic = "AioTicker"
    make_topic(admin, topic, 4)
    n = 4000
    for start in range(0, n, 100):
        producer.send_batch([Message(topic, b"x" * 200) for _ in range(start, start + 100)])

    async def main() -> tuple[int, Ticker, float]:
        async with Ticker() as ticker:
            await asyncio.sleep(0.05)
            seen = 0
            async with AsyncPullConsumer("aio-ticker", namesrv.addr, instance_name="aio-ticker", pull_batch_size=32,
                                         **FIRST) as consumer:
                consumer.subscribe(topic)
                t0 = time.monotonic()
                async for _ in consumer:
                    seen += 1
                    if seen == n:
                        break
                drain_s = time.monotonic() - t0
        return seen, ticker, drain_s

    seen, ticker, drain_s = asyncio.run(main())
    print(f"drained {seen} messages in {drain_s:.2f} s ({seen / drain_s:.0f} msg/s); {ticker.describe()}")
    assert seen == n
    # What the SDK ran on the loop (aiokit.Ticker leaves out garbage collections and other processes' time).
    assert ticker.held_max < 0.020, ticker.describe()


def test_the_docs_example_reads_ten_messages_and_commits_them_on_leaving(namesrv, admin, producer):
    for i in range(10):
        producer.send(Message("TopicTest", f"async pull me {i}", tags="TagA"))
    out = run_example("async-orders-reader", namesrv.addr)
    assert out.returncode == 0, out.stderr
    assert sum("async pull me" in line for line in out.stdout.splitlines()) == 10
    with Admin(namesrv.addr) as a:
        assert a.consume_stats("async-orders-reader", "TopicTest").total_diff() == 0
