"""AsyncPushConsumer against real name server, broker and scheduler processes: async listeners on the
program's loop, with the threaded consumer's rebalance, retries, dead letters and offsets; and a loop that
stays responsive while ten thousand messages go through it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from typing import Any

from aiokit import Ticker, run, until
from clientkit import FAST_CLIENT, make_topic, quietly
from procs import FAST_BROKER, wait_for
from rocketmesh import Message, MQClientError, SendStatus
from rocketmesh.aio import AsyncProducer, AsyncPushConsumer
from rocketmesh.client import CMResult
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from rocketmesh.model.message import MessageExt
from rocketmesh.remoting import ResponseCode

#: Short delay levels: the first retry (level 3) after 1 s, the second (level 4) after 1 s too.
BROKER_ARGS = dict(FAST_BROKER, messageDelayLevel="1s 1s 1s 1s 2s")
FAST_CONSUMER = dict(FAST_CLIENT, rebalance_interval_ms=500, consume_from="CONSUME_FROM_FIRST_OFFSET")
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


def consumer(namesrv: str, group: str, topic: str, listener: Any, orderly: bool = False,
             **settings: Any) -> AsyncPushConsumer:
    c = AsyncPushConsumer(group, namesrv, **{**FAST_CONSUMER, "instance_name": f"{group}-{id(listener)}",
                                             **settings})
    c.subscribe(topic, "*")
    c.register_listener(listener, orderly=orderly)
    return c


def test_an_async_listener_runs_on_the_loop_with_bounded_concurrency_and_consumes_across_a_rebalance(
        namesrv, broker, admin):
    make_topic(admin, "AioPushT", 4)
    consumed: dict[str, list[str]] = defaultdict(list)
    threads: set[int] = set()
    running = {"now": 0, "most": 0}

    def listener_of(name: str) -> Any:
        async def on_message(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
            threads.add(threading.get_ident())
            running["now"] += 1
            running["most"] = max(running["most"], running["now"])
            await asyncio.sleep(0.005)
            running["now"] -= 1
            consumed[name] += [m.body.decode() for m in msgs]
            return SUCCESS
        return on_message

    async def main() -> tuple[list[str], int, int]:
        a = consumer(namesrv.addr, "aio-push", "AioPushT", listener_of("a"), consume_thread_nums=3)
        b = consumer(namesrv.addr, "aio-push", "AioPushT", listener_of("b"), consume_thread_nums=3)
        sent: list[str] = []
        async with AsyncProducer("aio-push-p", namesrv.addr, **FAST_CLIENT) as producer:
            async def send(n: int) -> None:
                for _ in range(n):
                    body = f"m{len(sent)}"
                    assert (await producer.send(Message("AioPushT", body.encode()))).send_status is SendStatus.SEND_OK
                    sent.append(body)

            await a.start()
            await send(150)
            await b.start()  # the group's queues are split between a and b
            await until(lambda: len(a.assigned_queues()) == 2 and len(b.assigned_queues()) == 2, 15, "a 2/2 split")
            await send(150)
            await a.stop()  # b takes all four queues back
            await until(lambda: len(b.assigned_queues()) == 4, 15, "b holding every queue")
            await send(150)
            await until(lambda: set(consumed["a"]) | set(consumed["b"]) >= set(sent), 30, "every message consumed")
            await b.stop()
        return sent, len(consumed["a"]), len(consumed["b"])

    main_thread = threading.get_ident()
    sent, by_a, by_b = run(main())
    assert set(consumed["a"]) | set(consumed["b"]) == set(sent)  # nothing lost
    assert by_a > 0 and by_b > 0
    assert threads == {main_thread}  # every listener call ran on the program's loop
    assert 1 < running["most"] <= 6  # concurrent, but at most consume_thread_nums per consumer


def test_reconsume_later_goes_through_the_retry_topic_to_the_dlq_after_max_reconsume_times(
        namesrv, broker, scheduler, admin):
    make_topic(admin, "AioRetryT", 1)
    seen: list[tuple[str, str, int]] = []

    async def on_message(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        seen.extend((m.body.decode(), m.topic, m.reconsume_times) for m in msgs)
        return LATER if any(m.body == b"poison" for m in msgs) else SUCCESS

    async def main() -> str:
        async with AsyncProducer("aio-retry-p", namesrv.addr, **FAST_CLIENT) as producer:
            sent = await producer.send(Message("AioRetryT", b"poison"))
            await producer.send(Message("AioRetryT", b"fine"))
        async with consumer(namesrv.addr, "aio-retry", "AioRetryT", on_message, max_reconsume_times=2):
            await until(quietly(lambda: admin.dlq_messages("aio-retry")), 30, "the message dead-lettered")
        return sent.msg_id

    msg_id = run(main())
    assert [s for s in seen if s[0] == "poison"] == [("poison", "AioRetryT", 0), ("poison", "AioRetryT", 1),
                                                     ("poison", "AioRetryT", 2)]
    assert [s for s in seen if s[0] == "fine"] == [("fine", "AioRetryT", 0)]
    [letter] = admin.dlq_messages("aio-retry")
    assert (letter.msg_id, letter.original_topic) == (msg_id, "AioRetryT")


def test_stop_commits_the_offsets_of_what_was_consumed_and_an_orderly_listener_keeps_queue_order(
        namesrv, broker, admin):
    make_topic(admin, "AioStopT", 2)
    order: dict[int, list[int]] = defaultdict(list)

    async def on_message(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        for m in msgs:
            order[m.queue_id].append(m.queue_offset)
        await asyncio.sleep(0)
        return ConsumeOrderlyStatus.SUCCESS

    async def main() -> None:
        async with AsyncProducer("aio-stop-p", namesrv.addr, **FAST_CLIENT) as producer:
            await asyncio.gather(*(producer.send(Message("AioStopT", f"{i}".encode())) for i in range(200)))
        c = consumer(namesrv.addr, "aio-stop", "AioStopT", on_message, orderly=True)
        await c.start()
        await until(lambda: sum(map(len, order.values())) >= 200, 20, "200 messages consumed")
        await c.stop()

    run(main())
    assert all(offsets == sorted(offsets) for offsets in order.values())
    # What was consumed is committed on the broker by stop(): the group has no lag left.
    stats = wait_for(quietly(lambda: admin.consume_stats("aio-stop", "AioStopT")), 10, what="consume stats")
    assert stats.total_diff() == 0


def test_the_loop_is_never_held_over_20_ms_while_10000_messages_are_sent_and_consumed(namesrv, broker, admin):
    """The loop's thread never runs the SDK's and the application's code for 20 ms between two 2 ms ticks
    (aiokit.Ticker: the interpreter's garbage collections and the time the machine gives to other processes
    are not counted; bench/aio_loop_bench.py reports the ticker's lateness)."""
    make_topic(admin, "AioTickT", 4)
    total = 10_000
    got: set[str] = set()

    async def on_message(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        got.update(m.body.decode() for m in msgs)
        return SUCCESS

    async def main() -> Ticker:
        async with AsyncProducer("aio-tick-p", namesrv.addr, **FAST_CLIENT) as producer, \
                consumer(namesrv.addr, "aio-tick", "AioTickT", on_message, consume_message_batch_max_size=8), \
                Ticker() as ticker:
            async def sender(first: int) -> None:  # 50 tasks, each awaiting its sends one after another
                for i in range(first, total, 50):
                    await producer.send(Message("AioTickT", f"t{i}".encode()))

            await asyncio.gather(*(sender(n) for n in range(50)))
            await until(lambda: len(got) >= total, 60, f"{total} messages consumed")
        return ticker

    ticker = run(main())
    assert len(got) == total
    assert len(ticker.ticks) > 100
    assert ticker.held_max < 0.020, ticker.describe()


def test_a_cancelled_start_leaves_no_client_of_the_group_and_the_producer_shut_down(namesrv, broker, admin):
    make_topic(admin, "AioCancelStartT", 2)

    async def on_message(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        return SUCCESS

    async def main() -> tuple[str, str, str]:
        outcomes = []
        for delay in (0.0, 0.05, 0.2):  # before, during and (likely) after the registration
            c = consumer(namesrv.addr, "aio-cancel-start", "AioCancelStartT", on_message,
                         instance_name=f"cancel-start-{delay}")
            task = asyncio.create_task(c.start())
            await asyncio.sleep(delay)
            task.cancel()
            try:
                await task
                outcomes.append("started")
                await c.stop()
            except asyncio.CancelledError:
                outcomes.append("cancelled")
        producer = AsyncProducer("aio-cancel-start-p", namesrv.addr, **FAST_CLIENT)
        task = asyncio.create_task(producer.start())
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
            producer_start = "started"
        except asyncio.CancelledError:
            producer_start = "cancelled"
        try:
            await producer.start()
            again = "restarted"
        except MQClientError as exc:
            again = str(exc)
        finally:
            await producer.stop()
        return ",".join(outcomes), producer_start, again

    outcomes, producer_start, again = run(main())
    assert "cancelled" in outcomes
    # Whatever the cancelled starts registered is undone: no client of the group is left on the broker.
    def offline() -> bool:
        try:
            admin.consumer_connection("aio-cancel-start")
        except MQClientError as exc:
            return exc.response_code == ResponseCode.CONSUMER_NOT_ONLINE
        return False

    wait_for(offline, 15, what="the group offline")
    # A producer whose start was cancelled is shut down (it cannot restart); one that started runs on.
    assert again == "restarted" if producer_start == "started" else "shut down" in again, (producer_start, again)


def test_delayed_and_timer_messages_arrive_no_sooner_than_asked_and_an_admin_can_consume_one_directly(
        namesrv, broker, scheduler, admin):
    make_topic(admin, "AioDelayT", 2)
    arrived: dict[str, tuple[float, int]] = {}
    loop_thread = threading.get_ident()

    async def on_message(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            arrived.setdefault(m.body.decode(), (time.monotonic(), threading.get_ident()))
            arrived[f"{m.body.decode()}#last"] = (time.monotonic(), threading.get_ident())
        return SUCCESS

    async def main() -> tuple[float, Any, str]:
        c = consumer(namesrv.addr, "aio-delay", "AioDelayT", on_message)
        async with AsyncProducer("aio-delay-p", namesrv.addr, **FAST_CLIENT) as producer, c:
            await c.wait_assigned()
            sent_at = time.monotonic()
            await producer.send(Message("AioDelayT", b"level-2", delay_level=2))  # 1 s with this broker's levels
            timer = await producer.send(Message("AioDelayT", b"timer-1500", delay_ms=1500))
            await producer.send(Message("AioDelayT", b"now"))
            await until(lambda: {"level-2", "timer-1500", "now"} <= arrived.keys(), 30, "the three messages")
            client_id = c.client_id
            assert client_id is not None
            # An admin's CONSUME_MESSAGE_DIRECTLY runs the async listener on the loop too.
            direct = await asyncio.to_thread(admin.consume_message_directly, "aio-delay", client_id,
                                             timer.offset_msg_id)
            return sent_at, direct, client_id

    sent_at, direct, _ = run(main())
    assert arrived["now"][0] - sent_at < 1.0
    assert arrived["level-2"][0] - sent_at >= 0.9
    assert arrived["timer-1500"][0] - sent_at >= 1.4
    assert {thread for _, thread in arrived.values()} == {loop_thread}
    assert direct.consume_result == CMResult.CR_SUCCESS
