"""AsyncProducer and AsyncTransactionProducer against real name server, broker and txn-checker processes:
what an asyncio program checks — every send answered and stored once, failover as the threaded producer
does it, ordered sends, batches, transactions with async listeners, and cancellation that leaves nothing
behind."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

from aiokit import run
from clientkit import FAST_CLIENT, make_topic, read_back
from procs import FAST_BROKER, FAST_CHECKER, BrokerProcess, freeze, thaw, wait_for
from rocketmesh import AutoBatch, LocalTransactionState, Message, MQClientError, SendStatus
from rocketmesh.aio import AsyncProducer, AsyncTransactionProducer
from rocketmesh.client import ClientErrorCode, SelectMessageQueueByHash
from rocketmesh.model.message import MessageExt, MessageQueue

BROKER_ARGS = FAST_BROKER


def tcp_connections_to(port: int) -> int:
    """This process's established TCP connections to ``port`` on loopback."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port and fields[3] == "01" and fields[9] in inodes:
                count += 1
    return count


def test_sends_from_100_tasks_are_all_send_ok_stored_once_over_one_connection_per_broker(namesrv, broker, admin):
    make_topic(admin, "AioManyT", 4)

    async def main() -> tuple[list[Any], int, int, int, int]:
        async with AsyncProducer("aio-many", namesrv.addr, **FAST_CLIENT) as producer:
            await producer.send(Message("AioManyT", b"warm-up"))
            threads, conns = threading.active_count(), tcp_connections_to(broker.port)
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(producer.send(Message("AioManyT", f"m{i}".encode(), keys=f"k{i}")))
                         for i in range(100)]
            return ([t.result() for t in tasks], threads, conns, threading.active_count(),
                    tcp_connections_to(broker.port))

    results, threads_before, conns_before, threads_after, conns_after = run(main())
    assert [r.send_status for r in results] == [SendStatus.SEND_OK] * 100
    assert len({r.msg_id for r in results}) == 100
    # A hundred sends in flight took no thread and no connection of their own.
    assert (threads_after, conns_after) == (threads_before, conns_before)
    stored = list(read_back(namesrv, "AioManyT", 101).values())
    bodies = sorted(m.body.decode() for m in stored if m.body != b"warm-up")
    assert bodies == sorted(f"m{i}" for i in range(100))  # each exactly once
    assert {m.unique_key for m in stored} >= {r.msg_id for r in results}


def test_ordered_sends_batches_oneway_and_auto_batching(namesrv, broker, admin):
    make_topic(admin, "AioOrderT", 4)

    async def main() -> tuple[list[Any], Any, list[Any], list[MessageQueue]]:
        async with AsyncProducer("aio-order", namesrv.addr, **FAST_CLIENT) as producer:
            queues = await producer.message_queues("AioOrderT")
            by_key = [await producer.send(Message("AioOrderT", f"{key}-{n}".encode(), keys=key),
                                          selector=SelectMessageQueueByHash(), arg=key)
                      for n in range(5) for key in ("order-1", "order-2")]
            batch = await producer.send_batch([Message("AioOrderT", f"b{i}".encode()) for i in range(10)],
                                              queue=queues[0])
            await producer.send_oneway(Message("AioOrderT", b"oneway"))
        async with AsyncProducer("aio-auto", namesrv.addr, auto_batch=AutoBatch.ASYNC, **FAST_CLIENT) as auto:
            batched = await asyncio.gather(*(auto.send(Message("AioOrderT", f"a{i}".encode())) for i in range(300)))
        return by_key, batch, batched, queues

    by_key, batch, batched, queues = run(main())
    for key in ("order-1", "order-2"):
        sent = [r for r, n in zip(by_key, [k for _ in range(5) for k in ("order-1", "order-2")], strict=True)
                if n == key]
        assert len({r.message_queue for r in sent}) == 1  # one key, one queue
        offsets = [r.queue_offset for r in sent]
        assert offsets == sorted(offsets)  # in the order they were awaited
    assert batch.message_queue == queues[0] and len(batch.msg_id.split(",")) == 10
    assert all(r.send_status is SendStatus.SEND_OK for r in batched) and len({r.msg_id for r in batched}) == 300
    stored = list(read_back(namesrv, "AioOrderT", 10 + 10 + 1 + 300).values())
    assert len(stored) == 321 and sum(m.body == b"oneway" for m in stored) == 1


