"""The driver-side listener that commits each finished micro-batch's end offsets to the consumer group.

The reader's own ``commit`` runs a batch late (when the next batch is planned),
so the group's offsets on the brokers would always trail by one batch. Spark
reports a finished batch to the driver's listeners with the batch's end offsets;
this listener stores them as the group's offsets, so `rocketmesh admin
consumer-progress` shows the Spark job's true lag. Spark's checkpoint stays the
truth for a restarted query; the group's offsets serve `startingOffsets=group`
(a query started without a checkpoint) and the mesh's tools.
"""

from __future__ import annotations

import threading

import orjson
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from rocketmesh.client import MQError
from rocketmesh.client.stream import StreamClient
from rocketmesh.runtime.log import get_logger
from rocketmesh.spark.offsets import SOURCE_TAG, queue_of, unwrap

log = get_logger("spark", component="listener")
#: Bound of one commit (all queues at once).
COMMIT_TIMEOUT_MS = 3000


def source_offsets(end_offset: str | dict | None) -> dict | None:
    """A source's reported end offset, when it is this source's (else None)."""
    if not end_offset:
        return None
    try:
        data = orjson.loads(end_offset) if isinstance(end_offset, str) else end_offset
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and data.get("source") == SOURCE_TAG else None


def worth_committing(start_offset: str | dict | None, end: dict, rows: int) -> bool:
    """Whether a trigger's end offsets are new: a trigger that read nothing and moved no offset has
    nothing to commit. Skipping it also keeps the late event of a query that was stopped from undoing an
    admin's reset of the group since."""
    start = source_offsets(start_offset)
    return not (rows == 0 and (start is None or start == end))


class OffsetCommitListener(StreamingQueryListener):
    """Commits the end offsets of every finished micro-batch of a `rocketmesh` source (see the module)."""

    def __init__(self) -> None:
        self._clients: dict[str, StreamClient] = {}
        self._lock = threading.Lock()

    def _client(self, namesrv: str) -> StreamClient:
        with self._lock:
            client = self._clients.get(namesrv)
            if client is None or client.closed:
                client = self._clients[namesrv] = StreamClient(
                    namesrv, instance_name="spark-offset-commit", request_timeout_ms=COMMIT_TIMEOUT_MS)
            return client

    def commit(self, offset: dict) -> None:
        """Store one end offset object (see offsets.py) as its group's offsets; failures are logged."""
        try:
            client = self._client(str(offset["namesrv"]))
            client.commit_offsets(str(offset["group"]), {queue_of(topic, key): value
                                                         for topic, table in unwrap(offset).items()
                                                         for key, value in table.items()})
        except (MQError, KeyError, ValueError) as exc:
            log.warning("offset_commit_failed", group=offset.get("group"), error=str(exc))

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        """Nothing: the first offsets come with the first finished batch."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        for source in event.progress.sources:
            offset = source_offsets(source.endOffset)
            if offset is None:
                continue
            if worth_committing(source.startOffset, offset, source.numInputRows):
                self.commit(offset)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        """Nothing: an idle query has committed its last batch already."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        """Nothing: the last finished batch was committed when it finished."""


def commit_last_batch(query: StreamingQuery, listener: OffsetCommitListener | None = None) -> int:
    """Commit now the end offsets of ``query``'s last micro-batch that read something; returns how many
    sources were committed.

    Listener events reach the driver's Python asynchronously: a job that exits as soon as its query ends
    (Trigger.AvailableNow, or after ``query.stop()``) can exit before the last one is handled, leaving its
    group one batch behind. Such a job calls this after the query has ended.
    """
    listener = listener or OffsetCommitListener()
    for progress in reversed(query.recentProgress):
        offsets = []
        for src in progress.get("sources", []):
            end = source_offsets(src.get("endOffset"))
            if end is not None and worth_committing(src.get("startOffset"), end, int(src.get("numInputRows") or 0)):
                offsets.append(end)
        if offsets:
            for offset in offsets:
                listener.commit(offset)
            return len(offsets)
    return 0
