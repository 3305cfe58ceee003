"""The `rocketmesh` data source: options in, readers and writers out."""

from __future__ import annotations

import dataclasses

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from rocketmesh.spark.options import OptionError, SinkOptions, SourceOptions
from rocketmesh.spark.reader import RocketMeshReader, RocketMeshStreamReader, check_source
from rocketmesh.spark.schema import SCHEMA
from rocketmesh.spark.writer import RocketMeshStreamWriter, RocketMeshWriter, check_sink_schema


class RocketMeshDataSource(DataSource):
    """``spark.readStream.format("rocketmesh")``, ``spark.read``, ``df.write`` and ``df.writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "rocketmesh"

    def schema(self) -> StructType:
        return SCHEMA

    def _source_options(self) -> SourceOptions:
        opts = SourceOptions.parse(self.options)
        check_source(opts)
        return opts

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._source_options()
        if not any(k.lower() == "startingoffsets" for k in self.options):
            # A batch read without a start reads from each queue's first message, as Spark's Kafka source.
            opts = dataclasses.replace(opts, starting="earliest")
        return RocketMeshReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = self._source_options()
        if any(k.lower() == "endingoffsets" for k in self.options):
            raise OptionError("option 'endingOffsets' is for batch reads; a streaming query runs until stopped "
                              "(use Trigger.AvailableNow to stop at the offsets of its start)")
        return RocketMeshStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = self._sink(schema, overwrite)
        return RocketMeshWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = self._sink(schema, overwrite)
        return RocketMeshStreamWriter(opts)

    def _sink(self, schema: StructType, overwrite: bool) -> SinkOptions:
        if overwrite:
            raise OptionError("a topic cannot be overwritten: write with .mode(\"append\") (or outputMode "
                              "\"append\"/\"update\" for streams)")
        opts = SinkOptions.parse(self.options)
        check_sink_schema(schema, opts)
        return opts
