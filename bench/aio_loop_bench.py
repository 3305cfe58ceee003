"""How free an asyncio program's loop stays while rocketmesh.aio sends and consumes through it.

Run::

    python bench/aio_loop_bench.py                       # 10,000 messages, 50 sending tasks, 3 rounds
    python bench/aio_loop_bench.py --messages 50000 --senders 200 --rounds 1

Against a name server and broker it starts itself, one loop runs ``--senders`` tasks that each await
AsyncProducer.send() one after another, an AsyncPushConsumer whose async listener takes every message,
and a ticker task that sleeps 2 ms at a time. Per round it prints how late the ticker woke (p50, p99,
max: what an application's own timers would see) and the most CPU time the loop's thread spent between
two ticks (what ran on the loop: the SDK's and the application's code, and the interpreter's garbage
collections, whose longest is printed beside; the rest of a late wake-up is the machine running other
threads and processes).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import threading
import time

os.environ.setdefault("ROCKETMESH_LOG_LEVEL", "WARNING")

from benchkit import CLIENT_ACCOUNT, Services, make_topic, percentile  # noqa: E402
from rocketmesh import Message  # noqa: E402
from rocketmesh.aio import AsyncProducer, AsyncPushConsumer  # noqa: E402
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus  # noqa: E402

TOPIC = "AioLoopBench"


class GcWatch:
    """The longest garbage collection on one thread, in ms (gc.callbacks)."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.longest = 0.0
        self._since = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self._since = time.perf_counter()
        else:
            self.longest = max(self.longest, (time.perf_counter() - self._since) * 1000)


async def one_round(namesrv: str, messages: int, senders: int, body: bytes) -> tuple[list[float], float, float]:
    """(the ticker's lateness of each tick in ms, the loop thread's most CPU ms between two ticks, seconds)."""
    got = 0
    all_in = asyncio.Event()

    async def on_message(msgs):
        nonlocal got
        got += len(msgs)
        if got >= messages:
            all_in.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = AsyncPushConsumer(f"aio-loop-bench-{time.time_ns()}", namesrv, **CLIENT_ACCOUNT,
                                 consume_message_batch_max_size=8)
    consumer.subscribe(TOPIC)
    consumer.register_listener(on_message)
    late: list[float] = []
    held = 0.0
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def ticker() -> None:
        nonlocal held
        while not done.is_set():
            before, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(0.002)
            late.append((loop.time() - before - 0.002) * 1000)
            held = max(held, (time.thread_time() - cpu) * 1000)

    async with AsyncProducer("aio-loop-bench", namesrv, **CLIENT_ACCOUNT) as producer, consumer:
        await consumer.wait_assigned()
        await asyncio.sleep(1.0)
        tick = asyncio.create_task(ticker())
        start = time.monotonic()

        async def sender(first: int) -> None:
            for _ in range(first, messages, senders):
                await producer.send(Message(TOPIC, body))

        await asyncio.gather(*(sender(n) for n in range(senders)))
        await asyncio.wait_for(all_in.wait(), 120)
        elapsed = time.monotonic() - start
        done.set()
        await tick
    return late, held, elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--senders", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--body", type=int, default=1024)
    a = ap.parse_args()
    services = Services([f"mappedFileSizeCommitLog={256 * 1024 * 1024}"])
    try:
        make_topic(services.namesrv, TOPIC, 8)
        for n in range(a.rounds):
            watch = GcWatch()
            gc.callbacks.append(watch)
            try:
                late, held, elapsed = asyncio.run(one_round(services.namesrv, a.messages, a.senders,
                                                            os.urandom(a.body)))
            finally:
                gc.callbacks.remove(watch)
            late.sort()
            print(f"round {n + 1}: {a.messages:,} sent and consumed by {a.senders} tasks + a consumer in "
                  f"{elapsed:.1f} s; ticker late p50 {statistics.median(late):.2f} ms, p99 "
                  f"{percentile(late, 0.99):.2f} ms, max {late[-1]:.1f} ms; loop thread busy at most "
                  f"{held:.1f} ms between two ticks (longest garbage collection {watch.longest:.1f} ms)", flush=True)
    finally:
        services.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
