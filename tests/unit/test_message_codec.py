"""The record, properties, message id and batch codecs."""

import pytest

from rocketmesh.model.codec import (
    CorruptRecord,
    decode_batch,
    decode_message_id,
    decode_properties,
    encode_batch,
    encode_host,
    encode_message_id,
    encode_properties,
    java_string_hash,
    tags_hash_code,
)
from rocketmesh.model.message import Message, MessageConst


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
