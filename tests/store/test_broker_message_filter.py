"""The broker's pull filter: tag codes on the consume queue, SQL92 on stored records."""

from __future__ import annotations

import pytest

from rocketmesh.broker.message_filter import (
    ExpressionMessageFilter,
    filter_for,
    record_properties,
)
from rocketmesh.broker.store import GetMessageStatus
from rocketmesh.filter import ExpressionType, FilterSyntaxError, build_subscription
from rocketmesh.model.codec import decode_record, tags_hash_code
from storekit import msg, open_store

#: (tags, user properties) of the messages put in the store, in order.
MESSAGES = [
    ("TagA", {"a": "1", "region": "eu"}),
    ("TagB", {"a": "5", "region": "us"}),
    ("TagA", {"a": "10"}),
    (None, {"a": "abc", "region": "eu"}),
    ("TagC", {}),
    ("TagB", {"a": "3", "region": "eu", "price": "9.99"}),
]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """(store, records): MESSAGES put into a real store and read back as commit-log records."""
    store = open_store(tmp_path_factory.mktemp("store"))
    for i, (tags, props) in enumerate(MESSAGES):
        store.put_message(msg(body=b"m%d" % i, tags=tags, **props))
    result = store.get_message("g", "TopicTest", 0, 0, 32)
    assert len(result.records) == len(MESSAGES)
    yield store, [bytes(r) for r in result.records]
    store.shutdown()


def _bodies(records):
    return [decode_record(r).body for r in records]


def test_properties_are_read_from_the_record_bytes(stored):
    _, records = stored
    for record in records:
        assert record_properties(record) == decode_record(record).properties
        assert record_properties(memoryview(record)) == decode_record(record).properties


@pytest.mark.parametrize("expression,matching", [
    ("a > 2", [1, 2, 5]),
    ("a BETWEEN 0 AND 3", [0, 5]),
    ("region = 'eu'", [0, 3, 5]),
    ("region = 'eu' AND a > 2", [5]),  # "abc" fails the conversion: no match
    ("TAGS IN ('TagA', 'TagC')", [0, 2, 4]),
    ("TAGS IS NULL", [3]),
    ("region IS NULL OR region <> 'eu'", [1, 2, 4]),
    ("price > 9.5", [5]),
    ("NOT (a > 2)", [0]),
    ("TRUE", [0, 1, 2, 3, 4, 5]),
    ("missing = 'x'", []),
])
def test_sql_filter_evaluates_each_record(stored, expression, matching):
    _, records = stored
    f = filter_for(expression, "SQL92")
    assert isinstance(f, ExpressionMessageFilter)
    assert all(f.is_matched_by_consume_queue(tags_hash_code(t)) for t, _ in MESSAGES)
    assert [i for i, r in enumerate(records) if f.is_matched_by_commit_log(r)] == matching


def test_store_read_with_a_sql_filter_returns_only_matches(stored):
    store, _ = stored
    result = store.get_message("g", "TopicTest", 0, 0, 32, filter_for("region = 'eu' OR a = 10", "SQL92"))
    assert result.status is GetMessageStatus.FOUND
    assert _bodies(result.records) == [b"m0", b"m2", b"m3", b"m5"]
    assert result.queue_offsets == [0, 2, 3, 5]
    none = store.get_message("g", "TopicTest", 0, 0, 32, filter_for("a > 100", "SQL92"))
    assert none.status is GetMessageStatus.NO_MATCHED_MESSAGE and none.records == []
    assert none.next_begin_offset == len(MESSAGES)


def test_store_read_with_a_tag_filter(stored):
    store, records = stored
    f = filter_for("TagA || TagC", "TAG")
    result = store.get_message("g", "TopicTest", 0, 0, 32, f)
    assert _bodies(result.records) == [b"m0", b"m2", b"m4"]
    assert all(f.is_matched_by_commit_log(r) for r in records)


def test_tag_filter_matches_codes_only():
    f = ExpressionMessageFilter(build_subscription("T", "TagA || Aa"))
    assert f.is_matched_by_consume_queue(tags_hash_code("TagA"))
    assert f.is_matched_by_consume_queue(tags_hash_code("BB"))  # same code as "Aa"
    assert not f.is_matched_by_consume_queue(tags_hash_code("TagB"))
    assert not f.is_matched_by_consume_queue(0)  # a message without tags
    assert f.is_matched_by_commit_log(b"not even a record")


def test_star_filter_built_directly_matches_everything():
    f = ExpressionMessageFilter(build_subscription("T", "*"))
    assert f.is_matched_by_consume_queue(0) and f.is_matched_by_consume_queue(12345)
    assert f.is_matched_by_commit_log(b"")


@pytest.mark.parametrize("expression,expression_type", [("*", "TAG"), ("", "TAG"), (None, "TAG"), ("*", None),
                                                         ("*", ""), (None, None)])
def test_match_all_needs_no_filter(expression, expression_type):
    assert filter_for(expression, expression_type) is None


def test_filters_are_cached_by_type_and_expression():
    a = filter_for("TagA", "TAG")
    assert filter_for("TagA", "TAG") is a
    assert filter_for("TagA", ExpressionType.TAG) is a
    assert filter_for("a = 1", "SQL92") is filter_for("a = 1", "SQL92")
    assert filter_for("TagA", "TAG") is not filter_for("TagB", "TAG")


@pytest.mark.parametrize("expression,expression_type,message", [
    ("a >", "SQL92", "position 3"),
    ("", "SQL92", "needs an expression"),
    ("TagA", "XPATH", "unknown expression type"),
    ("||", "TAG", "names no tag"),
])
def test_bad_subscriptions_raise(expression, expression_type, message):
    with pytest.raises(FilterSyntaxError, match=message):
        filter_for(expression, expression_type)


def test_unparsable_records_do_not_match(stored):
    _, records = stored
    f = filter_for("TRUE", "SQL92")
    record = records[0]
    assert f.is_matched_by_commit_log(record)
    bad_magic = record[:4] + b"\x00\x00\x00\x00" + record[8:]
    truncated = record[:-3]
    grown_props = bytearray(record)
    grown_props[_props_len_pos(record)] = 0xFF  # properties length beyond the record
    for bad in (b"", b"\x00" * 10, bad_magic, truncated, bytes(grown_props), record[:90]):
        assert not f.is_matched_by_commit_log(bad)
        assert record_properties(bad) is None


def _props_len_pos(record: bytes) -> int:
    """Offset of PROPLEN: after the 88-byte header, the body, TOPICLEN and the topic."""
    body_len = int.from_bytes(record[84:88], "big")
    topic_pos = 88 + body_len
    return topic_pos + 1 + record[topic_pos]


def test_undecodable_properties_do_not_match(stored):
    _, records = stored
    record = bytearray(records[0])
    record[-2] = 0xFF  # invalid UTF-8 inside the properties
    assert not filter_for("TRUE", "SQL92").is_matched_by_commit_log(bytes(record))
