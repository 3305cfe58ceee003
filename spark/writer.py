"""The writers (batch and streaming): DataFrame rows to messages, sent as batch sends.

Columns: ``body`` (string or binary, required) and optional ``topic``, ``keys``,
``tags``, ``properties`` (map<string,string>), ``delay_level`` and
``sharding_key``. Rows go out in send batches of one topic (and, for rows with
a sharding key, one queue chosen by the key's hash, in row order); a delayed
row is sent on its own, as the broker cannot delay a batch.

Retries: every row gets a unique id (UNIQ_KEY) derived from the write (the
streaming query's id and micro-batch id, or the batch write's id), the task's
partition and the row's position. A task first looks up, in the brokers'
index, the id of the first row of its first send batch; if an earlier attempt
stored it, the task skips each send batch the brokers already have, in order,
and sends the rest. Send batches are sent one after another and each is stored
whole or not at all, so what an earlier attempt stored is a prefix of them.
Delayed rows are the exception: the look-up cannot see them, so a retry sends them again.
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, LongType, MapType, ShortType, StringType, StructType

from rocketmesh.client import Admin, MQBrokerError, MQClientError, Producer, SelectMessageQueueByHash
from rocketmesh.model.message import Message, MessageConst, MessageQueue
from rocketmesh.remoting import ResponseCode
from rocketmesh.spark.options import OptionError, SinkOptions

#: Rows and bytes of one send batch (the broker takes up to 4 MiB a request).
SEND_BATCH_ROWS = 512
SEND_BATCH_BYTES = 1024 * 1024
_COLUMNS = {"body", "topic", "keys", "tags", "properties", "delay_level", "sharding_key"}


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """Fail at once for a DataFrame the sink cannot send (the error names the column or option)."""
    names = {f.name: f.dataType for f in schema.fields}
    if "body" not in names:
        raise OptionError(f"the rocketmesh sink needs a 'body' column (string or binary); the DataFrame has "
                          f"{sorted(names)}")
    if not isinstance(names["body"], (StringType, BinaryType)):
        raise OptionError(f"column 'body' must be string or binary, not {names['body'].simpleString()}")
    if "topic" not in names and opts.topic is None:
        raise OptionError("set option 'topic' (or give the DataFrame a 'topic' column): where to send the rows")
    unknown = sorted(set(names) - _COLUMNS)
    if unknown:
        raise OptionError(f"the rocketmesh sink does not know the columns {unknown}; it sends "
                          f"{sorted(_COLUMNS)} (select those, or put extra fields in 'properties')")
    for col in ("topic", "keys", "tags", "sharding_key"):
        if col in names and not isinstance(names[col], StringType):
            raise OptionError(f"column {col!r} must be a string, not {names[col].simpleString()}")
    if "delay_level" in names and not isinstance(names["delay_level"], (IntegerType, LongType, ShortType)):
        raise OptionError("column 'delay_level' must be an integer")
    if "properties" in names and not (isinstance(names["properties"], MapType)
                                      and isinstance(names["properties"].keyType, StringType)):
        raise OptionError("column 'properties' must be a map<string,string>")


@dataclass
class SendReport(WriterCommitMessage):
    """What one task did: rows sent, and rows an earlier attempt had already stored."""

    partition_id: int
    sent: int
    skipped: int


_producers: dict[tuple[str, str, int], Producer] = {}
_producers_lock = threading.Lock()


def _worker_producer(opts: SinkOptions) -> Producer:
    """One started producer per worker process (Spark reuses Python workers across tasks)."""
    key = (opts.namesrv, opts.producer_group, os.getpid())
    with _producers_lock:
        producer = _producers.get(key)
        if producer is None:
            producer = _producers[key] = Producer(opts.producer_group, opts.namesrv,
                                                  send_msg_timeout_ms=opts.request_timeout_ms,
                                                  instance_name=f"spark-writer-{os.getpid()}").start()
        return producer


def row_id(write_id: str, partition_id: int, row: int) -> str:
    """The UNIQ_KEY of a row: 32 hex digits, the same in every attempt of the task."""
    return hashlib.md5(f"{write_id}/{partition_id}/{row}".encode()).hexdigest().upper()


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    idx = batch.schema.get_field_index(name)
    return None if idx < 0 else batch.column(idx).to_pylist()


def _messages(batch: pa.RecordBatch, opts: SinkOptions, write_id: str, partition_id: int,
              first_row: int) -> Iterator[tuple[Message, str | None]]:
    """(message, sharding key) for each row of ``batch``."""
    n = batch.num_rows
    # No body column: every row lacks a body, which each row says.
    bodies = _column(batch, "body") or [None] * n
    topics = _column(batch, "topic") or [None] * n
    keys = _column(batch, "keys") or [None] * n
    tags = _column(batch, "tags") or [None] * n
    props = _column(batch, "properties") or [None] * n
    delays = _column(batch, "delay_level") or [None] * n
    shards = _column(batch, "sharding_key") or [None] * n
    uniq = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    for i in range(n):
        body = bodies[i]
        if body is None:
            raise OptionError(f"row {first_row + i} of partition {partition_id} has a null 'body'")
        topic = topics[i] or opts.topic
        if topic is None:
            raise OptionError(f"row {first_row + i} of partition {partition_id} has a null 'topic' and option "
                              "'topic' is not set")
        msg = Message(topic, body.encode() if isinstance(body, str) else body, tags=tags[i], keys=keys[i],
                      properties=dict(props[i]) if props[i] else None)
        if delays[i]:
            msg.delay_level = int(delays[i])
        if shards[i]:
            msg.properties[MessageConst.SHARDING_KEY] = shards[i]
        msg.properties[uniq] = row_id(write_id, partition_id, first_row + i)
        yield msg, shards[i]


class _Sender:
    """Sends one task's rows in send batches, skipping those an earlier attempt stored."""

    def __init__(self, opts: SinkOptions, producer: Producer) -> None:
        self.opts = opts
        self.producer = producer
        self.sent = 0
        self.skipped = 0
        self._checking = True  # until the first send batch the brokers do not have
        self._admin: Admin | None = None
        self._queues: dict[str, list[MessageQueue]] = {}

    def _stored(self, msg: Message) -> bool:
        if self._admin is None:
            self._admin = Admin(self.opts.namesrv, timeout_ms=self.opts.request_timeout_ms).start()
        try:
            self._admin.query_msg_by_unique_key(msg.topic, msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
        except MQBrokerError as exc:
            if exc.response_code == ResponseCode.TOPIC_NOT_EXIST:
                return False  # a topic the first send will create holds nothing yet
            raise
        except MQClientError as exc:
            if exc.response_code == ResponseCode.NO_MESSAGE:
                return False
            raise
        return True

    def send(self, msgs: list[Message], queue: MessageQueue | None = None) -> None:
        if not msgs:
            return
        delayed = len(msgs) == 1 and bool(msgs[0].delay_level)
        # A delayed row is parked under the schedule topic until due, where the look-up cannot see it: it is
        # sent again by a retry, and does not end the look-ups.
        if self._checking and not delayed:
            if self._stored(msgs[0]):
                self.skipped += len(msgs)
                return
            self._checking = False
        if delayed:
            self.producer.send(msgs[0], queue=queue)
        else:
            self.producer.send_batch(msgs, queue=queue)
        self.sent += len(msgs)

    def queue_for(self, topic: str, shard: str) -> MessageQueue:
        mqs = self._queues.get(topic)
        if mqs is None:
            mqs = self._queues[topic] = self.producer.message_queues(topic)
        return SelectMessageQueueByHash().select(mqs, None, shard)  # type: ignore[arg-type]

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()


def write_partition(opts: SinkOptions, write_id: str, batches: Iterator[pa.RecordBatch]) -> SendReport:
    """Send every row of one task (see the module docstring)."""
    ctx = TaskContext.get()
    partition_id = ctx.partitionId() if ctx is not None else 0
    sender = _Sender(opts, _worker_producer(opts))
    # Pending send batches: (topic, queue or None) -> messages, bytes.
    pending: dict[tuple[str, MessageQueue | None], tuple[list[Message], int]] = {}
    row = 0
    try:
        for batch in batches:
            for msg, shard in _messages(batch, opts, write_id, partition_id, row):
                row += 1
                queue = sender.queue_for(msg.topic, shard) if shard else None
                if msg.delay_level:
                    sender.send([msg], queue)
                    continue
                key = (msg.topic, queue)
                msgs, size = pending.get(key) or ([], 0)
                msgs.append(msg)
                size += len(msg.body) + 64
                if len(msgs) >= SEND_BATCH_ROWS or size >= SEND_BATCH_BYTES:
                    sender.send(msgs, queue)
                    pending.pop(key, None)
                else:
                    pending[key] = (msgs, size)
        for (_, queue), (msgs, _) in pending.items():
            sender.send(msgs, queue)
    finally:
        sender.close()
    return SendReport(partition_id, sender.sent, sender.skipped)


class RocketMeshWriter(DataSourceArrowWriter):
    """Batch writes (``df.write.format("rocketmesh").mode("append")``)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        # One id per write: every task attempt of this write derives its rows' ids from it.
        self.write_id = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendReport:
        return write_partition(self.opts, self.write_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: sent messages are visible to consumers as soon as the broker stores them."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing can be taken back: what the tasks sent stays sent (see the README's guarantee)."""


class RocketMeshStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes; a micro-batch run again (after a restart from the checkpoint) skips what it sent."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendReport:
        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        return write_partition(self.opts, f"{query_id}/{batch_id}", iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: sent messages are visible as soon as the broker stores them."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing can be taken back; a run of the batch again skips what was stored."""
