"""The Spark data source's throughput and latency, against services it starts itself, with a local Spark.

Run::

    python bench/spark_bench.py                                # 1,000,000 x 1 KiB backlog, local[2], 3 runs a mode
    python bench/spark_bench.py --backlog 200000 --runs 1      # smaller
    python bench/spark_bench.py --modes noop,latency --namesrv 127.0.0.1:9876   # running services

Modes:
  noop     a streaming query drains the backlog (Trigger.AvailableNow, startingOffsets earliest) into the
           noop sink: rows/s from the query's start to its end
  parquet  the same into parquet files
  writer   df.write.format("rocketmesh") of --write-rows rows of the same size: rows/s
  latency  one message at a time into a running query (default trigger: as soon as the last batch ends):
           store time of the message to its row reaching foreachBatch on the driver, p50 over --sends

The backlog is consumer_bench's (topic ConsumerBench, 8 queues), filled once; the queries are warmed
(Python workers started) by a small read first. Each drain is its own query with a new checkpoint.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

os.environ.setdefault("ROCKETMESH_LOG_LEVEL", "WARNING")
os.environ["PYSPARK_PYTHON"] = sys.executable

from pyspark.sql import (
    SparkSession,  # noqa: E402
    functions as F,  # noqa: E402
)

import rocketmesh.spark  # noqa: E402
from benchkit import BACKLOG_TOPIC, Services, fill_backlog  # noqa: E402
from rocketmesh import Admin, Message, Producer  # noqa: E402

OUT_TOPIC = "SparkBenchOut"
LATENCY_TOPIC = "SparkBenchLatency"


def drain(spark: SparkSession, namesrv: str, sink: str, n: int, work: str) -> float:
    """Rows/s of one AvailableNow query reading the whole backlog into ``sink``."""
    df = (spark.readStream.format("rocketmesh").option("namesrv", namesrv).option("topic", BACKLOG_TOPIC)
          .option("consumerGroup", "spark-bench").option("startingOffsets", "earliest").load())
    cp = tempfile.mkdtemp(dir=work)
    writer = df.writeStream.format(sink).option("checkpointLocation", cp)
    if sink == "parquet":
        writer = writer.option("path", tempfile.mkdtemp(dir=work))
    t0 = time.monotonic()
    query = writer.trigger(availableNow=True).start()
    if not query.awaitTermination(1800):
        query.stop()
        raise SystemExit("the drain did not finish within 30 minutes")
    elapsed = time.monotonic() - t0
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != n:
        raise SystemExit(f"the query read {rows} rows, the backlog holds {n}")
    return n / elapsed


def write(spark: SparkSession, namesrv: str, n: int, size: int) -> float:
    """Rows/s of one batch write of ``n`` rows (bodies of ``size`` bytes, 2 partitions)."""
    df = spark.range(n, numPartitions=2).select(F.expr(f"repeat('x', {size})").alias("body")).cache()
    df.count()  # build the rows first: time the sink, not the generator
    t0 = time.monotonic()
    df.write.format("rocketmesh").option("namesrv", namesrv).option("topic", OUT_TOPIC).mode("append").save()
    rate = n / (time.monotonic() - t0)
    df.unpersist()
    return rate


def latency(spark: SparkSession, namesrv: str, sends: int, work: str) -> list[float]:
    """Milliseconds from a message's store time to its row in foreachBatch, one message at a time."""
    seen: list[float] = []
    arrived = threading.Event()

    def on_batch(df, batch_id):  # runs in the driver
        for row in df.select("store_timestamp").collect():
            seen.append(time.time() * 1000 - row.store_timestamp.timestamp() * 1000)
            arrived.set()

    df = (spark.readStream.format("rocketmesh").option("namesrv", namesrv).option("topic", LATENCY_TOPIC)
          .option("consumerGroup", "spark-bench-latency").option("startingOffsets", "latest").load())
    query = df.writeStream.foreachBatch(on_batch).option("checkpointLocation", tempfile.mkdtemp(dir=work)).start()
    try:
        time.sleep(3)  # the first (empty) batches
        with Producer("spark-bench-latency", namesrv) as producer:
            for _ in range(sends + 1):
                arrived.clear()
                producer.send(Message(LATENCY_TOPIC, b"x"))
                if not arrived.wait(30):
                    raise SystemExit("a message did not reach the query within 30 s")
                time.sleep(0.2)
    finally:
        query.stop()
    return seen[1:]  # the first row also waits for the query to warm up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--namesrv", help="use running services instead of starting them")
    parser.add_argument("--modes", default="noop,parquet,writer,latency")
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--write-rows", type=int, default=200_000)
    parser.add_argument("--sends", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    modes = args.modes.split(",")
    services = None if args.namesrv else Services(["flushDiskType=ASYNC_FLUSH"])
    namesrv = args.namesrv or services.namesrv
    work = tempfile.mkdtemp(prefix="spark-bench-")
    try:
        fill_backlog(namesrv, args.backlog, args.size, args.queues)
        with Admin(namesrv) as admin:
            for topic in (OUT_TOPIC, LATENCY_TOPIC):
                admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
                admin.wait_topic_route(topic)
            n = sum(o.max_offset - o.min_offset for o in admin.topic_status(BACKLOG_TOPIC).values())
        spark = (SparkSession.builder.master(args.master).appName("spark_bench").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        rocketmesh.spark.register(spark)
        # Warm-up: start the Python workers and load the modules once (a write, then a read of it).
        spark.range(1000, numPartitions=2).select(F.lit("w").alias("body")).write.format("rocketmesh") \
            .option("namesrv", namesrv).option("topic", OUT_TOPIC).mode("append").save()
        spark.read.format("rocketmesh").option("namesrv", namesrv).option("topic", OUT_TOPIC).load() \
            .write.format("noop").mode("overwrite").save()
        print(f"backlog {n:,} x {args.size} B in {args.queues} queues; Spark {spark.version} {args.master}", flush=True)
        for mode in modes:
            if mode in ("noop", "parquet"):
                rates = [drain(spark, namesrv, mode, n, work) for _ in range(args.runs)]
                print(f"{mode:8} median {statistics.median(rates):,.0f} rows/s  runs "
                      + " ".join(f"{r:,.0f}" for r in rates), flush=True)
            elif mode == "writer":
                rates = [write(spark, namesrv, args.write_rows, args.size) for _ in range(args.runs)]
                print(f"writer   median {statistics.median(rates):,.0f} rows/s  runs "
                      + " ".join(f"{r:,.0f}" for r in rates), flush=True)
            elif mode == "latency":
                ms = sorted(latency(spark, namesrv, args.sends, work))
                print(f"latency  1-row batch, store -> foreachBatch: p50 {statistics.median(ms):.0f} ms  "
                      f"min {ms[0]:.0f} ms  max {ms[-1]:.0f} ms ({len(ms)} sends)", flush=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if services is not None:
            services.stop()


if __name__ == "__main__":
    main()
