"""The README's Spark job, merchant_totals, fed by order_events at a steady rate on a local Spark: does it keep up?

Run::

    python bench/spark_jobs_bench.py                                   # --rate 2000 for 60 s, local[2]
    python bench/spark_jobs_bench.py --duration 90 --namesrv 127.0.0.1:9876   # running services
    python bench/spark_jobs_bench.py --job-args='--shuffle-partitions 200'    # a setting of the job's command line

The bench starts a name server and a broker (or takes ``--namesrv``), makes the topics (Orders with
``--queues`` queues, as ``rocketmesh admin update-topic`` does, and MerchantAlerts) and runs the job as
``python -m rocketmesh.spark.jobs.merchant_totals -n ... --starting-offsets earliest`` runs: its ``main()``,
in a thread of this process, with the job's own session and defaults. Once both of its queries have run a
batch, the generator ``python -m rocketmesh.spark.jobs.order_events --rate R`` sends ``R x --duration``
events as a child process. Then the bench waits (at most ``--drain`` s) until both queries have read them
all, stops the job and reads both topics back.

Figures, per query (``parquet``: the totals to parquet; ``alerts``: the alerts to MerchantAlerts):
  batch           durationMs.triggerExecution of the micro-batches that read events: median, p90, max; how
                  many went over the 1 s trigger, the most events one read
  parts           the median of each other part of durationMs (addBatch, queryPlanning, walCommit, ...)
  events/s        events read / (the first event's store time -> the end of the last batch that read one)
Window to alert: for each closed window, the store time of the window's first alert minus that of the event
that closed it (the first at or after the window's end plus --watermark: the watermark passes the end then),
and minus that of the window's last event. The generator's event time runs 10 ms an event, so at 2,000
events/s a one-minute window closes every 3 s and --watermark 10 s is 0.5 s of the run.
"""

from __future__ import annotations

import argparse
import bisect
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime

os.environ.setdefault("ROCKETMESH_LOG_LEVEL", "WARNING")
os.environ["PYSPARK_PYTHON"] = sys.executable

import orjson  # noqa: E402

from benchkit import Services, percentile  # noqa: E402
from rocketmesh import Admin, PullConsumer  # noqa: E402
from rocketmesh.runtime.python_process import python_module_argv  # noqa: E402
from rocketmesh.spark.jobs import merchant_totals  # noqa: E402
from rocketmesh.spark.jobs.common import session  # noqa: E402

TOPIC = "Orders"
ALERTS = "MerchantAlerts"
GROUP = "merchant-totals"


def _ms(iso: str) -> float:
    """Epoch ms of an ISO 8601 time: a progress's timestamp (UTC), an alert's window_end (Spark's time zone)."""
    return datetime.fromisoformat(iso).timestamp() * 1000


def _label(progress: dict) -> str:
    return "parquet" if "FileSink" in progress["sink"]["description"] else "alerts"


def read_topic(namesrv: str, topic: str, want: int, timeout_s: float = 60.0) -> list:
    """Every message of ``topic`` (at least ``want``), read by a new group from the first offset."""
    out: list = []
    deadline = time.monotonic() + timeout_s
    with PullConsumer(f"spark-jobs-bench-{time.time_ns()}", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                      pull_batch_size=512) as c:
        c.subscribe(topic)
        while time.monotonic() < deadline:
            msgs = c.poll(timeout_ms=2000 if len(out) >= want else 5000)
            if not msgs and len(out) >= want:
                break
            out.extend(msgs)
    return out


def collect(spark, progress: dict) -> None:
    """Every query's progress since the last look, by (query id, batch id)."""
    for q in spark.streams.active:
        for p in q.recentProgress:
            d = orjson.loads(p.json) if hasattr(p, "json") else dict(p)
            progress[(d["id"], d["batchId"])] = d


