"""Consumer throughput (draining a backlog) and end-to-end latency, against services it starts itself.

Run::

    python bench/consumer_bench.py               # backlog of 1,000,000 1 KiB messages, e2e at 2,000 msg/s
    python bench/consumer_bench.py --modes pull --backlog 200000  # a smaller backlog, pull consumer only
    python bench/consumer_bench.py --modes e2e --rate 2000 --duration 10
    python bench/consumer_bench.py --modes e2e --thread-cpu        # each thread's CPU and wake-ups a message
    python bench/consumer_bench.py --modes pull,e2e --acl on   # plain ACL on, every request signed (see producer_bench)
    python bench/consumer_bench.py --namesrv 127.0.0.1:9876      # use running services instead
    python bench/consumer_bench.py --modes pull,push --tracing exported   # every span exported (see producer_bench)
    python bench/consumer_bench.py --modes pull,push --curve on   # CurveZMQ on every connection (see producer_bench)

Modes:
  pull   PullConsumer polls the whole backlog (msg/s from first to last message)
  push   PushConsumer with a listener that only counts (msg/s likewise)
  e2e    one producer sends --rate msg/s; a PushConsumer measures send-to-listener latency (p50/p99)
  aio-push  AsyncPushConsumer (rocketmesh.aio) with an async listener that only counts (msg/s likewise)
  aio-e2e   e2e with an AsyncPushConsumer whose async listener measures the latency on its loop
  wake   a held long-poll pull: latency from the send to the pull's answer (p50/p99 over --wakes sends)

Drains and the e2e modes print the CPU per message they took in this process and in each
service (microseconds), a figure other work on the machine moves less than msg/s; in e2e
this process is the producer and the consumer together.
The backlog is filled once (batch sends) into topic ConsumerBench with 8
queues; each drain mode uses a fresh consumer group starting from the first
offset, so modes read the same messages.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

# The bench and the services it starts log warnings only (ROCKETMESH_LOG_LEVEL overrides): figures stay readable.
os.environ.setdefault("ROCKETMESH_LOG_LEVEL", "WARNING")

from benchkit import (  # noqa: E402
    ACL_MODES,
    ADMIN_ACCOUNT,
    BACKLOG_TOPIC,
    CLIENT_ACCOUNT,
    CURVE_MODES,
    TRACING_MODES,
    Services,
    Tracing,
    acl_setup,
    cpu_per_process,
    curve_keys,
    fill_backlog,
    make_topic,
    percentile,
    process_times,
    report_cpu,
    report_thread_cpu,
    thread_times,
    watched_pids,
)
from rocketmesh import Admin, Message, Producer  # noqa: E402
from rocketmesh.aio import AsyncPushConsumer  # noqa: E402
from rocketmesh.client.consumer import (  # noqa: E402
    ConsumeConcurrentlyStatus,
    PullConsumer,
    PushConsumer,
)

TOPIC = BACKLOG_TOPIC
E2E_TOPIC = "ConsumerBenchE2E"
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def drain_pull(namesrv: str, n: int, batch: int) -> float:
    group = f"bench-pull-{time.time_ns()}"
    with PullConsumer(group, namesrv, **CLIENT_ACCOUNT, consume_from="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=batch,
                      pull_threshold_for_all=50_000) as c:
        c.subscribe(TOPIC)
        got = 0
        first = None
        while got < n:
            msgs = c.poll(timeout_ms=10_000)
            if not msgs:
                raise SystemExit(f"pull drain stalled at {got}/{n}")
            if first is None:
                first = time.monotonic()
            got += len(msgs)
        return got / (time.monotonic() - first)


def drain_push(namesrv: str, n: int, batch: int, consume_batch: int, threads: int) -> float:
    group = f"bench-push-{time.time_ns()}"
    lock = threading.Lock()
    state = {"got": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()

    def listener(msgs):
        with lock:
            if not state["got"]:
                state["first"] = time.monotonic()
            state["got"] += len(msgs)
            if state["got"] >= n:
                state["last"] = time.monotonic()
                done.set()
        return SUCCESS

    c = PushConsumer(group, namesrv, **CLIENT_ACCOUNT, consume_from="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=batch,
                     consume_message_batch_max_size=consume_batch, consume_thread_nums=threads)
    c.subscribe(TOPIC)
    c.register_listener(listener)
    c.start()
    try:
        if not done.wait(600):
            raise SystemExit(f"push drain stalled at {state['got']}/{n}")
    finally:
        c.shutdown()
    return state["got"] / (state["last"] - state["first"])


class _LoopThread:
    """An asyncio loop running on a thread of its own, for the async consumers (the bench's main thread paces)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bench-loop", daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def drain_aio_push(namesrv: str, n: int, batch: int, consume_batch: int, threads: int) -> float:
    """drain_push with an AsyncPushConsumer whose async listener counts on the loop."""
    group = f"bench-aio-push-{time.time_ns()}"
    state = {"got": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()

    async def listener(msgs):
        if not state["got"]:
            state["first"] = time.monotonic()
        state["got"] += len(msgs)
        if state["got"] >= n and not done.is_set():
            state["last"] = time.monotonic()
            done.set()
        return SUCCESS

    lt = _LoopThread()
    c = AsyncPushConsumer(group, namesrv, **CLIENT_ACCOUNT, consume_from="CONSUME_FROM_FIRST_OFFSET",
                          pull_batch_size=batch, consume_message_batch_max_size=consume_batch,
                          consume_thread_nums=threads)
    c.subscribe(TOPIC)
    c.register_listener(listener)
    lt.run(c.start())
    try:
        if not done.wait(600):
            raise SystemExit(f"aio push drain stalled at {state['got']}/{n}")
    finally:
        lt.run(c.stop())
        lt.close()
    return state["got"] / (state["last"] - state["first"])


def e2e(namesrv: str, rate: int, duration: float, size: int, aio: bool = False,
        sample: Callable[[], Any] | None = None) -> tuple[float, float, int, Any, Any]:
    """p50 and p99 send-to-listener latency (ms) and the messages counted; ``sample()``'s results (a snapshot of
    the threads' times, say) taken as the paced sends begin and once the last message arrived, before the
    producer and consumer stop and their threads go (None, None without it)."""
    # A topic per mode: a new group may start at offset 0 of a topic whose messages are still in memory (as in
    # RocketMQ), and would then count another mode's messages.
    topic = f"{E2E_TOPIC}-aio" if aio else E2E_TOPIC
    make_topic(namesrv, topic, 8)
    lat: list[float] = []
    lock = threading.Lock()

    def listener(msgs):
        now = time.time_ns()
        with lock:
            for m in msgs:
                lat.append((now - int(m.body[:19])) / 1e6)
        return SUCCESS

    async def async_listener(msgs):
        return listener(msgs)

    group = f"bench-e2e-{time.time_ns()}"
    lt = _LoopThread() if aio else None
    c = (AsyncPushConsumer if aio else PushConsumer)(group, namesrv, **CLIENT_ACCOUNT)
    c.subscribe(topic)
    c.register_listener(async_listener if aio else listener)
    if lt is not None:
        lt.run(c.start())
    else:
        c.start()
        c.wait_assigned()
    deadline = time.monotonic() + 10
    while not c.assigned_queues() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    pad = b"x" * max(0, size - 19)
    sent = 0
    with Producer("bench-e2e", namesrv, **CLIENT_ACCOUNT) as p:
        # Steady state only: the first send looks up the route and connects.
        p.send(Message(topic, str(time.time_ns()).encode() + pad))
        time.sleep(0.5)
        with lock:
            lat.clear()
        interval = 1.0 / rate
        first = sample() if sample is not None else None
        start = time.monotonic()
        while time.monotonic() - start < duration:
            due = start + sent * interval
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            p.send_oneway(Message(topic, str(time.time_ns()).encode() + pad))
            sent += 1
    deadline = time.monotonic() + 10
    while len(lat) < sent and time.monotonic() < deadline:
        time.sleep(0.1)
    last = sample() if sample is not None else None
    if lt is not None:
        lt.run(c.stop())
        lt.close()
    else:
        c.shutdown()
    values = sorted(lat[len(lat) // 10:])  # the first tenth warms up
    return percentile(values, 0.5), percentile(values, 0.99), len(lat), first, last


def wake(namesrv: str, n: int) -> tuple[float, float]:
    with Admin(namesrv, **ADMIN_ACCOUNT) as admin:
        admin.create_topic("ConsumerBenchWake", read_queue_nums=1, write_queue_nums=1)
        admin.wait_topic_route("ConsumerBenchWake")
    out = []
    with PullConsumer(f"bench-wake-{time.time_ns()}", namesrv, **CLIENT_ACCOUNT) as c, \
            Producer("bench-wake", namesrv, **CLIENT_ACCOUNT) as p:
        c.subscribe("ConsumerBenchWake")
        while not c.assignment():
            time.sleep(0.05)
        c.poll(timeout_ms=500)
        for _ in range(n):
            time.sleep(0.2)  # the pull is held by now
            t0 = time.monotonic()
            p.send_oneway(Message("ConsumerBenchWake", b"w"))
            msgs = c.poll(timeout_ms=5000)
            if msgs:
                out.append((time.monotonic() - t0) * 1000)
    out.sort()
    return percentile(out, 0.5), percentile(out, 0.99)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="pull,push,e2e,wake")
    ap.add_argument("--backlog", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--pull-batch", type=int, default=32)
    ap.add_argument("--consume-batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=1, help="drains per mode (median reported)")
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--wakes", type=int, default=50)
    ap.add_argument("--thread-cpu", action="store_true",
                    help="e2e: each busy thread's CPU and wake-ups a message (this process and the services)")
    ap.add_argument("--namesrv")
    ap.add_argument("--set", action="append", default=[], help="broker config key=value")
    ap.add_argument("--tracing", choices=TRACING_MODES, default="off",
                    help="no OpenTelemetry SDK (off), an SDK that samples nothing, or every span exported "
                         "over OTLP/HTTP to a local receiver; this process and the services alike")
    ap.add_argument("--acl", choices=ACL_MODES, default="off",
                    help="plain ACL on the name server and broker, every client request signed (see producer_bench)")
    ap.add_argument("--curve", choices=CURVE_MODES, default="off",
                    help="CurveZMQ on every connection (keys made for the run), this process and the services alike")
    a = ap.parse_args()
    modes = a.modes.split(",")
    tracing = Tracing(a.tracing, "consumer-bench")
    curve_dir = curve_keys(a.curve)
    *acl_sets, acl_dir = acl_setup(a.acl)
    services = None
    namesrv = a.namesrv
    if namesrv is None:
        services = Services(["mappedFileSizeCommitLog=268435456", *a.set], acl_sets=tuple(acl_sets))
        namesrv = services.namesrv
    try:
        if {"pull", "push", "aio-push"} & set(modes):
            fill_backlog(namesrv, a.backlog, a.size, a.queues)
        watched = watched_pids(services)

        def measured(mode: str, drain: Callable[[], float]) -> list[float]:
            """``--repeat`` drains; prints the CPU per message they took (this process and the services)."""
            before = process_times(list(watched))
            rates = [drain() for _ in range(a.repeat)]
            report_cpu(mode, cpu_per_process(before, process_times(list(watched)), a.backlog * a.repeat, watched))
            return rates

        if "pull" in modes:
            rates = measured("pull", lambda: drain_pull(namesrv, a.backlog, a.pull_batch))
            print(f"pull  drain {a.backlog} x {a.size} B: {statistics.median(rates):,.0f} msg/s "
                  f"(runs: {', '.join(f'{r:,.0f}' for r in rates)})", flush=True)
        if "push" in modes:
            rates = measured("push", lambda: drain_push(namesrv, a.backlog, a.pull_batch, a.consume_batch, a.threads))
            print(f"push  drain {a.backlog} x {a.size} B (consume batch {a.consume_batch}): "
                  f"{statistics.median(rates):,.0f} msg/s (runs: {', '.join(f'{r:,.0f}' for r in rates)})", flush=True)
        if "aio-push" in modes:
            rates = measured("aio-push", lambda: drain_aio_push(namesrv, a.backlog, a.pull_batch, a.consume_batch,
                                                                a.threads))
            print(f"aio-push drain {a.backlog} x {a.size} B (consume batch {a.consume_batch}): "
                  f"{statistics.median(rates):,.0f} msg/s (runs: {', '.join(f'{r:,.0f}' for r in rates)})", flush=True)
        for mode in ("e2e", "aio-e2e"):
            if mode in modes:
                before = process_times(list(watched))
                p50, p99, n, threads_before, threads_after = e2e(
                    namesrv, a.rate, a.duration, a.size, aio=mode == "aio-e2e",
                    sample=(lambda: thread_times(list(watched))) if a.thread_cpu else None)
                print(f"{mode:<5} {a.rate} msg/s for {a.duration:.0f} s: p50 {p50:.2f} ms, p99 {p99:.2f} ms "
                      f"({n} messages)", flush=True)
                # Producer and consumer both run in this process: its figure is the two sides together.
                report_cpu(mode, cpu_per_process(before, process_times(list(watched)), n, watched))
                if a.thread_cpu:
                    report_thread_cpu(threads_before, threads_after, n, watched)
        if "wake" in modes:
            p50, p99 = wake(namesrv, a.wakes)
            print(f"wake  held pull answered after a send: p50 {p50:.2f} ms, p99 {p99:.2f} ms", flush=True)
    finally:
        if services is not None:
            services.stop()
        spans = tracing.stop()
        if spans is not None:
            print(f"tracing {a.tracing}: {spans:,} spans received", flush=True)
        if curve_dir is not None:
            shutil.rmtree(curve_dir, ignore_errors=True)
        if acl_dir is not None:
            shutil.rmtree(acl_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
