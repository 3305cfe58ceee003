"""CommitLog: appends, file roll-over, blank records, size limits, message ids."""

import os
import struct
import threading

import pytest

from procs import wait_for
from rocketmesh import Message
from rocketmesh.broker.store import MessageExtBatch, PutMessageStatus, mapped_file
from rocketmesh.model.codec import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    decode_message_id,
    decode_record,
    encode_batch,
    encode_message_id,
    record_size,
)
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


def test_a_put_that_rolls_over_takes_the_next_file_without_waiting_for_it_to_be_warm(tmp_path, monkeypatch):
    # Warming a prepared file reads it whole, seconds for a GiB on a busy broker: a put that waited for it
    # would hold every send behind it past waitTimeMillsInSendQueue (SYSTEM_BUSY, TIMEOUT_CLEAN_QUEUE).
    release = threading.Event()
    warmed: list[int] = []

    def warm_until_released(fd: int, size: int) -> None:
        warmed.append(size)
        release.wait(30)

    monkeypatch.setattr(mapped_file, "warm", warm_until_released)
    store = open_store(tmp_path)
    try:
        results = []
        done = threading.Event()

        def put_across_files() -> None:
            results.extend(store.put_message(msg(body=os.urandom(700))) for _ in range(60))
            done.set()

        threading.Thread(target=put_across_files, daemon=True).start()
        assert done.wait(20), "a put that rolled over to the next file waited for that file's warming"
        assert len(results) == 60 and all(r.ok for r in results)
        assert store.commitlog.max_offset // (16 * 1024) >= 2  # two roll-overs at least
        # Every file made was being warmed meanwhile (each on a thread of its own, which may start late).
        wait_for(lambda: len(warmed) >= 3, 10, "warming of the three files the puts wrote")
    finally:
        release.set()
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


def test_the_arriving_listener_hears_each_put_once_its_messages_are_readable(tmp_path):
    """The listener runs after every put's dispatch, with each grown queue's new end; a read from inside
    it finds the new message."""
    store = open_store(tmp_path)
    heard = []

    def listener(grown):
        for topic, qid, max_offset in grown:
            got = store.get_message("g", topic, qid, max_offset - 1, 1)
            heard.append((topic, qid, max_offset, [decode_record(r).body for r in got.records]))

    store.register_arriving_listener(listener)
    try:
        for i in range(3):
            store.put_message(msg(body=b"m%d" % i, queue_id=1))
        store.put_messages([msg(body=b"a", queue_id=2), msg(body=b"b", queue_id=2), msg(body=b"c", queue_id=3)])
        assert heard == [("TopicTest", 1, 1, [b"m0"]), ("TopicTest", 1, 2, [b"m1"]), ("TopicTest", 1, 3, [b"m2"]),
                         ("TopicTest", 2, 2, [b"b"]), ("TopicTest", 3, 1, [b"c"])]
    finally:
        store.shutdown()


def test_second_store_on_same_directory_is_refused(tmp_path):
    import pytest

    from rocketmesh.broker.store import MessageStore, StoreLockedError
    from storekit import make_config

    store = open_store(tmp_path)
    try:
        with pytest.raises(StoreLockedError):
            MessageStore(make_config(tmp_path))
    finally:
        store.shutdown()


def _batch(topic: str, messages: list, queue_id: int = 0) -> MessageExtBatch:
    return MessageExtBatch(topic, queue_id, encode_batch(messages), born_timestamp=1234)


def test_a_batch_is_stored_as_its_items_with_consecutive_offsets_and_one_result(tmp_path):
    store = open_store(tmp_path, store_host="10.0.0.7:10911")
    grown = []
    store.register_arriving_listener(grown.append)
    try:
        store.put_message(msg(queue_id=2))
        sent = [Message("TopicTest", f"body-{i}".encode(), tags=f"T{i % 2}", keys=f"key-{i}") for i in range(20)]
        r = store.put_batch(_batch("TopicTest", sent, queue_id=2))
        assert r.ok and len(r.appended) == 1
        a = r.first
        assert a.msg_num == 20 and a.queue_offset == 1
        ids = a.msg_id.split(",")
        assert len(ids) == 20 and ids[0] == encode_message_id(store.commitlog.store_host, a.wrote_offset)
        assert grown[-1] == [("TopicTest", 2, 21)]
        # Each item is a whole record: CRC, topic, tags, keys, born time, its own id and queue offset.
        stored = [decode_record(store.commitlog.read_record(decode_message_id(i)[2]), check_crc=True) for i in ids]
        assert [m.body for m in stored] == [m.body for m in sent]
        assert [m.queue_offset for m in stored] == list(range(1, 21))
        assert [m.tags for m in stored] == [m.tags for m in sent] and stored[3].keys == "key-3"
        assert all(m.topic == "TopicTest" and m.queue_id == 2 and m.born_timestamp == 1234 for m in stored)
        assert [m.msg_id for m in stored] == ids
        last = stored[-1]
        assert a.wrote_offset + a.wrote_bytes == last.commitlog_offset + last.store_size == store.commitlog.max_offset
        # Readable through the consume queue and the index once dispatched.
        got = store.get_message("g", "TopicTest", 2, 1, 32)
        assert got.queue_offsets == list(range(1, 21))
        assert [decode_record(rec).body for rec in got.records] == [m.body for m in sent]
        assert [decode_record(rec).queue_offset for rec in store.query_message("TopicTest", "key-7").records] == [8]
    finally:
        store.shutdown()
    # And after a restart.
    store = open_store(tmp_path, store_host="10.0.0.7:10911")
    try:
        assert store.get_max_offset_in_queue("TopicTest", 2) == 21
        assert store.put_batch(_batch("TopicTest", sent[:2], queue_id=2)).first.queue_offset == 21
    finally:
        store.shutdown()


