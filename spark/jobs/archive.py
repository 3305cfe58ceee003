"""Mirror a topic into parquet files: every message exactly once, however often the job is stopped.

    python -m rocketmesh.spark.jobs.archive -n 127.0.0.1:9876 -t Orders \
        --output /data/orders --checkpoint /data/orders-checkpoint

The file sink and the checkpoint together make the output exactly once: a
restarted job reads again, by offset, exactly the batch it had not finished.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rocketmesh.spark.jobs.common import add_source_args, job_conf, run, session, source_options, trigger


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rocketmesh.spark.jobs.archive", description=__doc__.split("\n")[0])
    add_source_args(parser, topic="Orders", group="spark-archive")
    parser.add_argument("--output", required=True, help="parquet directory")
    args = parser.parse_args(argv)
    spark = session("rocketmesh-archive", args.master, job_conf(args))
    messages = spark.readStream.format("rocketmesh").options(**source_options(args)).load()
    query = (messages.writeStream.format("parquet").option("path", args.output)
             .option("checkpointLocation", args.checkpoint).trigger(**trigger(args)).start())
    print(f"archiving {args.topic} to {args.output} (query {query.id})", flush=True)
    run(spark, [query], args.available_now)


if __name__ == "__main__":
    main()
