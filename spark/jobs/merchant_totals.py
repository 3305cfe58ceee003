"""Order events -> each merchant's order count and amount per event-time window -> parquet, plus alerts.

    python -m rocketmesh.spark.jobs.merchant_totals -n 127.0.0.1:9876 -t Orders \
        --output /data/merchant-totals --checkpoint /data/merchant-totals-cp --alerts-topic MerchantAlerts

Two streaming queries, each a consumer group of its own (``<group>`` and
``<group>-alerts``): one appends closed windows to parquet (exactly once, the file
sink with its checkpoint); one sends a JSON alert to ``--alerts-topic`` for each
closed window whose amount reaches ``--alert-amount`` (key: the merchant, tag:
``alert``). A window closes once the watermark (latest event time seen minus
``--watermark``) passes its end.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession, functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from rocketmesh.spark.jobs.common import add_source_args, job_conf, run, session, source_options, trigger

EVENT = StructType([
    StructField("order_id", StringType()),
    StructField("merchant", StringType()),
    StructField("amount", DoubleType()),
    StructField("event_time", LongType()),
])


def merchant_totals(spark: SparkSession, options: dict[str, str], window: str, watermark: str) -> DataFrame:
    """The stream of closed windows: window_start, window_end, merchant, orders, amount."""
    raw = spark.readStream.format("rocketmesh").options(**options).load()
    events = (raw.select(F.from_json(F.col("body").cast("string"), EVENT).alias("e")).select("e.*")
              .where(F.col("merchant").isNotNull())
              .withColumn("event_time", F.timestamp_millis(F.col("event_time"))))
    return (events.withWatermark("event_time", watermark)
            .groupBy(F.window("event_time", window).alias("w"), "merchant")
            .agg(F.count(F.lit(1)).alias("orders"), F.round(F.sum("amount"), 2).alias("amount"))
            .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "merchant",
                    "orders", "amount"))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rocketmesh.spark.jobs.merchant_totals",
                                     description=__doc__.split("\n")[0])
    add_source_args(parser, topic="Orders", group="merchant-totals")
    parser.add_argument("--output", required=True, help="parquet directory of the windows' totals")
    parser.add_argument("--alerts-topic", default="MerchantAlerts")
    parser.add_argument("--alert-amount", type=float, default=5000.0, help="a window at or above this amount alerts")
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--watermark", default="10 seconds", help="how late an event may come")
    args = parser.parse_args(argv)
    spark = session("rocketmesh-merchant-totals", args.master, job_conf(args))

    totals = merchant_totals(spark, source_options(args), args.window, args.watermark)
    to_parquet = (totals.writeStream.format("parquet").outputMode("append").option("path", args.output)
                  .option("checkpointLocation", f"{args.checkpoint}/totals").trigger(**trigger(args)).start())

    alerts = (merchant_totals(spark, source_options(args, f"{args.group}-alerts"), args.window, args.watermark)
              .where(F.col("amount") >= args.alert_amount)
              .select(F.to_json(F.struct("merchant", "window_start", "window_end", "orders", "amount")).alias("body"),
                      F.col("merchant").alias("keys"), F.lit("alert").alias("tags")))
    to_alerts = (alerts.writeStream.format("rocketmesh").outputMode("append").option("namesrv", args.namesrv)
                 .option("topic", args.alerts_topic).option("checkpointLocation", f"{args.checkpoint}/alerts")
                 .trigger(**trigger(args)).start())
    print(f"merchant totals of {args.topic} to {args.output}, alerts to {args.alerts_topic}", flush=True)
    run(spark, [to_parquet, to_alerts], args.available_now)


if __name__ == "__main__":
    main()
