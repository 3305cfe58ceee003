"""Building blocks for store tests: a small-file store and message makers."""

from __future__ import annotations

import time
from typing import Any

from rocketmesh.broker.store import MessageExtBrokerInner, MessageStore, MessageStoreConfig
from rocketmesh.model.codec import decode_record
from rocketmesh.model.message import MessageConst

#: Small files, so a test crosses file boundaries after a few dozen messages.
SMALL = dict(
    mapped_file_size_commit_log=16 * 1024,
    mapped_file_size_consume_queue=20 * 16,
    max_hash_slot_num=64,
    max_index_num=256,
    clean_resource_interval=3_600_000,  # tests drive the cleaner themselves
)


def make_config(root: str, **overrides: Any) -> MessageStoreConfig:
    return MessageStoreConfig(store_path_root_dir=str(root), **{**SMALL, **overrides})


def open_store(root: str, **overrides: Any) -> MessageStore:
    store = MessageStore(make_config(root, **overrides))
    store.start()
    return store


def msg(topic: str = "TopicTest", body: bytes = b"hello", queue_id: int = 0, tags: str | None = None,
        keys: str | None = None, uniq: str | None = None, **props: str) -> MessageExtBrokerInner:
    if uniq:
        props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq
    return MessageExtBrokerInner.of(topic, body, queue_id=queue_id, tags=tags, keys=keys, properties=props)


def now_ms() -> int:
    return int(time.time() * 1000)


def check_queues_agree_with_commitlog(store: MessageStore) -> int:
    """Every consume queue entry points at a record of its topic, queue and offset; returns how many entries."""
    count = 0
    for cq in store.consume_queues():
        for off in range(cq.min_offset, cq.max_offset):
            phys, size, _ = cq.get(off)
            m = decode_record(store.commitlog.read(phys, size))
            assert (m.topic, m.queue_id, m.queue_offset, m.store_size) == (cq.topic, cq.queue_id, off, size)
            count += 1
    return count
