"""How free an asyncio program's loop stays while rocketmesh.aio sends and consumes through it.

Run::

    python bench/aio_loop_bench.py                       # 10,000 messages, 50 sending tasks, 3 rounds
    python bench/aio_loop_bench.py --messages 50000 --senders 200 --rounds 1

Against a name server and broker it starts itself, one loop runs ``--senders`` tasks that each await
AsyncProducer.send() one after another, an AsyncPushConsumer whose async listener takes every message,
and a ticker task that sleeps 2 ms at a time. Per round it prints how late the ticker woke (p50, p99,
max: what an application's own timers would see) and the most CPU time the loop's thread spent between
two ticks (what ran on the loop: the SDK's and the application's code; the interpreter's garbage collections
are counted apart, their longest printed beside), measured by tests/aiokit.py's Ticker as the test suite
measures it. The rest of a late wake-up is the machine running other threads and processes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("ROCKETMESH_LOG_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from aiokit import Ticker  # noqa: E402
from benchkit import CLIENT_ACCOUNT, Services, make_topic, percentile  # noqa: E402
from rocketmesh import Message  # noqa: E402
from rocketmesh.aio import AsyncProducer, AsyncPushConsumer  # noqa: E402
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus  # noqa: E402

TOPIC = "AioLoopBench"


async def one_round(namesrv: str, messages: int, senders: int, body: bytes) -> tuple[Ticker, float]:
    """The ticker that ran beside ``messages`` sent by ``senders`` tasks and consumed, and the seconds it took."""
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
    async with AsyncProducer("aio-loop-bench", namesrv, **CLIENT_ACCOUNT) as producer, consumer:
        await consumer.wait_assigned()
        await asyncio.sleep(1.0)
        async with Ticker() as ticker:
            start = time.monotonic()

            async def sender(first: int) -> None:
                for _ in range(first, messages, senders):
                    await producer.send(Message(TOPIC, body))

            await asyncio.gather(*(sender(n) for n in range(senders)))
            await asyncio.wait_for(all_in.wait(), 120)
            elapsed = time.monotonic() - start
    return ticker, elapsed


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
            ticker, elapsed = asyncio.run(one_round(services.namesrv, a.messages, a.senders, os.urandom(a.body)))
            late = sorted(t[1] * 1000 for t in ticker.ticks)
            print(f"round {n + 1}: {a.messages:,} sent and consumed by {a.senders} tasks + a consumer in "
                  f"{elapsed:.1f} s; ticker late p50 {statistics.median(late):.2f} ms, p99 "
                  f"{percentile(late, 0.99):.2f} ms, max {late[-1]:.1f} ms; loop thread busy at most "
                  f"{ticker.held_max * 1000:.1f} ms between two ticks, besides garbage collections (the longest "
                  f"{ticker.gc_longest * 1000:.1f} ms)", flush=True)
    finally:
        services.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
