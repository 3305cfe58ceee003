"""What the jobs share: the Spark session and the source options from the command line."""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

import rocketmesh.spark
from rocketmesh.client import NAMESRV_ADDR_ENV
from rocketmesh.spark.listener import commit_last_batch


def add_source_args(parser: argparse.ArgumentParser, topic: str, group: str) -> None:
    """The options every job reading a topic takes."""
    parser.add_argument("-n", "--namesrv", default=os.environ.get(NAMESRV_ADDR_ENV, "127.0.0.1:9876"),
                        help=f"name server list host:port;host:port (default ${NAMESRV_ADDR_ENV} or 127.0.0.1:9876)")
    parser.add_argument("-t", "--topic", default=topic, help=f"topic to read (default {topic})")
    parser.add_argument("-g", "--group", default=group, help=f"consumer group (default {group})")
    parser.add_argument("--starting-offsets", default="group",
                        help="group (default) | earliest | latest | epoch ms | JSON of queue offsets")
    parser.add_argument("--max-records-per-trigger", type=int, default=None)
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (the query's offsets)")
    parser.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval")
    parser.add_argument("--available-now", action="store_true",
                        help="read what is there at the start, then stop (Trigger.AvailableNow)")
    parser.add_argument("--master", default=None, help="Spark master when not run by spark-submit (local[2])")


def session(app: str, master: str | None) -> SparkSession:
    """The job's session, with the rocketmesh source registered. Workers run this Python."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app).config("spark.ui.enabled", "false")
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Run with python -m (not spark-submit, which sets the gateway and the master): Spark on this machine.
        builder = builder.master("local[2]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return rocketmesh.spark.register(spark)


def source_options(args: argparse.Namespace, group: str | None = None) -> dict[str, str]:
    """The reader's options from the parsed command line."""
    opts = {"namesrv": args.namesrv, "topic": args.topic, "consumerGroup": group or args.group,
            "startingOffsets": args.starting_offsets}
    if args.max_records_per_trigger:
        opts["maxRecordsPerTrigger"] = str(args.max_records_per_trigger)
    return opts


def trigger(args: argparse.Namespace) -> dict:
    """The writeStream trigger keyword arguments."""
    return {"availableNow": True} if args.available_now else {"processingTime": f"{args.trigger_seconds} seconds"}


def run(spark: SparkSession, queries: list[StreamingQuery], available_now: bool) -> None:
    """Wait for the job's queries: each to its end (AvailableNow), else until one fails or Ctrl-C. Then stop
    them and commit each one's last batch to its group before the process exits (listener events are
    asynchronous; the last one could be lost with the process)."""
    try:
        if available_now:
            for query in queries:
                query.awaitTermination()
        else:
            spark.streams.awaitAnyTermination()  # a query that fails ends the job (and raises its error)
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
            commit_last_batch(query)
