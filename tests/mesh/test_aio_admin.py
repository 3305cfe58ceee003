"""AsyncAdmin against real name server and broker processes, as an asyncio application uses it at run time:
create a topic, read its route, find a message by key and by id, follow a consumer group's progress."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from test_readme import run_example

from clientkit import FAST_CLIENT
from procs import FAST_BROKER
from rocketmesh import Message, MQBrokerError
from rocketmesh.aio import AsyncAdmin, AsyncProducer, AsyncPullConsumer
from rocketmesh.client.results import ConsumeStats
from rocketmesh.remoting import ResponseCode

BROKER_ARGS = dict(FAST_BROKER)
T = TypeVar("T")


async def eventually(check: Callable[[], Awaitable[T | None]], what: str, timeout_s: float = 15.0) -> T:
    """``await check()`` until it gives something truthy (the broker builds its indexes and consume queues
    asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_async_admin_creates_a_topic_finds_messages_and_reports_consumer_progress(namesrv, broker):
    topic, group = "AioAdminT", "aio-admin-group"

    async def main() -> None:
        async with AsyncAdmin(namesrv.addr) as admin, AsyncProducer("aio-admin-producer", namesrv.addr) as producer:
            with pytest.raises(MQBrokerError) as no_route:
                await admin.topic_route(topic)
            assert no_route.value.response_code == ResponseCode.TOPIC_NOT_EXIST

            assert await admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2) == [broker.addr]
            route = await admin.wait_topic_route(topic)
            assert [bd.broker_name for bd in route.broker_datas] == ["broker-a"]
            assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(2, 2)]
            assert topic in await admin.topic_list()

            sent = await producer.send(Message(topic, "the order", keys="order-1"))
            mq = sent.message_queue
            assert await eventually(lambda: admin.query_msg_by_key(topic, "order-1"), "the key indexed")
            by_key = await admin.query_msg_by_key(topic, "order-1")
            assert [m.body for m in by_key] == [b"the order"]
            by_id = await admin.query_msg_by_id(sent.msg_id, topic)  # the client's id: found by the topic's index
            by_offset_id = await admin.query_msg_by_id(sent.offset_msg_id)  # the broker's: read where it points
            viewed = await admin.view_message(sent.offset_msg_id)
            assert {by_id.unique_key, by_offset_id.unique_key, viewed.unique_key} == {sent.msg_id}
            assert (await admin.min_offset(mq), await admin.max_offset(mq)) == (0, 1)
            status = await admin.topic_status(topic)
            assert status[mq].max_offset == 1

            # Consumer progress: what the group committed, and the lag behind what was sent since.
            async with AsyncPullConsumer(group, namesrv.addr, instance_name="aio-admin", auto_commit=False,
                                         consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT) as consumer:
                consumer.subscribe(topic)
                got = await consumer.getmany(timeout_ms=15_000)
                assert [m.body for m in got] == [b"the order"]
                await consumer.commit()
                for i in range(3):
                    await producer.send(Message(topic, f"later-{i}"), queue=mq)
                stats = await eventually(
                    lambda: _stats_when(admin, group, topic, lambda s: s.total_diff() == 3), "the lag of 3")
                assert stats.offset_table[mq].consumer_offset == 1
                assert stats.offset_table[mq].broker_offset == 4
                conn = await admin.consumer_connection(group)
                assert [c.client_id.endswith("@aio-admin") for c in conn.connections] == [True]
                assert list(conn.subscriptions) == [topic]
                assert await admin.topic_consumers(topic) == [group]
                in_broker = await admin.broker_consume_stats(broker.addr)
                assert in_broker.group_stats(group) == await admin.consume_stats(group)

            producers = await admin.producer_connection("aio-admin-producer")
            assert [c.language for c in producers.connections] == ["PYTHON"]

    asyncio.run(main())


async def _stats_when(admin: AsyncAdmin, group: str, topic: str,
                      ok: Callable[[ConsumeStats], bool]) -> ConsumeStats | None:
    stats = await admin.consume_stats(group, topic)
    return stats if ok(stats) else None


def test_the_docs_example_creates_a_topic_and_finds_its_message(namesrv, broker):
    out = run_example("aio-admin-example", namesrv.addr)
    assert out.returncode == 0, out.stderr
    route, found = out.stdout.splitlines()
    assert route == "[('broker-a', 4)]"
    assert found == "order 1 created [0]"
