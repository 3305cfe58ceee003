"""The dispatcher: consume queues and index files built from commitlog records.

RocketMQ's CommitLogDispatcherBuildConsumeQueue and CommitLogDispatcherBuildIndex:
each stored record is one dispatch request (a :data:`DispatchRecord`) that both
take. The reput cursor (``reput``) feeds it; it owns every consume queue and index
file for writing.
"""

from __future__ import annotations

import os
import threading

from rocketmesh.broker.store.commitlog import NOT_DISPATCHED, DispatchRecord
from rocketmesh.broker.store.config import MessageStoreConfig
from rocketmesh.broker.store.index.consume_queue import ENTRY as CQ_ENTRY, ConsumeQueue
from rocketmesh.broker.store.index.index_file import IndexService
from rocketmesh.broker.store.index.queue_entry import find_props, schedule_due_time, tags_code_of_tag, timer_due_time
from rocketmesh.model.delay_levels import parse_delay_levels
from rocketmesh.model.topics import SCHEDULE_TOPIC, TIMER_TOPIC
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="dispatcher")

_SCHEDULE_TOPIC_B = SCHEDULE_TOPIC.encode()
_TIMER_TOPIC_B = TIMER_TOPIC.encode()

#: (topic, queue id, new max offset) for each queue a run of records grew.
Grown = list[tuple[str, int, int]]


def load_consume_queues(config: MessageStoreConfig, recover: bool) -> dict[tuple[str, int], ConsumeQueue]:
    """Open every consume queue under ``consumequeue/`` (finding each one's end when ``recover``)."""
    out: dict[tuple[str, int], ConsumeQueue] = {}
    root = config.store_path_consume_queue
    if not os.path.isdir(root):
        return out
    for topic in os.listdir(root):
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir):
            continue
        for qid in os.listdir(tdir):
            if qid.isdigit():
                cq = ConsumeQueue(topic, int(qid), root, config.mapped_file_size_consume_queue)
                cq.load()
                if recover:
                    cq.recover()
                out[(topic, int(qid))] = cq
    return out


class Dispatcher:
    """Builds consume queue and index entries; the hot path of the store."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._by_name: dict[tuple[bytes, int], ConsumeQueue] = {}
        self.index = IndexService(config.store_path_index, config.max_hash_slot_num, config.max_index_num)
        self._lock = threading.Lock()

    def load(self) -> None:
        """Open the consume queues and index files there are, each recovered to its last good entry."""
        self.queues.update(load_consume_queues(self.config, recover=True))
        self._by_name.update({(t.encode(), q): cq for (t, q), cq in self.queues.items()})
        self.index.load()

    def truncate_dirty(self, end: int) -> None:
        """Drop queue and index entries at or past commitlog offset ``end`` (a truncated commitlog)."""
        for cq in self.queues.values():
            cq.truncate_dirty(end)
        self.index.truncate_dirty(end)

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            with self._lock:
                cq = self.queues.get((topic, queue_id))
                if cq is None:
                    cq = ConsumeQueue(topic, queue_id, self.config.store_path_consume_queue,
                                      self.config.mapped_file_size_consume_queue)
                    self.queues[(topic, queue_id)] = cq
                    self._by_name[(topic.encode(), queue_id)] = cq
        return cq

    def dispatch(self, records: list[DispatchRecord]) -> Grown:
        """Build entries for a run of records; returns the new max offset of each queue touched."""
        queues = self._by_name
        # Per queue, the entries of consecutive offsets not written yet: [queue, first offset, next offset,
        # packed entries, end of the last message]. A run is written in one copy.
        runs: dict[tuple[bytes, int], list] = {}
        touched: dict[ConsumeQueue, int] = {}
        index_items = []
        delay_levels = self.delay_levels
        pack_entry = CQ_ENTRY.pack
        for topic, queue_id, phys, size, queue_offset, ts, sys_flag, props in records:
            tags = delay = deliver_at = None
            if props:
                keys = uniq = None
                # The first of a repeated property counts.
                for name, value in find_props(props):
                    if name == b"TAGS":
                        if tags is None:
                            tags = value
                    elif name == b"UNIQ_KEY":
                        uniq = value
                    elif name == b"KEYS":
                        keys = value
                    elif name == b"DELAY":
                        if delay is None:
                            delay = value
                    elif deliver_at is None:
                        deliver_at = value
                if keys or uniq:
                    index_items.append((topic, keys, uniq, phys, ts))
            if topic == _SCHEDULE_TOPIC_B:
                tags_code = schedule_due_time(delay, ts, delay_levels)
            elif topic == _TIMER_TOPIC_B:
                tags_code = timer_due_time(deliver_at, ts)
            else:
                tags_code = tags_code_of_tag(tags) if tags else 0
            if (sys_flag & 0xC) not in NOT_DISPATCHED:
                key = (topic, queue_id)
                run = runs.get(key)
                if run is not None and run[2] == queue_offset:
                    run[2] = queue_offset + 1
                    run[3].append(pack_entry(phys, size, tags_code))
                    run[4] = phys + size
                else:
                    if run is not None:
                        self._put_run(run, touched)
                    cq = queues.get(key) or self.queue(topic.decode(), queue_id)
                    runs[key] = [cq, queue_offset, queue_offset + 1, [pack_entry(phys, size, tags_code)], phys + size]
        for run in runs.values():
            self._put_run(run, touched)
        if index_items and self.config.message_index_enable:
            self.index.build_index(index_items)
        return [(cq.topic, cq.queue_id, max_offset) for cq, max_offset in touched.items()]

    @staticmethod
    def _put_run(run: list, touched: dict[ConsumeQueue, int]) -> None:
        cq, first, nxt, entries, end_phys = run
        cq.put_run(first, entries, end_phys)
        touched[cq] = nxt

    def flush(self, least_pages: int = 0) -> None:
        """Sync each consume queue with at least ``least_pages`` dirty pages; 0: all of every queue, and
        the index.

        The index is synced only then (and when a file fills): a key's slot is
        anywhere in the file, so after each sync nearly every key's store faults
        on a write-protected page (tens of microseconds on the put path); the
        checkpoint moves only after a full sync, and recovery re-indexes from it.
        """
        for cq in list(self.queues.values()):
            if least_pages:
                cq.flush(least_pages)
            else:
                cq.flush_all()
        if not least_pages:
            self.index.flush()

    def delete_expired(self, commitlog_min_offset: int) -> None:
        """Delete queue and index files below the commitlog's start; queues' min offsets move up."""
        for cq in list(self.queues.values()):
            cq.delete_expired(commitlog_min_offset)
        self.index.delete_expired(commitlog_min_offset)

    def max_offsets(self) -> dict[tuple[str, int], int]:
        return {k: cq.max_offset for k, cq in self.queues.items()}

    def delete_topics(self, topics: set[str]) -> int:
        """Delete the consume queues of ``topics`` and their files; returns how many went."""
        with self._lock:
            victims = [k for k in self.queues if k[0] in topics]
            gone = [self.queues.pop(k) for k in victims]
            for k in victims:
                self._by_name.pop((k[0].encode(), k[1]), None)
        for cq in gone:
            cq.queue.shutdown()
            cq.destroy()
        return len(gone)

    def shutdown(self) -> None:
        for cq in self.queues.values():
            cq.shutdown()
        self.index.shutdown()