def summary(values: list[float]) -> str:
    v = sorted(values)
    if not v:
        return "none"
    return f"median {statistics.median(v):,.0f} ms  p90 {percentile(v, 0.9):,.0f} ms  max {v[-1]:,.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--namesrv", help="use running services instead of starting them")
    parser.add_argument("--rate", type=int, default=2000, help="events a second (order_events --rate)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of sending")
    parser.add_argument("--drain", type=float, default=120.0, help="bound of the wait for the job to catch up (s)")
    parser.add_argument("--queues", type=int, default=8, help="queues of the Orders topic")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--watermark", default="10 seconds", help="the job's --watermark")
    parser.add_argument("--job-args", default="",
                        help="more of the job's command line, one string (its Spark SQL settings apply; the session "
                             "is made first, with the job's defaults, so settings of Spark's context do not)")
    args = parser.parse_args()
    services = None if args.namesrv else Services(["flushDiskType=ASYNC_FLUSH"])
    namesrv = args.namesrv or services.namesrv
    work = tempfile.mkdtemp(prefix="spark-jobs-bench-")
    count = int(args.rate * args.duration)
    try:
        with Admin(namesrv) as admin:
            for topic, queues in ((TOPIC, args.queues), (ALERTS, 4)):
                admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
                admin.wait_topic_route(topic)
        argv = ["-n", namesrv, "-t", TOPIC, "-g", GROUP, "--starting-offsets", "earliest", "--master", args.master,
                "--output", f"{work}/totals", "--checkpoint", f"{work}/cp", "--alerts-topic", ALERTS,
                "--watermark", args.watermark, *shlex.split(args.job_args)]
        # The job's session first (its defaults, as main() makes it), so that the bench can watch its queries.
        # The job runs in this thread (its sink is looked up in the session active here); the bench in another.
        spark = session("rocketmesh-merchant-totals", args.master)
        progress: dict = {}
        outcome: dict = {}
        bench = threading.Thread(target=drive, args=(spark, args, namesrv, count, progress, outcome),
                                 name="bench", daemon=True)
        bench.start()
        merchant_totals.main(argv)
        bench.join(60)
        if "error" in outcome:
            raise SystemExit(outcome["error"])
        orders = read_topic(namesrv, TOPIC, count)
        alerts = read_topic(namesrv, ALERTS, 1, timeout_s=30)
        report(args, progress, orders, alerts, count, outcome["send_s"], outcome["caught_up"])
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if services is not None:
            services.stop()


def drive(spark, args, namesrv: str, count: int, progress: dict, outcome: dict) -> None:
    """The bench's side of a run: wait for the job's queries, run the generator, wait for the job to read
    everything, stop its queries (which ends the job's main())."""
    try:
        deadline = time.monotonic() + 120
        while len({k[0] for k in progress}) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the job's two queries did not run a batch within 120 s")
            time.sleep(0.5)
            collect(spark, progress)
        shuffle = spark.conf.get("spark.sql.shuffle.partitions")
        print(f"merchant_totals on {args.master} (Spark {spark.version}, shuffle partitions {shuffle}); "
              f"order_events --rate {args.rate} for {args.duration:.0f} s into {args.queues} queues", flush=True)
        began = time.time()
        gen = subprocess.run(python_module_argv("rocketmesh.spark.jobs.order_events", "-n", namesrv, "-t", TOPIC,
                                                "--count", str(count), "--rate", str(args.rate)),
                             capture_output=True, text=True, timeout=args.duration * 3 + 60, check=False)
        if gen.returncode:
            raise RuntimeError(f"order_events failed: {gen.stderr[-2000:]}")
        outcome["send_s"] = time.time() - began
        outcome["caught_up"] = False
        deadline = time.monotonic() + args.drain
        while time.monotonic() < deadline:
            collect(spark, progress)
            read = events_read(progress)
            if len(read) == 2 and all(n >= count for n in read.values()):
                outcome["caught_up"] = True
                break
            time.sleep(1)
        time.sleep(5)  # the closing batches of the last windows (no-data batches)
        collect(spark, progress)
    except BaseException as exc:  # noqa: BLE001 - reported by the main thread
        outcome["error"] = str(exc)
    finally:
        for q in spark.streams.active:
            q.stop()