def test_a_batch_that_does_not_fit_the_file_goes_whole_to_the_next(tmp_path):
    store = open_store(tmp_path)
    try:
        for _ in range(10):
            assert store.put_message(msg(body=b"x" * 1200)).ok
        r = store.put_batch(_batch("TopicTest", [Message("TopicTest", b"y" * 1000) for _ in range(6)]))
        assert r.ok
        size = 16 * 1024
        assert r.first.wrote_offset == size
        # The first file ends with a blank record covering its tail.
        first = (tmp_path / "commitlog" / f"{0:020d}").read_bytes()
        end = 10 * record_size(1200, len("TopicTest"), 0)
        assert struct.unpack_from(">ii", first, end) == (size - end, BLANK_MAGIC_CODE)
        # Records can never straddle a file; a batch larger than a file is refused.
        assert r.first.wrote_offset // size == (r.first.wrote_offset + r.first.wrote_bytes - 1) // size
        huge = _batch("TopicTest", [Message("TopicTest", b"z" * 1000) for _ in range(20)])
        before = store.commitlog.max_offset
        r = store.put_batch(huge)
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "more than a commitlog file" in r.remark
        assert store.commitlog.max_offset == before
    finally:
        store.shutdown()


def test_a_bad_item_refuses_the_whole_batch_and_nothing_is_written(tmp_path):
    store = open_store(tmp_path, max_message_size=1000)
    try:
        good = [Message("TopicTest", b"fine") for _ in range(3)]
        cases = [
            (good + [Message("TopicTest", b"x" * 1001)], PutMessageStatus.MESSAGE_ILLEGAL, "maxMessageSize"),
            (good + [Message("TopicTest", b"late", delay_level=3)], PutMessageStatus.MESSAGE_ILLEGAL, "delayed"),
            (good + [Message("TopicTest", b"late", delay_ms=500)], PutMessageStatus.MESSAGE_ILLEGAL, "timer"),
            (good + [Message("TopicTest", b"p", properties={"big": "v" * 33000})],
             PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "exceed"),
        ]
        before = store.commitlog.max_offset
        for messages, status, text in cases:
            r = store.put_batch(_batch("TopicTest", messages))
            assert r.status is status and text in r.remark, r
        raw = encode_batch(good)
        for body, text in ((raw[:-3], "does not decode"), (raw + b"\x00\x00", "does not decode"),
                           (b"", "no message"), (raw + raw[:10], "truncated item")):
            r = store.put_batch(MessageExtBatch("TopicTest", 0, body))
            assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and text in r.remark, r
        empty_body = bytearray(encode_batch([Message("TopicTest", b"x")]))
        struct.pack_into(">ii", empty_body, 0, len(empty_body) - 1, 0)
        struct.pack_into(">i", empty_body, 16, 0)
        r = store.put_batch(MessageExtBatch("TopicTest", 0, bytes(empty_body[:16]) + b"\x00\x00\x00\x00\x00\x00"))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "empty" in r.remark, r
        assert store.commitlog.max_offset == before
        assert store.get_max_offset_in_queue("TopicTest", 0) == 0
        assert store.put_batch(_batch("TopicTest", good)).first.queue_offset == 0
    finally:
        store.shutdown()


def test_records_of_a_pull_decode_as_each_record_alone(tmp_path):
    from rocketmesh.model.codec import CorruptRecord, decode_record, decode_records

    store = open_store(str(tmp_path))
    store.start()
    try:
        for i in range(20):
            store.put_message(msg(body=b"x" * i, tags=f"T{i % 3}", keys=f"k{i}", uniq=f"U{i}", a=str(i)))
        store.put_message(msg(body=b"no properties"))
        records = store.get_message("g", "TopicTest", 0, 0, 64).records
    finally:
        store.shutdown()
    together = decode_records(b"".join(records))
    assert together == [decode_record(r) for r in records]
    assert together[5].properties["a"] == "5" and together[5].keys == "k5"
    with pytest.raises(CorruptRecord):
        decode_records(b"".join(records)[:-1])
