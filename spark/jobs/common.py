"""What the jobs share: the Spark session and the source options from the command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from pyspark import SparkConf
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
    parser.add_argument("--shuffle-partitions", type=int, default=None,
                        help="spark.sql.shuffle.partitions (default: the cores Spark has, its default parallelism; "
                             "a stateful query keeps the number its checkpoint was started with)")
    parser.add_argument("--conf", action="append", default=[], type=_conf_item, metavar="KEY=VALUE",
                        help="a Spark setting, as spark-submit --conf (repeatable); wins over the job's defaults")


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
LOG_LEVEL = "spark.log.level"

#: The jobs' Spark settings where the user sets none (with --conf, spark-submit's --conf or spark-defaults.conf):
#: no web UI, no console progress bars over the job's own output, warnings and errors only in the log.
#: spark.sql.shuffle.partitions is fitted too, to the cores (see :func:`session`): Spark's 200 are 200 tasks,
#: each with a state store to load and write, in every micro-batch of a stateful job on two cores.
JOB_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    LOG_LEVEL: "WARN",
}


def _conf_item(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def job_conf(args: argparse.Namespace) -> dict[str, str]:
    """The Spark settings of the command line: each ``--conf``, then ``--shuffle-partitions``."""
    conf = dict(args.conf)
    if args.shuffle_partitions:
        conf[SHUFFLE_PARTITIONS] = str(args.shuffle_partitions)
    return conf


def session(app: str, master: str | None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """The job's session, with the rocketmesh source registered. Workers run this Python.

    Settings, the first that gives one wins: ``conf`` (the job's ``--conf``), spark-submit's ``--conf`` or
    spark-defaults.conf, then :data:`JOB_DEFAULTS`, and spark.sql.shuffle.partitions set to the session's
    default parallelism (the cores of local[N]; on a cluster, the executors' cores known at the start)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = dict(conf or {})
    if not master and "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Run with python -m (not spark-submit, which sets the gateway and the master): Spark on this machine.
        master = "local[2]"
    given = SparkConf()  # spark-submit's --conf and spark-defaults.conf (this starts Spark's JVM under python -m)
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    chosen = {**{k: v for k, v in JOB_DEFAULTS.items() if not given.contains(k)}, **conf}
    for key, value in chosen.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if SHUFFLE_PARTITIONS not in chosen and not given.contains(SHUFFLE_PARTITIONS):
        spark.conf.set(SHUFFLE_PARTITIONS, str(spark.sparkContext.defaultParallelism))
    # spark.log.level applies when the context starts; a context that was running already takes it here.
    spark.sparkContext.setLogLevel(chosen.get(LOG_LEVEL) or given.get(LOG_LEVEL) or "WARN")
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
