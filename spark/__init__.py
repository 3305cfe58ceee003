"""PySpark data source `rocketmesh`: read topics as a consumer group (streaming and batch), write DataFrames.

    from pyspark.sql import SparkSession
    import rocketmesh.spark

    spark = SparkSession.builder.getOrCreate()
    rocketmesh.spark.register(spark)
    orders = (spark.readStream.format("rocketmesh")
              .option("namesrv", "127.0.0.1:9876").option("topic", "Orders")
              .option("consumerGroup", "orders-spark").load())

``register`` adds the data source and the driver-side listener that commits
each finished micro-batch's offsets to the consumer group (listener.py).
"""

from __future__ import annotations

import threading

from pyspark.sql import SparkSession

from rocketmesh.spark.listener import OffsetCommitListener, commit_last_batch
from rocketmesh.spark.options import OptionError, SinkOptions, SourceOptions
from rocketmesh.spark.schema import ARROW_SCHEMA, SCHEMA
from rocketmesh.spark.source import RocketMeshDataSource

__all__ = ["ARROW_SCHEMA", "OffsetCommitListener", "OptionError", "RocketMeshDataSource", "SCHEMA", "SinkOptions",
           "SourceOptions", "commit_last_batch", "register"]

_registered: dict[int, OffsetCommitListener] = {}
_lock = threading.Lock()


def register(spark: SparkSession | None = None) -> SparkSession:
    """Register format `rocketmesh` and the offset-commit listener with ``spark`` (default: the active
    session, created when there is none); registering a session again does nothing. Returns the session."""
    spark = spark or SparkSession.builder.getOrCreate()
    with _lock:
        if id(spark) not in _registered:
            spark.dataSource.register(RocketMeshDataSource)
            listener = OffsetCommitListener()
            spark.streams.addListener(listener)
            _registered[id(spark)] = listener
    return spark
