"""Producer throughput and latency against a local name server and broker it starts itself.

Run::

    python bench/producer_bench.py                     # every mode, 5 s each, 1 KiB bodies
    python bench/producer_bench.py --modes sync1,async --duration 10
    python bench/producer_bench.py --namesrv 127.0.0.1:9876   # use running services instead
    python bench/producer_bench.py --modes sync1 --profile     # cProfile of the client side (main thread)
    python bench/producer_bench.py --stub              # against a stub that answers at once: the client's ceiling
    python bench/producer_bench.py --modes sync1 --thread-cpu   # CPU and wake-ups per message of each busy thread
    python bench/producer_bench.py --modes async,async-off --gc  # the garbage collector's time in this process
    python bench/producer_bench.py --ha --set brokerRole=SYNC_MASTER --modes sync1,sync16,sync64   # with a slave
    python bench/producer_bench.py --modes sync1,async --tracing exported   # every span exported (OTLP/HTTP)
    python bench/producer_bench.py --modes sync1,async --curve on   # every connection CurveZMQ-encrypted
    python bench/producer_bench.py --modes sync1,async --acl on     # plain ACL on, every request signed

Modes:
  sync1, sync4, sync16, sync64   send() in a loop on 1, 4, 16, 64 threads
  async                  send_async() keeping --window requests in flight (latency = submit to completion), with
                         the default Producer: single sends coalesced into batches (auto batching)
  async-off              the same with Producer(auto_batch=AutoBatch.OFF): one request a message
  async-auto             the same with Producer(auto_batch=True) (AutoBatch.ALL: sync sends too)
  batch                  send_batch() of --batch messages (latency per batch, msg/s counts messages)
  batch-async            send_batch_async() keeping --batch-window batches in flight
  paced                  send() on one thread paced at --rate msg/s (the latency a steady load sees)
  aio1                   rocketmesh.aio: one task awaiting AsyncProducer.send() in a loop
  aio                    --window tasks, each awaiting its sends one after another (--window sends in flight),
                         the default AsyncProducer (one request a send)
  aio-auto               the same with AsyncProducer(auto_batch=True): concurrent sends batched

Prints msg/s and p50/p99 latency (ms) per mode, and the CPU each message took
in this process and in each service (microseconds: a figure that other work on
the machine moves far less than msg/s). The broker runs with its
default config but for --set overrides (commit log files of 256 MiB here,
so a run does not start by zero-filling a 1 GiB file). ``--stub`` replaces
name server and broker by one child process that answers every request at
once without storing anything, which shows what the client side alone costs.

``--tracing`` (also consumer_bench's): ``off`` (the default) configures no
OpenTelemetry SDK anywhere; ``sampled-off`` gives this process a TracerProvider
whose sampler is ALWAYS_OFF and starts the services with
``OTEL_TRACES_EXPORTER=otlp`` and ``OTEL_TRACES_SAMPLER=always_off``;
``exported`` records every span, in this process and in the services, and
exports it with a BatchSpanProcessor over OTLP/HTTP to a receiver on loopback
(a child process, ``python bench/benchkit.py serve-otlp``, that decodes and counts them).

``--curve on`` (also consumer_bench's): a key pair made for the run (``rocketmesh keys``' layout, in a
temporary directory) is named by ROCKETMESH_CURVE_SECRET_KEY_FILE in this process's environment, so the
services it starts serve with CurveZMQ and its clients connect with it (with the server's key pair as their
own: the handshake and per-message crypto cost the same as with a client pair). Not with --namesrv: running
services must be started with the keys by whoever started them.

``--acl on`` (also consumer_bench's): the name server and broker run with aclEnable and a plain_acl.yml made
for the run; producers and consumers sign every request with a non-admin account allowed PUB|SUB on every
topic and group (so each request pays for the signature and the permission lookup), the admin (topic
creation) and the broker's registration with an admin account. Not with --namesrv.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import itertools
import os
import pstats
import shutil
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from benchkit import (
    ACL_MODES,
    ADMIN_ACCOUNT,
    CLIENT_ACCOUNT,
    CURVE_MODES,
    TRACING_MODES,
    GcMeter,
    Services,
    Tracing,
    acl_setup,
    cpu_per_process,
    curve_keys,
    process_times,
    report,
    report_cpu,
    report_thread_cpu,
    thread_times,
    watched_pids,
)
from rocketmesh import Admin, AutoBatch, Message, Producer
from rocketmesh.aio import AsyncProducer

TOPIC = "ProducerBench"
GROUP = "bench-producer"
#: The topics the modes send to, in turn (``--topics``).
_topics = itertools.cycle([TOPIC])


def next_topic() -> str:
    """The topic of the next send: ``--topics`` topics in turn (one topic unless asked)."""
    return next(_topics)


def disk_use(path: str) -> int:
    """Bytes of disk the files under ``path`` take (allocated blocks, not sizes)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def run_sync(producer: Producer, threads: int, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    stop_at = time.perf_counter() + duration
    lats: list[list[float]] = []
    start = threading.Barrier(threads + 1)

    def worker(inline: bool = False) -> None:
        mine: list[float] = []
        lats.append(mine)
        send = producer.send
        clock = time.perf_counter
        if not inline:
            start.wait()
        while True:
            t0 = clock()
            if t0 >= stop_at:
                return
            send(Message(next_topic(), body))
            mine.append(clock() - t0)

    if threads == 1:  # on this thread, so that --profile sees it
        t0 = time.perf_counter()
        worker(inline=True)
        return len(lats[0]), time.perf_counter() - t0, lats[0]
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    start.wait()
    for t in ts:
        t.join(duration + 30)
    elapsed = time.perf_counter() - t0
    all_lat = [x for chunk in lats for x in chunk]
    return len(all_lat), elapsed, all_lat


def run_windowed(send: Callable[[], Future], per_send: int, window: int,
                 duration: float) -> tuple[int, float, list[float]]:
    """Keep ``window`` sends in flight for ``duration`` s; latency is submit to completion."""
    inflight: collections.deque = collections.deque()
    lat: list[float] = []
    clock = time.perf_counter
    record = lat.append
    t_start = clock()
    stop_at = t_start + duration
    n = 0
    while True:
        now = clock()
        if now >= stop_at:
            break
        if len(inflight) >= window:
            inflight.popleft().result(30)
        fut = send()
        fut.add_done_callback(lambda f, t0=now: record(clock() - t0))
        inflight.append(fut)
        n += per_send
    for fut in inflight:
        fut.result(30)
    return n, clock() - t_start, lat


def run_async(producer: Producer, window: int, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    return run_windowed(lambda: producer.send_async(Message(next_topic(), body)), 1, window, duration)


def run_async_with(namesrv: str, auto_batch: AutoBatch | bool, window: int, duration: float,
                   body: bytes) -> tuple[int, float, list[float]]:
    """``async`` with a second producer whose auto_batch is ``auto_batch`` (warmed up like the first)."""
    with Producer(GROUP + "-auto", namesrv, auto_batch=auto_batch, **CLIENT_ACCOUNT) as producer:
        for _ in range(200):
            producer.send(Message(TOPIC, body))
        return run_async(producer, window, duration, body)


def run_batch(producer: Producer, size: int, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    lat: list[float] = []
    clock = time.perf_counter
    t_start = clock()
    stop_at = t_start + duration
    batches = 0
    while True:
        t0 = clock()
        if t0 >= stop_at:
            break
        topic = next_topic()
        producer.send_batch([Message(topic, body) for _ in range(size)])
        lat.append(clock() - t0)
        batches += 1
    return batches * size, clock() - t_start, lat


def run_batch_async(producer: Producer, size: int, window: int, duration: float,
                    body: bytes) -> tuple[int, float, list[float]]:
    """Batches of ``size`` with ``window`` batches in flight (latency per batch, msg/s counts messages)."""
    def send() -> Future:
        topic = next_topic()
        return producer.send_batch_async([Message(topic, body) for _ in range(size)])
    return run_windowed(send, size, window, duration)


def run_aio(namesrv: str, tasks: int, duration: float, body: bytes, **settings: object
            ) -> tuple[int, float, list[float]]:
    """``tasks`` asyncio tasks on one loop, each awaiting AsyncProducer.send() in a loop for ``duration`` s."""
    async def main() -> tuple[int, float, list[float]]:
        lat: list[float] = []
        clock = time.perf_counter
        async with AsyncProducer(GROUP + "-aio", namesrv, **CLIENT_ACCOUNT, **settings) as producer:
            for _ in range(200):
                await producer.send(Message(TOPIC, body))
            stop_at = clock() + duration

            async def sender() -> None:
                send = producer.send
                while (t0 := clock()) < stop_at:
                    await send(Message(next_topic(), body))
                    lat.append(clock() - t0)

            t_start = clock()
            await asyncio.gather(*(sender() for _ in range(tasks)))
            return len(lat), clock() - t_start, lat

    return asyncio.run(main())


def run_paced(producer: Producer, rate: float, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    lat: list[float] = []
    clock = time.perf_counter
    interval = 1.0 / rate
    t_start = clock()
    total = int(duration * rate)
    for i in range(total):
        due = t_start + i * interval
        wait = due - clock()
        if wait > 0:
            time.sleep(wait)
        t0 = clock()
        producer.send(Message(next_topic(), body))
        lat.append(clock() - t0)
    return total, clock() - t_start, lat


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", help="use running services at this name server instead of starting them")
    ap.add_argument("--modes", default="sync1,sync4,sync16,async,async-off,batch,batch-async,paced")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per mode")
    ap.add_argument("--body", type=int, default=1024, help="body bytes")
    ap.add_argument("--window", type=int, default=1000, help="async requests in flight")
    ap.add_argument("--batch", type=int, default=32, help="messages per batch")
    ap.add_argument("--batch-window", type=int, default=32, help="batches in flight for batch-async")
    ap.add_argument("--rate", type=float, default=2000.0, help="paced mode msg/s")
    ap.add_argument("--queues", type=int, default=8, help="queues per topic")
    ap.add_argument("--topics", type=int, default=1,
                    help="send to this many topics in turn (each with --queues queues); prints the store's disk use")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker config override")
    ap.add_argument("--profile", action="store_true", help="cProfile the main thread of each mode")
    ap.add_argument("--thread-cpu", action="store_true",
                    help="print each thread's CPU time per message (this process and the services it started)")
    ap.add_argument("--gc", action="store_true",
                    help="print the garbage collector's collections and time in this process, a message")
    ap.add_argument("--stub", action="store_true", help="a stub that answers at once instead of real services")
    ap.add_argument("--ha", action="store_true",
                    help="give the broker a slave and an ha service (--set brokerRole=SYNC_MASTER to wait for it)")
    ap.add_argument("--tracing", choices=TRACING_MODES, default="off",
                    help="no OpenTelemetry SDK (off), an SDK that samples nothing, or every span exported "
                         "over OTLP/HTTP to a local receiver; this process and the services alike")
    ap.add_argument("--curve", choices=CURVE_MODES, default="off",
                    help="CurveZMQ on every connection (keys made for the run), this process and the services alike")
    ap.add_argument("--acl", choices=ACL_MODES, default="off",
                    help="plain ACL on the name server and broker, every client request signed (an account made "
                         "for the run)")
    args = ap.parse_args(argv)
    tracing = Tracing(args.tracing, "producer-bench")
    curve_dir = curve_keys(args.curve)
    *acl_sets, acl_dir = acl_setup(args.acl)

    services = None
    if args.namesrv is None:
        services = Services([f"mappedFileSizeCommitLog={256 * 1024 * 1024}", *args.set], stub=args.stub,
                            ha=args.ha, acl_sets=tuple(acl_sets))
        namesrv = services.namesrv
    else:
        namesrv = args.namesrv
    body = os.urandom(args.body)
    runners: dict[str, Callable[[Producer], tuple[int, float, list[float]]]] = {
        "sync1": lambda p: run_sync(p, 1, args.duration, body),
        "sync4": lambda p: run_sync(p, 4, args.duration, body),
        "sync16": lambda p: run_sync(p, 16, args.duration, body),
        "sync64": lambda p: run_sync(p, 64, args.duration, body),
        "async": lambda p: run_async(p, args.window, args.duration, body),
        "async-off": lambda p: run_async_with(namesrv, AutoBatch.OFF, args.window, args.duration, body),
        "async-auto": lambda p: run_async_with(namesrv, True, args.window, args.duration, body),
        "batch": lambda p: run_batch(p, args.batch, args.duration, body),
        "batch-async": lambda p: run_batch_async(p, args.batch, args.batch_window, args.duration, body),
        "paced": lambda p: run_paced(p, args.rate, args.duration, body),
        "aio1": lambda p: run_aio(namesrv, 1, args.duration, body),
        "aio": lambda p: run_aio(namesrv, args.window, args.duration, body),
        "aio-auto": lambda p: run_aio(namesrv, args.window, args.duration, body, auto_batch=True),
    }
    global _topics
    names = [TOPIC] if args.topics == 1 else [f"{TOPIC}-{i}" for i in range(args.topics)]
    _topics = itertools.cycle(names)
    try:
        with Admin(namesrv, **ADMIN_ACCOUNT) as admin:
            for name in names:
                admin.create_topic(name, args.queues, args.queues)
            for name in names:
                admin.wait_topic_route(name, timeout_s=60)
        with Producer(GROUP, namesrv, **CLIENT_ACCOUNT) as producer:
            # Warm-up: connections, routes, the broker's first files, every queue's consume-queue file (made
            # once per queue: with many topics, making them would otherwise be most of a short run).
            for _ in range(max(2000, 2 * len(names) * args.queues)):
                producer.send(Message(next_topic(), body))
            print(f"body {args.body} B, {len(names)} topic(s) x {args.queues} queues, {args.duration:.0f} s per "
                  f"mode, namesrv {namesrv}", flush=True)
            for mode in args.modes.split(","):
                run = runners[mode.strip()]
                prof = cProfile.Profile() if args.profile else None
                watched = watched_pids(services)
                cpu_before, proc_before = thread_times(list(watched)), process_times(list(watched))
                if prof:
                    prof.enable()
                with GcMeter() as gc_meter:
                    n, elapsed, lat = run(producer)
                if prof:
                    prof.disable()
                cpu_after, proc_after = thread_times(list(watched)), process_times(list(watched))
                report(mode, n, elapsed, lat)
                report_cpu(mode, cpu_per_process(proc_before, proc_after, n, watched))
                if args.thread_cpu:
                    report_thread_cpu(cpu_before, cpu_after, n, watched)
                if args.gc:
                    gc_meter.report(mode, n)
                if prof:
                    pstats.Stats(prof).sort_stats("tottime").print_stats(20)
            if services is not None and not args.stub:
                store = os.path.join(services.dir, "store")
                print(f"store disk use: {disk_use(store) / 2**20:,.0f} MiB (consume queues "
                      f"{disk_use(os.path.join(store, 'consumequeue')) / 2**20:,.1f} MiB, index "
                      f"{disk_use(os.path.join(store, 'index')) / 2**20:,.1f} MiB)", flush=True)
    finally:
        if services is not None:
            services.stop()
        spans = tracing.stop()
        if spans is not None:
            print(f"tracing {args.tracing}: {spans:,} spans received", flush=True)
        if curve_dir is not None:
            shutil.rmtree(curve_dir, ignore_errors=True)
        if acl_dir is not None:
            shutil.rmtree(acl_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
