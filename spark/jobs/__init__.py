"""Spark jobs on the mesh, each runnable as ``python -m rocketmesh.spark.jobs.<name>`` or with spark-submit.

- ``archive``: a topic mirrored into parquet files, every message exactly once.
- ``order_events``: the generator of order events (the input of ``merchant_totals``).
- ``merchant_totals``: order events -> per-merchant totals per time window -> parquet, plus an alerts topic.
"""
