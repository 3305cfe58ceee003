"""Where a consumer keeps its offsets: on the broker (clustering) or in a local file (broadcasting).

Offsets are "the next message to consume" per queue. Updates go to memory;
``persist_all`` writes them out (every ``persist_consumer_offset_interval``,
5 s, and on shutdown), so a crash re-delivers at most that much, never skips.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from rocketmesh.client.errors import MQClientError, MQError
from rocketmesh.model.message import MessageQueue
from rocketmesh.remoting.protocol.headers import QueryConsumerOffsetRequestHeader, UpdateConsumerOffsetRequestHeader
from rocketmesh.runtime.jsonfile import read_json, write_json_atomic
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.client.instance import ClientInstance

log = get_logger("client", component="offset_store")


class ReadOffsetType(Enum):
    MEMORY_FIRST_THEN_STORE = "MEMORY_FIRST_THEN_STORE"
    READ_FROM_MEMORY = "READ_FROM_MEMORY"
    READ_FROM_STORE = "READ_FROM_STORE"


class OffsetStore(Protocol):
    """What the consumers need of an offset store."""

    def load(self) -> None: ...
    def read(self, mq: MessageQueue, how: ReadOffsetType) -> int: ...
    def update(self, mq: MessageQueue, offset: int, increase_only: bool) -> None: ...
    def persist_all(self, mqs: Iterable[MessageQueue]) -> None: ...
    def persist(self, mq: MessageQueue) -> None: ...
    def remove(self, mq: MessageQueue) -> None: ...


class _MemoryTable:
    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}
        self.lock = threading.Lock()

    def update(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        with self.lock:
            old = self.table.get(mq)
            if old is None or not increase_only or offset > old:
                self.table[mq] = offset

    def get(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        with self.lock:
            self.table.pop(mq, None)


class RemoteBrokerOffsetStore(_MemoryTable):
    """Offsets of a clustering group, kept by the broker of each queue."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    def load(self) -> None:
        """Nothing to load: offsets are read from the broker per queue."""

    def read(self, mq: MessageQueue, how: ReadOffsetType) -> int:
        """The offset of ``mq``; -1 when there is none (or the broker could not be asked)."""
        if how is not ReadOffsetType.READ_FROM_STORE:
            off = self.table.get(mq)
            if off is not None or how is ReadOffsetType.READ_FROM_MEMORY:
                return -1 if off is None else off
        try:
            off = self.fetch_from_broker(mq)
        except MQError as exc:
            log.warning("query_consumer_offset_failed", group=self.group, mq=str(mq), error=str(exc))
            return -2
        if off is None:
            return -1
        self.update(mq, off, False)
        return off

    def fetch_from_broker(self, mq: MessageQueue) -> int | None:
        """The broker's offset for ``mq`` (None when the group has none); raises MQError when unreachable."""
        return self.instance.api.query_consumer_offset(
            self.instance.find_broker_addr(mq), QueryConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id))

    def persist(self, mq: MessageQueue) -> None:
        off = self.table.get(mq)
        if off is None:
            return
        self.instance.api.update_consumer_offset(
            self.instance.find_broker_addr(mq),
            UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, off))

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Send the offsets of ``mqs`` to their brokers, all at once (bounded by the request timeout)."""
        calls, which = [], []
        for mq in mqs:
            off = self.table.get(mq)
            if off is None:
                continue
            try:
                addr = self.instance.find_broker_addr(mq)
            except MQClientError as exc:
                log.warning("persist_offset_skipped", mq=str(mq), error=str(exc))
                continue
            calls.append((addr, UpdateConsumerOffsetRequestHeader(self.group, mq.topic, mq.queue_id, off)))
            which.append(mq)
        if not calls:
            return
        for mq, err in zip(which, self.instance.api.update_consumer_offsets(calls), strict=False):
            if err is not None:
                log.warning("persist_offset_failed", group=self.group, mq=str(mq), error=str(err))


class LocalFileOffsetStore(_MemoryTable):
    """Offsets of a broadcasting consumer, in ``<dir>/<client id>/<group>/offsets.json``."""

    def __init__(self, base_dir: str, client_id: str, group: str) -> None:
        super().__init__()
        safe_id = client_id.replace("/", "_").replace(":", "_")
        self.path = os.path.join(base_dir, safe_id, group, "offsets.json")

    def load(self) -> None:
        data = read_json(self.path, {}) or {}
        for entry in data.get("offsetTable", []):
            mq = MessageQueue(entry["topic"], entry["brokerName"], int(entry["queueId"]))
            self.table[mq] = int(entry["offset"])

    def read(self, mq: MessageQueue, how: ReadOffsetType) -> int:
        if how is ReadOffsetType.READ_FROM_STORE:
            self.table.clear()
            self.load()
        off = self.table.get(mq)
        return -1 if off is None else off

    def persist(self, mq: MessageQueue) -> None:
        self.persist_all([mq])

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Write every known offset (the file holds all queues of the group)."""
        with self.lock:
            table = [{"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                     for mq, off in sorted(self.table.items())]
        write_json_atomic(self.path, {"offsetTable": table})
