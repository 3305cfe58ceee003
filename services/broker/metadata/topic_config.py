"""Topic configs: what topics this broker serves, persisted in config/topics.json."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from typing import Any

from rocketmesh.broker.metadata.table_file import TableFile
from rocketmesh.model.route import PERM_READ_WRITE, Perm, TopicConfig
from rocketmesh.model.topics import (
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    TRACE_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from rocketmesh.runtime.jsonfile import read_json
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="topic_config")


@dataclass
class DataVersion:
    """Bumped on every change, so namesrv can tell a changed table from a heartbeat."""

    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    counter: int = 0

    def next(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    @classmethod
    def of(cls, doc: dict[str, Any]) -> DataVersion:
        """The ``dataVersion`` of a table document (RocketMQ's JSON); zeros when it has none."""
        dv = doc.get("dataVersion") or {}
        return cls(int(dv.get("timestamp", 0)), int(dv.get("counter", 0)))


class TopicConfigManager:
    """The topic table: built-in system topics, user topics, auto-created ones; saved atomically."""

    def __init__(self, path: str, cluster_name: str, broker_name: str, auto_create: bool,
                 default_queue_nums: int, delay_levels: int, timer_queue_nums: int = 4,
                 persist_in: Executor | None = None) -> None:
        self.path = path
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self._lock = threading.Lock()
        #: A topic created on demand (by a send, or a system topic the broker needs) is saved through
        #: ``persist_in``: that happens on the remoting I/O thread.
        self.file = TableFile(path, self.snapshot, log, "topic_persist_failed", persist_in)
        #: Called after the table changed (the broker re-registers with namesrv).
        self.on_change: Callable[[], None] | None = None
        rw = PERM_READ_WRITE
        self._system(SELF_TEST_TOPIC, 1, 1, rw)
        if auto_create:
            self._system(DEFAULT_TOPIC, default_queue_nums, default_queue_nums, rw | Perm.INHERIT)
        self._system(BENCHMARK_TOPIC, 1024, 1024, rw)
        self._system(cluster_name, 16, 16, rw | (Perm.INHERIT if auto_create else 0))
        self._system(broker_name, 1, 1, rw | (Perm.INHERIT if auto_create else 0))
        self._system(OFFSET_MOVED_EVENT, 1, 1, rw)
        self._system(SCHEDULE_TOPIC, delay_levels, delay_levels, rw)
        self._system(TIMER_TOPIC, timer_queue_nums, timer_queue_nums, rw)
        #: Queue counts that follow the broker's settings, whatever topics.json says (a level list that
        #: grew must not leave its new levels without a readable queue).
        self._from_settings = {name: self.table[name] for name in (SCHEDULE_TOPIC, TIMER_TOPIC)}
        # Half messages and their ops: one queue each, read by the txn-checker's system group.
        self._system(TRANS_HALF_TOPIC, 1, 1, rw)
        self._system(TRANS_OP_HALF_TOPIC, 1, 1, rw)
        # Message trace records (RocketMQ creates it when traceTopicEnable): there from the start, so a traced
        # client needs no auto-created topic.
        self._system(TRACE_TOPIC, 1, 1, rw)

    def _system(self, name: str, read: int, write: int, perm: int) -> None:
        self.table[name] = TopicConfig(name, read, write, perm)

    def load(self) -> None:
        data = read_json(self.path)
        if data is None:
            return
        for name, d in data.get("topicConfigTable", {}).items():
            self.table[name] = self._from_settings.get(name) or TopicConfig.from_json(d)
        self.data_version = DataVersion.of(data)

    def persist(self) -> None:
        """Write-then-rename, so a crash leaves the old file or the new one, never half of one."""
        self.file.save()

    def snapshot(self) -> dict[str, Any]:
        """The table as RocketMQ's TopicConfigSerializeWrapper JSON."""
        with self._lock:
            return {"topicConfigTable": {n: c.to_json() for n, c in self.table.items()},
                    "dataVersion": asdict(self.data_version)}

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def replace_all(self, doc: dict[str, Any]) -> bool:
        """A slave takes its master's table (a :meth:`snapshot` document) when its data version differs;
        returns whether it did."""
        version = DataVersion.of(doc)
        table = {name: TopicConfig.from_json(d) for name, d in (doc.get("topicConfigTable") or {}).items()}
        with self._lock:
            if version == self.data_version:
                return False
            self.table = table
            self.data_version = version
        self.persist()
        return True

    def update(self, cfg: TopicConfig) -> None:
        with self._lock:
            self.table[cfg.topic_name] = cfg
            self.data_version.next()
        log.info("topic_updated", topic=cfg.topic_name, read=cfg.read_queue_nums, write=cfg.write_queue_nums,
                 perm=cfg.perm)
        self._changed()

    def delete(self, topic: str) -> bool:
        with self._lock:
            existed = self.table.pop(topic, None) is not None
            if existed:
                self.data_version.next()
        if existed:
            log.info("topic_deleted", topic=topic)
            self._changed()
        return existed

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int,
                       topic_sys_flag: int = 0) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` (which must carry Perm.INHERIT), as RocketMQ does."""
        with self._lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
            base = self.table.get(default_topic)
            if base is None or not base.perm & Perm.INHERIT:
                return None
            n = max(1, min(queue_nums, base.write_queue_nums))
            cfg = TopicConfig(topic, n, n, base.perm & ~Perm.INHERIT, topic_sys_flag=topic_sys_flag)
            self.table[topic] = cfg
            self.data_version.next()
        log.info("topic_auto_created", topic=topic, queues=cfg.write_queue_nums, default_topic=default_topic)
        self._changed(on_demand=True)
        return cfg

    def create_system_topic(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """Create a topic the broker itself needs (retry, dead-letter ...) if absent."""
        with self._lock:
            existing = self.table.get(topic)
            if existing is not None:
                return existing
            cfg = self.table[topic] = TopicConfig(topic, queue_nums, queue_nums, perm)
            self.data_version.next()
        log.info("topic_updated", topic=topic, read=queue_nums, write=queue_nums, perm=perm)
        self._changed(on_demand=True)
        return cfg

    def _changed(self, on_demand: bool = False) -> None:
        """Save the table and tell ``on_change``; ``on_demand`` (a topic created for a request): save it
        through ``persist_in`` when there is one."""
        if on_demand:
            self.file.save_soon()
        else:
            self.file.save_logged()
        if self.on_change is not None:
            self.on_change()