def events_read(progress: dict) -> dict[str, int]:
    """Events read so far, per query."""
    read: dict[str, int] = {}
    for d in progress.values():
        read[_label(d)] = read.get(_label(d), 0) + d["numInputRows"]
    return read


def report(args, progress: dict, orders: list, alerts: list, count: int, send_s: float, caught_up: bool) -> None:
    first_stored = min(m.store_timestamp for m in orders)
    print(f"sent     {count:,} events in {send_s:.1f} s ({count / send_s:,.0f} events/s); "
          f"{'caught up' if caught_up else f'NOT caught up within {args.drain:.0f} s'}", flush=True)
    for label in ("parquet", "alerts"):
        batches = sorted((d for d in progress.values() if _label(d) == label), key=lambda d: d["batchId"])
        with_rows = [d for d in batches if d["numInputRows"] and _ms(d["timestamp"]) >= first_stored - 1000]
        if not with_rows:
            print(f"{label:8} no batch read events", flush=True)
            continue
        durations = [d["durationMs"]["triggerExecution"] for d in with_rows]
        last_end = max(_ms(d["timestamp"]) + d["durationMs"]["triggerExecution"] for d in with_rows)
        read = sum(d["numInputRows"] for d in with_rows)
        late = sum(1 for x in durations if x > 1000)
        print(f"{label:8} batch {summary(durations)} ({len(with_rows)} batches with events, {late} over the "
              f"1 s trigger; largest {max(d['numInputRows'] for d in with_rows):,} events)", flush=True)
        parts = sorted({k for d in with_rows for k in d["durationMs"]} - {"triggerExecution"})
        print(f"{label:8} parts, median ms: " + ", ".join(
            f"{k} {statistics.median(d['durationMs'].get(k, 0) for d in with_rows):,.0f}" for k in parts), flush=True)
        print(f"{label:8} events/s {read / ((last_end - first_stored) / 1000):,.0f} sustained "
              f"({read:,} events, first stored -> last batch's end); processedRowsPerSecond median "
              f"{statistics.median(d['processedRowsPerSecond'] for d in with_rows):,.0f}", flush=True)

    # Window to alert: a window's events, its closing event (the watermark passes its end), its first alert.
    watermark_ms = _duration_ms(args.watermark)
    events = sorted((orjson.loads(m.body)["event_time"], m.store_timestamp) for m in orders)
    first_alert: dict[int, int] = {}
    for m in alerts:
        a = orjson.loads(m.body)
        end = int(_ms(a["window_end"]))
        first_alert[end] = min(first_alert.get(end, m.store_timestamp), m.store_timestamp)
    from_close, from_last = [], []
    times = [e[0] for e in events]
    for end, alerted in sorted(first_alert.items()):
        i = bisect.bisect_left(times, end + watermark_ms)  # the first event at or past end + watermark
        j = bisect.bisect_left(times, end) - 1  # the window's last event
        if i >= len(events) or j < 0:
            continue  # closed by no event of the run (the generator's last windows)
        from_close.append(alerted - events[i][1])
        from_last.append(alerted - events[j][1])
    print(f"alert    {len(first_alert)} windows alerted ({len(alerts)} alerts); window to alert, from the event "
          f"that closed it: {summary(from_close)}; from its last event: {summary(from_last)}", flush=True)


def _duration_ms(text: str) -> int:
    n, unit = text.split()
    return int(float(n) * {"second": 1000, "seconds": 1000, "minute": 60_000, "minutes": 60_000,
                           "millisecond": 1, "milliseconds": 1}[unit])


if __name__ == "__main__":
    main()
