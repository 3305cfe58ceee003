"""The readers: a streaming reader whose offsets are per-queue logical offsets, and a batch reader.

Both plan one input partition per queue with something to read, and ``read()``
pulls exactly [start, end) of that queue by offset with the broker-side filter,
so a retried task or a restarted query reads the same rows again. Spark's
checkpoint holds the offsets; the group's offsets on the brokers follow it
(see listener.py).

Processes: the planning methods run in a driver-side Python process that lives
as long as the query; ``read()`` runs in executor Python workers on a pickled
copy of the reader, so sockets are opened lazily and never pickled.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rocketmesh.client import Admin, MQBrokerError, MQError
from rocketmesh.client.stream import GroupRegistration, StreamClient
from rocketmesh.model.message import MessageQueue
from rocketmesh.remoting import ResponseCode
from rocketmesh.runtime.log import get_logger
from rocketmesh.spark.arrow import records_to_batch
from rocketmesh.spark.offsets import EARLIEST, LATEST, QueueBounds, limit, queue_bounds, queue_of, resolve, unwrap, wrap
from rocketmesh.spark.options import OptionError, QueueOffsets, SourceOptions

log = get_logger("spark", component="reader")

#: Records gathered into one Arrow batch before it is handed to Spark (bytes).
ARROW_BATCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One input partition: the offsets [start, end) of one queue."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def mq(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker, self.queue_id)


def plan(start: QueueOffsets, end: QueueOffsets) -> list[QueueRange]:
    """One partition per queue that has offsets between ``start`` and ``end``. A queue missing from
    ``start`` is one that appeared after it was taken (topic scaled up, broker added): read it from 0."""
    out = []
    for topic in sorted(end):
        for key, stop in sorted(end[topic].items()):
            begin = start.get(topic, {}).get(key, 0)
            if stop > begin:
                mq = queue_of(topic, key)
                out.append(QueueRange(topic, mq.broker_name, mq.queue_id, begin, stop))
    return out


_clients: dict[tuple[str, int], StreamClient] = {}
_clients_lock = threading.Lock()


def _worker_client(namesrv: str, timeout_ms: int) -> StreamClient:
    """One stream client per worker process and name server list: Spark reuses Python workers, so
    the connections outlive a task. Keyed by pid because a worker may be forked from another."""
    key = (namesrv, os.getpid())
    with _clients_lock:
        client = _clients.get(key)
        if client is None or client.closed:
            client = _clients[key] = StreamClient(namesrv, instance_name=f"spark-{os.getpid()}",
                                                  request_timeout_ms=timeout_ms)
        return client


def read_range(opts: SourceOptions, part: QueueRange) -> Iterator[pa.RecordBatch]:
    """The rows of ``part`` as Arrow batches of about :data:`ARROW_BATCH_BYTES` each."""
    client = _worker_client(opts.namesrv, opts.request_timeout_ms)
    tags = opts.tags
    chunks: list[bytes] = []
    size = 0
    for chunk in client.pull_range(opts.group, part.mq, opts.subscriptions[part.topic], part.start, part.end,
                                   pull_batch_size=opts.pull_batch_size, timeout_ms=opts.request_timeout_ms):
        chunks.append(chunk.records)
        size += len(chunk.records)
        if size >= ARROW_BATCH_BYTES:
            batch = records_to_batch(b"".join(chunks), part.topic, part.broker, part.queue_id, tags)
            chunks, size = [], 0
            if batch.num_rows:
                yield batch
    if chunks:
        batch = records_to_batch(b"".join(chunks), part.topic, part.broker, part.queue_id, tags)
        if batch.num_rows:
            yield batch


class _Planner:
    """The admin connection of the planning side (never pickled)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._admin: Admin | None = None

    def __getstate__(self) -> dict:
        return {"opts": self.opts, "_admin": None}

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.opts.namesrv, timeout_ms=min(self.opts.request_timeout_ms, 5000)).start()
        return self._admin

    def bounds(self) -> QueueBounds:
        return queue_bounds(self.admin, self.opts.topics)


