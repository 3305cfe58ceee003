"""Scheduler benchmarks: delivery lateness of timers and delay levels, and re-put throughput.

Run::

    python bench/scheduler_bench.py                          # all modes, default sizes
    python bench/scheduler_bench.py --modes timers --timers 100000
    python bench/scheduler_bench.py --modes levels --rate 2000 --duration 10
    python bench/scheduler_bench.py --modes burst --burst 50000

Modes:
  timers  --timers timer messages (1 KiB) due at random times 20-40 s ahead, so all are pending at
          once; lateness = re-put store time - due time (broker clock), and poll time - due time
  levels  --rate msg/s at delay level 1 (1 s) for --duration s; lateness = re-put store time -
          (born time + 1 s), which counts the send's own latency as lateness
  burst   --burst timers all due at the same instant; re-put throughput in msg/s from the due time
          to the last re-put store time

Each mode starts its own name server, broker and one scheduler replica (child processes).
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

import orjson

from benchkit import Services, free_port, make_topic, percentile
from rocketmesh import Message, Producer
from rocketmesh.client.consumer import PullConsumer
from rocketmesh.model.message import MessageConst
from rocketmesh.remoting import RemotingClient, RequestCode, request

BODY = b"x" * 1024


class Mesh(Services):
    """Name server, broker and one scheduler replica."""

    def __init__(self) -> None:
        super().__init__(["mappedFileSizeCommitLog=268435456", "flushDiskType=ASYNC_FLUSH"])
        self.scheduler_port = free_port()
        self.start("scheduler", "rocketmesh.scheduler", "-n", self.namesrv, "--listen-port", str(self.scheduler_port),
                   "--set", "listenAddress=127.0.0.1")

    def scheduler_status(self) -> dict:
        with RemotingClient(name="bench-status") as client:
            resp = client.invoke_sync(f"127.0.0.1:{self.scheduler_port}",
                                      request(RequestCode.GET_CONSUMER_RUNNING_INFO), 3000)
        return orjson.loads(resp.body)

    def scheduler_pid(self) -> int:
        return self.procs[-1].pid


def send_all(producer: Producer, msgs: list[Message], window: int = 2000) -> float:
    """Send asynchronously with at most ``window`` in flight; returns the seconds it took."""
    sem = threading.Semaphore(window)
    errors: list[BaseException] = []

    def done(fut) -> None:
        sem.release()
        if fut.exception() is not None:
            errors.append(fut.exception())

    start = time.monotonic()
    for m in msgs:
        sem.acquire()
        producer.send_async(m).add_done_callback(done)
    for _ in range(window):
        sem.acquire()
    if errors:
        raise SystemExit(f"{len(errors)} sends failed, first: {errors[0]}")
    return time.monotonic() - start


class Drain(threading.Thread):
    """Polls ``n`` messages of ``topic`` in the background; ``result()`` gives (poll time ms, message) pairs."""

    def __init__(self, namesrv: str, topic: str, n: int, group: str, timeout_s: float) -> None:
        super().__init__(daemon=True)
        self.args = (namesrv, topic, n, group, timeout_s)
        self.out: list[tuple[int, object]] = []
        self.start()

    def run(self) -> None:
        self.out = drain(*self.args)

    def result(self) -> list[tuple[int, object]]:
        self.join()
        return self.out


def drain(namesrv: str, topic: str, n: int, group: str, timeout_s: float) -> list[tuple[int, object]]:
    """Poll ``n`` messages of ``topic``; returns (poll time ms, message) pairs."""
    out: list[tuple[int, object]] = []
    consumer = PullConsumer(group, namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", pull_batch_size=256,
                            instance_name=group)
    consumer.subscribe(topic)
    with consumer:
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            batch = consumer.poll(1000)
            now = int(time.time() * 1000)
            out.extend((now, m) for m in batch)
    return out


def stats(values: list[float]) -> str:
    v = sorted(values)
    return (f"p50 {percentile(v, 0.5):.1f} ms, p99 {percentile(v, 0.99):.1f} ms, max {v[-1]:.1f} ms, "
            f"mean {statistics.fmean(v):.1f} ms" if v else "no samples")



def run_timers(n: int) -> None:
    mesh = Mesh()
    try:
        topic = "SchedBenchTimers"
        make_topic(mesh.namesrv, topic)
        reader = Drain(mesh.namesrv, topic, n, "bench-timer-reader", 120)
        rng = random.Random(1)
        base = int(time.time() * 1000) + 20_000
        dues = [base + rng.randrange(0, 20_000) for _ in range(n)]
        with Producer("bench-timer", mesh.namesrv) as producer:
            took = send_all(producer, [Message(topic, BODY, deliver_at_ms=d) for d in dues])
        pending_peak = 0
        while time.time() * 1000 < base:
            pending_peak = max(pending_peak, mesh.scheduler_status()["pending"])
            time.sleep(0.5)
        got = reader.result()
        store_late = [m.store_timestamp - int(m.properties[MessageConst.TIMER_DELIVER_MS]) for _, m in got]
        poll_late = [t - int(m.properties[MessageConst.TIMER_DELIVER_MS]) for t, m in got]
        print(f"timers: {n} sent in {took:.1f} s ({n / took:,.0f} msg/s); peak pending at the scheduler "
              f"{pending_peak:,}; delivered {len(got):,}")
        print(f"  lateness, re-put store time - due: {stats(store_late)}")
        print(f"  lateness, consumer poll - due:      {stats(poll_late)}")
        early = sum(1 for x in store_late if x < 0)
        print(f"  delivered early: {early}")
    finally:
        mesh.stop()


def run_levels(rate: int, duration: float) -> None:
    mesh = Mesh()
    try:
        topic = "SchedBenchLevels"
        make_topic(mesh.namesrv, topic)
        n = int(rate * duration)
        reader = Drain(mesh.namesrv, topic, n, "bench-level-reader", duration + 60)
        time.sleep(2)
        with Producer("bench-level", mesh.namesrv) as producer:
            interval = 1.0 / rate
            start = time.monotonic()
            futures = []
            for i in range(n):
                target = start + i * interval
                delay = target - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                futures.append(producer.send_async(Message(topic, BODY, delay_level=1)))
            for f in futures:
                f.result(10)
        got = reader.result()
        store_late = [m.store_timestamp - (m.born_timestamp + 1000) for _, m in got]
        poll_late = [t - (m.born_timestamp + 1000) for t, m in got]
        print(f"levels: {n} at level 1 (1 s) at {rate} msg/s; delivered {len(got):,}")
        print(f"  lateness, re-put store time - (born + 1 s): {stats(store_late)}")
        print(f"  lateness, consumer poll - (born + 1 s):     {stats(poll_late)}")
    finally:
        mesh.stop()


def run_burst(n: int) -> None:
    mesh = Mesh()
    try:
        topic = "SchedBenchBurst"
        make_topic(mesh.namesrv, topic)
        reader = Drain(mesh.namesrv, topic, n, "bench-burst-reader", 150)
        due = int(time.time() * 1000) + 30_000
        with Producer("bench-burst", mesh.namesrv) as producer:
            took = send_all(producer, [Message(topic, BODY, deliver_at_ms=due) for _ in range(n)])
        if time.time() * 1000 > due - 2000:
            raise SystemExit("sending took too long for the burst; use a smaller --burst")
        got = reader.result()
        last = max(m.store_timestamp for _, m in got)
        first = min(m.store_timestamp for _, m in got)
        print(f"burst: {n:,} timers due at one instant (sent in {took:.1f} s); delivered {len(got):,}")
        print(f"  re-put throughput: {n / max(1, last - due) * 1000:,.0f} msg/s "
              f"(first re-put {first - due} ms after due, last {last - due} ms after due)")
    finally:
        mesh.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="timers,levels,burst")
    ap.add_argument("--timers", type=int, default=100_000)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--burst", type=int, default=100_000)
    args = ap.parse_args()
    modes = args.modes.split(",")
    if "timers" in modes:
        run_timers(args.timers)
    if "levels" in modes:
        run_levels(args.rate, args.duration)
    if "burst" in modes:
        run_burst(args.burst)


if __name__ == "__main__":
    main()
