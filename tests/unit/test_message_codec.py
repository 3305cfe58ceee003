"""The record, properties, message id and batch codecs."""

import struct
import zlib

import pytest

from rocketmesh.model.codec import (
    CorruptRecord,
    body_crc,
    compress_body,
    decode_batch,
    decode_message_id,
    decode_properties,
    decode_record,
    decode_records,
    encode_batch,
    encode_host,
    encode_message_id,
    encode_properties,
    java_string_hash,
    tags_hash_code,
)
from rocketmesh.model.message import Message, MessageConst, SysFlag


def test_java_string_hash_matches_java():
    # Values of String.hashCode() as Java computes them.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -2147483648
    assert tags_hash_code(None) == 0


def test_properties_round_trip_and_tolerate_missing_last_separator():
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "a": "ü"}
    raw = encode_properties(props)
    assert raw == "TAGS\x01TagA\x02KEYS\x01k1 k2\x02a\x01ü\x02".encode()
    assert decode_properties(raw) == props
    assert decode_properties(b"A\x011\x02B\x012") == {"A": "1", "B": "2"}


def test_message_id_is_store_host_and_offset():
    host = encode_host("10.1.2.3", 10911)
    mid = encode_message_id(host, 123456789)
    assert len(mid) == 32 and mid == mid.upper()
    assert decode_message_id(mid) == ("10.1.2.3", 10911, 123456789)
    with pytest.raises(ValueError):
        decode_message_id("abc")


def test_batch_round_trip_and_garbage():
    msgs = [Message("T", f"body{i}".encode(), tags="A", keys=[f"k{i}", "x"]) for i in range(5)]
    back = decode_batch("T", encode_batch(msgs))
    assert [m.body for m in back] == [m.body for m in msgs]
    assert [m.keys for m in back] == [f"k{i} x" for i in range(5)]
    with pytest.raises(CorruptRecord):
        decode_batch("T", encode_batch(msgs)[:-3])


def test_message_conveniences():
    m = Message("T", "text", tags="A", keys=["a", "b"], delay_level=3)
    assert m.body == b"text"
    assert m.properties == {MessageConst.TAGS: "A", MessageConst.KEYS: "a b", MessageConst.DELAY_TIME_LEVEL: "3"}
    m.delay_level = 0
    assert MessageConst.DELAY_TIME_LEVEL not in m.properties


# --- compressed bodies (sysFlag bit 0) ---

def record(body: bytes, sys_flag: int = 0, topic: bytes = b"T", props: bytes = b"KEYS\x01k\x02") -> bytes:
    """A commitlog record laid out by hand from RocketMQ's field order, not by the broker's writer."""
    host = bytes([127, 0, 0, 1]) + struct.pack(">i", 10911)
    total = 88 + len(body) + 1 + len(topic) + 2 + len(props)
    head = struct.pack(">iiiiiqqiq8sq8siqi", total, -626843481, body_crc(body), 0, 0, 7, 1000, sys_flag,
                       1, host, 2, host, 0, 0, len(body))
    return head + body + bytes([len(topic)]) + topic + struct.pack(">H", len(props)) + props


ORIGINAL = bytes(range(256)) * 40  # 10 KiB


def test_compress_body_is_a_zlib_stream_at_the_given_level():
    packed = compress_body(ORIGINAL, 5)
    assert packed == zlib.compress(ORIGINAL, 5) and len(packed) < len(ORIGINAL)
    assert packed[0] == 0x78  # a zlib header (deflate, 32 KiB window), what java.util.zip's Deflater writes
    assert zlib.decompress(packed) == ORIGINAL
    assert compress_body(ORIGINAL, 9) != compress_body(ORIGINAL, 0)


def test_decoders_inflate_a_compressed_body_and_keep_the_stored_record_facts():
    packed = zlib.compress(ORIGINAL, 5)
    rec = record(packed, SysFlag.COMPRESSED | SysFlag.TRANSACTION_COMMIT)
    for m in (decode_record(rec, check_crc=True), decode_records(rec)[0]):
        assert m.body == ORIGINAL
        assert m.sys_flag == 9  # as stored: a user can see it was compressed
        assert m.body_crc == body_crc(packed) and m.store_size == len(rec)
        assert m.keys == "k" and m.topic == "T" and m.queue_offset == 7
    # The broker copies stored records as they are.
    raw = decode_record(rec, inflate=False)
    assert raw.body == packed and raw.sys_flag == 9


def test_decode_records_inflates_only_the_flagged_records():
    looks_zlib = zlib.compress(b"not flagged, so not inflated")
    recs = [record(b"plain"), record(zlib.compress(b"packed"), SysFlag.COMPRESSED), record(looks_zlib)]
    assert [m.body for m in decode_records(b"".join(recs))] == [b"plain", b"packed", looks_zlib]
    assert [m.sys_flag for m in decode_records(b"".join(recs))] == [0, 1, 0]


@pytest.mark.parametrize("body", [b"raw bytes, never deflated", zlib.compress(ORIGINAL)[:-9], b"\x78"])
def test_a_compressed_flag_on_a_body_that_does_not_inflate_is_a_corrupt_record(body: bytes):
    rec = record(body, SysFlag.COMPRESSED)
    with pytest.raises(CorruptRecord, match="flagged compressed"):
        decode_record(rec)
    with pytest.raises(CorruptRecord, match=r"record at 0 \(commitlog offset 1000\) is flagged compressed"):
        decode_records(rec)
    with pytest.raises(CorruptRecord, match=rf"record at {len(record(b'ok'))} \(commitlog offset 1000\) is flagged"):
        decode_records(record(b"ok") + rec)  # the message names the bad record's position and commitlog offset
    assert decode_record(rec, inflate=False).body == body