def test_auto_batching_sends_a_lone_message_at_once_and_a_topic_that_gathers_nothing_two_at_once(
        namesrv, broker, admin):
    # As the threaded Producer: a message whose topic has nothing pending goes at once, and a topic whose held
    # sends gathered nothing may have two requests in flight before it holds again.
    make_topic(admin, "AioAutoE", 4)

    async def main() -> tuple[list[Any], list[float]]:
        async with AsyncProducer("aio-auto-e", namesrv.addr, auto_batch=AutoBatch.ASYNC, batch_max_delay_ms=300,
                                 **FAST_CLIENT) as p:
            assert (await p.send(Message("AioAutoE", b"warm"))).send_status is SendStatus.SEND_OK
            sent_ms: list[float] = []

            async def frozen_round(bodies: list[bytes]) -> list[Any]:
                freeze(broker.pid)
                try:
                    tasks = []
                    for body in bodies:
                        sent_ms.append(time.time() * 1000)
                        tasks.append(asyncio.create_task(p.send(Message("AioAutoE", body))))
                        await asyncio.sleep(0.01)  # the task runs up to its send
                    await asyncio.sleep(0.6)  # past the delay: what was held leaves, before any answer
                finally:
                    thaw(broker.pid)
                return list(await asyncio.gather(*tasks))

            results = await frozen_round([b"1", b"2"])  # at once; held (holding may gather)
            results += await frozen_round([b"a", b"b", b"c"])  # at once; at once (gathers nothing); held
            return results, sent_ms

    results, sent_ms = run(main())
    assert [r.send_status for r in results] == [SendStatus.SEND_OK] * 5
    stored = [admin.view_message(r.offset_msg_id) for r in results]
    assert [m.body for m in stored] == [b"1", b"2", b"a", b"b", b"c"]
    waited = [m.born_timestamp - at for m, at in zip(stored, sent_ms, strict=True)]
    assert waited[0] <= 50 and waited[2] <= 50  # nothing in flight: at once
    assert waited[1] >= 250  # left at the delay, alone: the topic gathers nothing
    assert waited[3] <= 50  # one in flight, holding gathers nothing: at once
    assert waited[4] >= 250  # two in flight: held again


def test_a_send_fails_over_to_the_other_broker_when_one_is_gone(namesrv, broker, start_broker, admin):
    broker_b: BrokerProcess = start_broker(namesrv.addr, "broker-b")
    make_topic(admin, "AioFailT", 2)
    wait_for(lambda: len(admin.topic_route("AioFailT").broker_datas) == 2, 20, "the topic on both brokers")

    async def main() -> list[Any]:
        async with AsyncProducer("aio-fail", namesrv.addr, send_msg_timeout_ms=3000, **FAST_CLIENT) as producer:
            await asyncio.gather(*(producer.send(Message("AioFailT", b"both")) for _ in range(8)))
            broker.kill()
            return [await producer.send(Message("AioFailT", f"after-{i}".encode())) for i in range(10)]

    results = run(main())
    assert [r.send_status for r in results] == [SendStatus.SEND_OK] * 10
    assert {r.message_queue.broker_name for r in results} == {"broker-b"}
    assert broker_b.proc is not None and broker_b.proc.poll() is None


def test_concurrent_sends_share_batches_that_fail_over_as_each_send_would(namesrv, broker, start_broker, admin):
    # With auto batching the sends of many tasks share requests, and a batch whose broker does
    # not answer is retried on the other broker, as each of its sends would be alone (not failed, not lost).
    # The broker is frozen, not killed: its connection stays up, so only a timeout tells that it is gone.
    broker_b: BrokerProcess = start_broker(namesrv.addr, "broker-b")
    make_topic(admin, "AioFailB", 2)
    wait_for(lambda: len(admin.topic_route("AioFailB").broker_datas) == 2, 20, "the topic on both brokers")

    async def main() -> tuple[list[Any], list[Any]]:
        async with AsyncProducer("aio-fail-b", namesrv.addr, send_msg_timeout_ms=3000, auto_batch=AutoBatch.ASYNC,
                                 **FAST_CLIENT) as producer:
            # In four rounds: each makes at least one batch, and four batches in a row take four queues in
            # turn, both brokers' (one round of 300 may fit in two batches, both to one broker's queues).
            before = []
            for r in range(4):
                before += await asyncio.gather(*(producer.send(Message("AioFailB", f"b{r}-{i}".encode()))
                                                 for i in range(75)))
            freeze(broker.pid)
            try:
                after = await asyncio.gather(*(producer.send(Message("AioFailB", f"a{i}".encode()))
                                               for i in range(300)))
            finally:
                broker.kill()  # what it got while frozen is never stored
            return before, after

    before, after = run(main())
    assert {r.message_queue.broker_name for r in before} == {"broker-a", "broker-b"}
    assert [r.send_status for r in after] == [SendStatus.SEND_OK] * 300
    assert {r.message_queue.broker_name for r in after} == {"broker-b"}
    assert len({(r.message_queue, r.queue_offset) for r in after}) == 300
    # Batches: messages sent one after another stored one after another in one queue.
    shared = sum(1 for p, c in zip(after, after[1:], strict=False)
                 if c.message_queue == p.message_queue and c.queue_offset == p.queue_offset + 1)
    assert shared > 100
    assert broker_b.proc is not None and broker_b.proc.poll() is None


