"""ConsumeQueue: entries, roll-over, reads with filters, offsets by time."""

import os
import struct
import time

from rocketmesh.broker.store import GetMessageStatus
from rocketmesh.model.codec import decode_record, tags_hash_code
from storekit import msg, open_store


def test_entries_are_20_bytes_and_point_at_records(tmp_path):
    store = open_store(tmp_path)
    try:
        rs = [store.put_message(msg(body=b"m%d" % i, queue_id=0, tags="A" if i % 2 else "B")) for i in range(40)]
        qdir = tmp_path / "consumequeue" / "TopicTest" / "0"
        files = sorted(os.listdir(qdir))
        assert files[:3] == ["00000000000000000000", "00000000000000000320", "00000000000000000640"]
        raw = b"".join((qdir / f).read_bytes() for f in files)
        for i, r in enumerate(rs):
            phys, size, tag = struct.unpack_from(">qiq", raw, i * 20)
            assert (phys, size) == (r.first.wrote_offset, r.first.wrote_bytes)
            assert tag == tags_hash_code("A" if i % 2 else "B")
        assert store.get_min_offset_in_queue("TopicTest", 0) == 0
        assert store.get_max_offset_in_queue("TopicTest", 0) == 40
    finally:
        store.shutdown()


def test_get_message_statuses_and_next_offsets(tmp_path):
    store = open_store(tmp_path)
    try:
        assert store.get_message("g", "Nope", 0, 0, 32).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        for i in range(40):
            store.put_message(msg(body=b"m%d" % i))
        r = store.get_message("g", "TopicTest", 0, 10, 32)
        assert r.status is GetMessageStatus.FOUND
        assert [decode_record(x).body for x in r.records] == [b"m%d" % i for i in range(10, 40)]
        assert r.queue_offsets == list(range(10, 40)) and r.next_begin_offset == 40
        assert store.get_message("g", "TopicTest", 0, 40, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        bad = store.get_message("g", "TopicTest", 0, 99, 32)
        assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 0
        r = store.get_message("g", "TopicTest", 0, 0, 5)
        assert len(r.records) == 5 and r.next_begin_offset == 5
    finally:
        store.shutdown()


class TagFilter:
    def __init__(self, *tags):
        self.codes = {tags_hash_code(t) for t in tags}

    def is_matched_by_consume_queue(self, code):
        return code in self.codes

    def is_matched_by_commit_log(self, record):
        return True


def test_filter_on_tag_codes_skips_and_advances(tmp_path):
    store = open_store(tmp_path)
    try:
        for i in range(30):
            store.put_message(msg(body=b"m%d" % i, tags="A" if i % 3 == 0 else "B"))
        r = store.get_message("g", "TopicTest", 0, 0, 32, TagFilter("A"))
        assert [decode_record(x).body for x in r.records] == [b"m%d" % i for i in range(0, 30, 3)]
        r = store.get_message("g", "TopicTest", 0, 0, 32, TagFilter("C"))
        assert r.status is GetMessageStatus.NO_MATCHED_MESSAGE and r.next_begin_offset == 30
    finally:
        store.shutdown()


def test_offset_by_store_time_uses_binary_search(tmp_path):
    store = open_store(tmp_path)
    try:
        marks = []
        for group in range(4):
            marks.append(int(time.time() * 1000))
            for i in range(12):
                store.put_message(msg(body=b"g%d-%d" % (group, i)))
            time.sleep(0.03)
        for group, ts in enumerate(marks):
            off = store.get_offset_in_queue_by_time("TopicTest", 0, ts)
            assert off == group * 12, (group, off)
            assert store.get_message_store_timestamp("TopicTest", 0, off) >= ts
        assert store.get_offset_in_queue_by_time("TopicTest", 0, 0) == 0
        assert store.get_offset_in_queue_by_time("TopicTest", 0, marks[-1] + 60_000) == 48
        assert store.get_earliest_message_time("TopicTest", 0) >= marks[0]
    finally:
        store.shutdown()


def test_a_deleted_topic_starts_again_at_offset_zero(tmp_path):
    # Written and dispatched, never read by a consumer; then deleted and written to again.
    store = open_store(tmp_path)
    try:
        for i in range(5):
            store.put_message(msg(topic="Gone", body=b"old%d" % i, queue_id=1))
        store.delete_topics(["Gone"])
        again = store.put_message(msg(topic="Gone", body=b"new", queue_id=1))
        assert again.first.queue_offset == 0
        assert store.get_max_offset_in_queue("Gone", 1) == 1
        r = store.get_message("g", "Gone", 1, 0, 32)
        assert r.status is GetMessageStatus.FOUND
        assert [decode_record(x).body for x in r.records] == [b"new"]
    finally:
        store.shutdown()


def test_a_newest_file_created_but_never_sized_by_a_crash_is_dropped_at_start(tmp_path):
    # A kill between creating a file and sizing it leaves it empty: the store starts, with everything written
    # before, and writes on where it left off.
    store = open_store(tmp_path)
    try:
        for i in range(5):
            store.put_message(msg(topic="Sized", body=b"m%d" % i, queue_id=0))
    finally:
        store.shutdown()
    empty = []
    for folder, size in ((tmp_path / "consumequeue" / "Sized" / "0", store.config.mapped_file_size_consume_queue),
                         (tmp_path / "commitlog", store.config.mapped_file_size_commit_log)):
        last = max(int(p.name) for p in folder.iterdir())
        empty.append(folder / f"{last + size:020d}")
        empty[-1].touch()
    store = open_store(tmp_path)
    try:
        assert not any(p.exists() for p in empty)
        r = store.get_message("g", "Sized", 0, 0, 32)
        assert [decode_record(x).body for x in r.records] == [b"m%d" % i for i in range(5)]
        assert store.put_message(msg(topic="Sized", body=b"m5", queue_id=0)).first.queue_offset == 5
    finally:
        store.shutdown()
