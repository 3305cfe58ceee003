"""IndexFile: layout, hash collisions, time ranges, roll-over to new files."""

import os
import struct
import time

from rocketmesh.broker.store.index.index_file import ENTRY_SIZE, HEADER_SIZE, IndexFile
from rocketmesh.model.codec import decode_record
from storekit import msg, now_ms, open_store


def bodies(result):
    return sorted(decode_record(r).body for r in result.records)


def test_layout_header_slots_entries(tmp_path):
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, hash_slot_num=8, index_num=16)
    assert os.path.getsize(path) == HEADER_SIZE + 8 * 4 + 16 * ENTRY_SIZE
    ts = now_ms()
    f.put_key(b"T#a", 100, ts)
    f.put_key(b"T#b", 200, ts + 2500)
    begin, end, begin_phy, end_phy, slots_used, count = struct.unpack_from(">qqqqii", f.mm, 0)
    assert (begin, end, begin_phy, end_phy, count) == (ts, ts + 2500, 100, 200, 3)
    assert 1 <= slots_used <= 2
    # Entry 2: key hash, offset, seconds since begin, previous entry in the slot.
    _, phy, diff, _ = struct.unpack_from(">iqii", f.mm, HEADER_SIZE + 8 * 4 + 2 * ENTRY_SIZE)
    assert (phy, diff) == (200, 2)
    f.close()
    # Reopened, the header is read back.
    g = IndexFile(path, hash_slot_num=8, index_num=16)
    assert g.select_phy_offsets(b"T#b", 10, 0, ts + 10_000) == [200]
    g.close()


def test_collisions_in_one_slot_return_only_matching_keys(tmp_path):
    # One hash slot: every key collides and chains through prevIndex.
    store = open_store(tmp_path, max_hash_slot_num=1, max_index_num=1000)
    try:
        for i in range(30):
            store.put_message(msg(body=b"m%d" % i, keys=f"order-{i % 3}"))
        r = store.query_message("TopicTest", "order-1", max_num=100)
        assert bodies(r) == sorted(b"m%d" % i for i in range(1, 30, 3))
        assert len(store.query_message("TopicTest", "order-1", max_num=4).records) == 4
        assert store.query_message("Other", "order-1").records == []
    finally:
        store.shutdown()


def test_each_key_and_unique_key_are_indexed(tmp_path):
    store = open_store(tmp_path)
    try:
        store.put_message(msg(body=b"one", keys="alpha beta", uniq="UNIQ0001"))
        store.put_message(msg(body=b"two", keys="beta"))
        assert bodies(store.query_message("TopicTest", "alpha")) == [b"one"]
        assert bodies(store.query_message("TopicTest", "beta")) == [b"one", b"two"]
        assert bodies(store.query_message("TopicTest", "UNIQ0001")) == [b"one"]
        assert store.query_message("TopicTest", "gamma").records == []
    finally:
        store.shutdown()


def test_time_range_query(tmp_path):
    store = open_store(tmp_path)
    try:
        store.put_message(msg(body=b"early", keys="k"))
        time.sleep(2.1)  # the index keeps whole seconds
        mid = now_ms()
        store.put_message(msg(body=b"late", keys="k"))
        assert bodies(store.query_message("TopicTest", "k", begin=mid - 500)) == [b"late"]
        assert bodies(store.query_message("TopicTest", "k", begin=0, end=mid - 1000)) == [b"early"]
        assert bodies(store.query_message("TopicTest", "k")) == [b"early", b"late"]
    finally:
        store.shutdown()


def test_full_file_rolls_to_a_new_one_and_queries_span_files(tmp_path):
    store = open_store(tmp_path, max_hash_slot_num=16, max_index_num=10)
    try:
        for i in range(40):
            store.put_message(msg(body=b"m%d" % i, keys="same"))
        files = os.listdir(tmp_path / "index")
        assert len(files) >= 4  # 9 usable entries per file
        assert len(store.query_message("TopicTest", "same", max_num=100).records) == 40
    finally:
        store.shutdown()