def test_errors_are_the_sdk_errors(namesrv, broker, admin):
    async def main() -> None:
        producer = AsyncProducer("aio-errors", namesrv.addr, **FAST_CLIENT)
        try:
            await producer.send(Message("AnyT", b"x"))
            raise AssertionError("a send before start() went through")
        except MQClientError as exc:
            assert "start()" in str(exc)
        async with producer:
            try:
                await producer.send(Message("bad topic!", b"x"))
                raise AssertionError("a bad topic was sent")
            except MQClientError as exc:
                assert exc.response_code is not None
            try:
                await producer.send(Message("AioErrT", b"x"), queue=MessageQueue("AioErrT", "no-such-broker", 0))
                raise AssertionError("a send to a broker that does not exist went through")
            except MQClientError as exc:
                assert exc.response_code == ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION

    run(main())


def test_cancelled_sends_leave_no_pending_request_socket_or_thread(namesrv, broker, admin):
    make_topic(admin, "AioCancelT", 2)

    async def main() -> tuple[int, int, int, int, SendStatus, Any]:
        async with AsyncProducer("aio-cancel", namesrv.addr, **FAST_CLIENT) as producer:
            await producer.send(Message("AioCancelT", b"warm-up"))
            remoting = producer.producer.instance.api.remoting
            threads, conns = threading.active_count(), tcp_connections_to(broker.port)
            for _ in range(5):
                tasks = [asyncio.create_task(producer.send(Message("AioCancelT", b"c"))) for _ in range(200)]
                await asyncio.sleep(0)  # every task is inside its await now: the requests are out
                for t in tasks:
                    t.cancel()
                outcomes = await asyncio.gather(*tasks, return_exceptions=True)
                assert all(isinstance(o, asyncio.CancelledError) or o.send_status is SendStatus.SEND_OK
                           for o in outcomes)
            deadline = asyncio.get_running_loop().time() + 5
            while remoting.pending_requests and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            after = await producer.send(Message("AioCancelT", b"after"))
            return (remoting.pending_requests, threads, threading.active_count(), conns,
                    after.send_status, tcp_connections_to(broker.port))

    pending, threads_before, threads_after, conns_before, status, conns_after = run(main())
    assert pending == 0
    assert threads_after == threads_before and conns_after == conns_before
    assert status is SendStatus.SEND_OK


def test_a_transaction_with_async_listeners_commits_and_a_check_answers_on_the_loop(
        namesrv, broker, admin, start_txn_checker):
    make_topic(admin, "AioTxT", 2)
    start_txn_checker(namesrv.addr, **FAST_CHECKER)
    seen: dict[str, list[str]] = {"executed": [], "checked": []}
    loop_threads: set[int] = set()

    class Orders:
        async def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            await asyncio.sleep(0.01)
            loop_threads.add(threading.get_ident())
            seen["executed"].append(msg.keys or "")
            if arg == "raise":
                raise RuntimeError("the database is down")
            return {"commit": LocalTransactionState.COMMIT_MESSAGE,
                    "rollback": LocalTransactionState.ROLLBACK_MESSAGE}.get(str(arg), LocalTransactionState.UNKNOW)

        async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            await asyncio.sleep(0.01)
            loop_threads.add(threading.get_ident())
            seen["checked"].append(msg.keys or "")
            return LocalTransactionState.COMMIT_MESSAGE

    async def main() -> list[Any]:
        async with AsyncTransactionProducer("aio-tx", namesrv.addr, Orders(), **FAST_CLIENT) as producer:
            results = [await producer.send_message_in_transaction(Message("AioTxT", key.encode(), keys=key), arg)
                       for key, arg in (("t-commit", "commit"), ("t-rollback", "rollback"),
                                        ("t-unknown", "unknown"), ("t-raise", "raise"))]
            # The undecided two are settled by checks, which this loop answers.
            deadline = asyncio.get_running_loop().time() + 20
            while set(seen["checked"]) < {"t-unknown", "t-raise"} and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.1)
            return results

    main_thread = threading.get_ident()
    results = run(main())
    assert [r.local_transaction_state for r in results] == [
        LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
        LocalTransactionState.UNKNOW, LocalTransactionState.UNKNOW]
    assert {"t-unknown", "t-raise"} <= set(seen["checked"])
    assert loop_threads == {main_thread}  # both listeners ran on the program's loop
    stored = list(read_back(namesrv, "AioTxT", 3).values())
    assert sorted({m.keys for m in stored}) == ["t-commit", "t-raise", "t-unknown"]


def test_a_producer_is_bound_to_the_loop_that_started_it(namesrv, broker):
    holder: dict[str, AsyncProducer] = {}

    async def start() -> None:
        holder["p"] = await AsyncProducer("aio-loop", namesrv.addr, **FAST_CLIENT).start()

    async def send_elsewhere() -> str:
        try:
            await holder["p"].send(Message("AnyT", b"x"))
        except MQClientError as exc:
            return str(exc)
        finally:
            await holder["p"].stop()
        return ""

    asyncio.run(start())
    assert "loop" in asyncio.run(send_elsewhere())