def check_source(opts: SourceOptions) -> None:
    """Fail at once for an unreachable name server or an unknown topic (the error names the option)."""
    admin = Admin(opts.namesrv, timeout_ms=3000)
    try:
        for topic in opts.topics:
            try:
                admin.topic_route(topic)
            except MQError as exc:
                if isinstance(exc, MQBrokerError) and exc.response_code == ResponseCode.TOPIC_NOT_EXIST:
                    raise OptionError(f"option 'topic': topic {topic!r} does not exist on the name server "
                                      f"{opts.namesrv}; create it first (rocketmesh admin update-topic)") from None
                raise OptionError(f"option 'namesrv': no answer from {opts.namesrv} about topic {topic!r} "
                                  f"({exc}); is the name server running?") from None
    finally:
        admin.close()


class RocketMeshReader(DataSourceReader):
    """Batch reads: ``startingOffsets`` (default ``earliest`` for batch) to ``endingOffsets`` (exclusive)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner = _Planner(opts)

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        bounds = self._planner.bounds()
        start = resolve(self._planner.admin, opts.starting, opts.group, bounds, left_out=EARLIEST)
        end = resolve(self._planner.admin, opts.ending, opts.group, bounds, left_out=LATEST)
        return plan(start, end) or [QueueRange(opts.topics[0], "", 0, 0, 0)]

    # Spark hands back only the partitions this reader planned: QueueRanges.
    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if partition.end <= partition.start:
            return iter(())
        return read_range(self.opts, partition)


class RocketMeshStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads; the process that plans them keeps the consumer group registered."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._planner = _Planner(opts)
        self._initial: dict | None = None
        self._available_now: QueueOffsets | None = None
        self._registration: GroupRegistration | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_registration"] = None
        return state

    def _register(self) -> None:
        """Announce the group to the brokers (heartbeats follow in the background); retried at the next
        planning call when a broker cannot be reached now."""
        if self._registration is not None:
            return
        opts = self.opts
        reg = GroupRegistration(opts.group, opts.namesrv, list(opts.subscriptions.values()),
                                instance_name=f"spark-{os.getpid()}")
        try:
            self._registration = reg.start(timeout_ms=3000)
        except MQError as exc:
            log.warning("group_registration_failed", group=opts.group, error=str(exc))

    def initialOffset(self) -> dict:
        # Spark asks twice for batch 0 and uses the second answer: resolve once.
        if self._initial is None:
            opts = self.opts
            bounds = self._planner.bounds()
            self._initial = wrap(opts, resolve(self._planner.admin, opts.starting, opts.group, bounds,
                                               left_out=EARLIEST))
            self._register()
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        bounds = self._planner.bounds()
        self._available_now = {t: {k: b.max_offset for k, b in q.items()} for t, q in bounds.items()}

    def latestOffset(self, start: dict, limit_: ReadLimit) -> dict:
        self._register()
        begin = unwrap(start)
        if self._available_now is not None:
            latest = {t: dict(q) for t, q in self._available_now.items()}
        else:
            bounds = self._planner.bounds()
            latest = {t: {k: b.max_offset for k, b in q.items()} for t, q in bounds.items()}
        # A queue never goes back; one that vanished from the route keeps its offset.
        for t, q in begin.items():
            for k, off in q.items():
                latest.setdefault(t, {})[k] = max(off, latest.get(t, {}).get(k, off))
        full_start = {t: {k: begin.get(t, {}).get(k, 0) for k in q} for t, q in latest.items()}
        max_rows = limit_.max_rows if isinstance(limit_, ReadMaxRows) else None
        return wrap(self.opts, limit(full_start, latest, max_rows))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return plan(unwrap(start), unwrap(end))

    # Spark hands back only the partitions this reader planned: QueueRanges.
    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing: Spark calls this a batch late; the driver-side listener commits each finished batch."""

    def stop(self) -> None:
        if self._registration is not None:
            self._registration.close()
            self._registration = None
