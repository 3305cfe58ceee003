"""PySpark data source subscribing as a consumer group (built by the Spark issue)."""
