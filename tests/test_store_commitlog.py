"""CommitLog: appends, file roll-over, blank records, size limits, message ids."""

import os
import struct

from rocketmesh.broker.store import PutMessageStatus
from rocketmesh.message_codec import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, decode_message_id, decode_record

from storekit import msg, open_store


def test_roll_over_writes_blank_record_and_names_files_by_offset(tmp_path):
    store = open_store(tmp_path, store_host="10.0.0.7:10911")
    try:
        results = [store.put_message(msg(body=os.urandom(700), queue_id=i % 2)) for i in range(60)]
        assert all(r.ok for r in results)
        files = sorted(os.listdir(tmp_path / "commitlog"))
        size = 16 * 1024
        assert len(files) >= 3
        assert files == [f"{i * size:020d}" for i in range(len(files))]
        # Each full file ends with a blank record that covers exactly its tail
        # (the file being written, and the next one prepared ahead, are not full).
        completed = store.commitlog.max_offset // size
        assert completed >= 2
        for name in files[:completed]:
            data = (tmp_path / "commitlog" / name).read_bytes()
            pos = 0
            while True:
                total, magic = struct.unpack_from(">ii", data, pos)
                if magic == BLANK_MAGIC_CODE:
                    assert pos + total == size
                    break
                assert magic == MESSAGE_MAGIC_CODE
                pos += total
        # Physical offsets never straddle a file.
        for r in results:
            a = r.first
            assert a.wrote_offset // size == (a.wrote_offset + a.wrote_bytes - 1) // size
        # Queue offsets are per queue and consecutive.
        assert [r.first.queue_offset for r in results if results.index(r) % 2 == 0] == list(range(30))
    finally:
        store.shutdown()


def test_message_id_decodes_to_store_host_and_reads_back(tmp_path):
    store = open_store(tmp_path, store_host="10.0.0.7:10911")
    try:
        r = store.put_message(msg(body=b"payload", tags="TagA", keys="k1 k2", color="red"))
        ip, port, offset = decode_message_id(r.first.msg_id)
        assert (ip, port, offset) == ("10.0.0.7", 10911, r.first.wrote_offset)
        m = store.look_message_by_offset(offset)
        assert m.body == b"payload" and m.topic == "TopicTest" and m.tags == "TagA"
        assert m.keys == "k1 k2" and m.properties["color"] == "red"
        assert m.msg_id == r.first.msg_id and m.store_host == "10.0.0.7:10911"
        assert store.look_message_by_offset(offset + 1) is None
    finally:
        store.shutdown()


def test_oversized_message_is_refused_and_nothing_is_written(tmp_path):
    store = open_store(tmp_path, max_message_size=1000)
    try:
        before = store.commitlog.max_offset
        r = store.put_message(msg(body=b"x" * 1001))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert "maxMessageSize" in r.remark
        assert store.commitlog.max_offset == before
        # A record that could never fit one file is refused too.
        r = store.put_message(msg(body=b"x" * 999, **{"p": "v" * 16000}))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.commitlog.max_offset == before
        assert store.put_message(msg(body=b"x" * 1000)).ok
    finally:
        store.shutdown()


def test_batch_is_appended_in_order_with_consecutive_offsets(tmp_path):
    store = open_store(tmp_path)
    try:
        store.put_message(msg(queue_id=3))
        r = store.put_messages([msg(body=b"b%d" % i, queue_id=3) for i in range(40)])
        assert r.ok and len(r.appended) == 40
        assert [a.queue_offset for a in r.appended] == list(range(1, 41))
        offsets = [a.wrote_offset for a in r.appended]
        assert offsets == sorted(offsets) and len(set(offsets)) == 40
        assert [decode_record(store.commitlog.read_record(o)).body for o in offsets] == [b"b%d" % i for i in range(40)]
    finally:
        store.shutdown()


def test_arriving_listener_hears_new_max_offset(tmp_path):
    store = open_store(tmp_path)
    heard = []
    store.register_arriving_listener(lambda topic, qid, max_offset: heard.append((topic, qid, max_offset)))
    try:
        for _ in range(3):
            store.put_message(msg(queue_id=1))
        assert store.wait_dispatched(5)
        assert heard[-1] == ("TopicTest", 1, 3)
    finally:
        store.shutdown()


def test_second_store_on_same_directory_is_refused(tmp_path):
    from rocketmesh.broker.store import MessageStore, StoreLockedError
    from storekit import make_config
    import pytest

    store = open_store(tmp_path)
    try:
        with pytest.raises(StoreLockedError):
            MessageStore(make_config(tmp_path))
    finally:
        store.shutdown()
