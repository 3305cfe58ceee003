"""The message trace wire text (rocketmesh.client.trace.trace_data): RocketMQ's field order and separators, a round
trip of each record type, the older forms RocketMQ's decoder takes, and the keys a trace message gets."""

from __future__ import annotations

import pytest

from rocketmesh.client.trace.trace_data import (
    CONTENT_SPLITOR,
    FIELD_SPLITOR,
    ConsumeReturnType,
    TraceDecodeError,
    TraceMessageType,
    TraceRecord,
    TraceType,
    decode,
    encode,
    encode_record,
    trace_keys,
)

MSG_ID = "7F00000100002A9F0000000000000001"
OFFSET_ID = "7F00000100002A9F00000000000004D2"

PUB = TraceRecord(TraceType.Pub, MSG_ID, 1700000000123, group="orders-producer", topic="Orders", tags="TagA",
                  keys="order-1", store_host="127.0.0.1:10911", body_length=42, cost_ms=3,
                  msg_type=TraceMessageType.Delay_Msg, offset_msg_id=OFFSET_ID, success=True)
SUB_BEFORE = TraceRecord(TraceType.SubBefore, MSG_ID, 1700000000200, group="orders-consumer", keys="order-1",
                         request_id="REQ1", retry_times=2)
SUB_AFTER = TraceRecord(TraceType.SubAfter, MSG_ID, 1700000000250, keys="order-1", cost_ms=50, success=False,
                        request_id="REQ1", context_code=ConsumeReturnType.EXCEPTION)
END_TX = TraceRecord(TraceType.EndTransaction, MSG_ID, 1700000000300, group="orders-tx", topic="Orders",
                     tags=None, keys=None, store_host="127.0.0.1:10911", msg_type=TraceMessageType.Trans_msg_Commit,
                     transaction_id=MSG_ID, transaction_state="COMMIT_MESSAGE", from_transaction_check=True)


def test_pub_fields_are_rocketmqs_in_order() -> None:
    text = encode_record(PUB)
    assert text.endswith(FIELD_SPLITOR) and text.count(FIELD_SPLITOR) == 1
    assert text[:-1].split(CONTENT_SPLITOR) == [
        "Pub", "1700000000123", "DefaultRegion", "orders-producer", "Orders", MSG_ID, "TagA", "order-1",
        "127.0.0.1:10911", "42", "3", "3", OFFSET_ID, "true"]


def test_sub_and_end_transaction_fields_are_rocketmqs_in_order() -> None:
    assert encode_record(SUB_BEFORE)[:-1].split(CONTENT_SPLITOR) == [
        "SubBefore", "1700000000200", "DefaultRegion", "orders-consumer", "REQ1", MSG_ID, "2", "order-1"]
    assert encode_record(SUB_AFTER)[:-1].split(CONTENT_SPLITOR) == [
        "SubAfter", "REQ1", MSG_ID, "50", "false", "order-1", "2", "1700000000250"]
    assert encode_record(END_TX)[:-1].split(CONTENT_SPLITOR) == [
        "EndTransaction", "1700000000300", "DefaultRegion", "orders-tx", "Orders", MSG_ID, "null", "null",
        "127.0.0.1:10911", "2", MSG_ID, "COMMIT_MESSAGE", "true"]


def test_every_record_type_round_trips() -> None:
    records = [PUB, SUB_BEFORE, SUB_AFTER, END_TX]
    assert decode(encode(records)) == records


def test_older_forms_decode_as_rocketmqs_decoder_takes_them() -> None:
    # A Pub without the offset id (13 fields), and one with the client host (15 fields).
    short = CONTENT_SPLITOR.join(["Pub", "1", "r", "g", "T", MSG_ID, "null", "null", "h:1", "5", "7", "0", "false"])
    (r,) = decode(short + FIELD_SPLITOR)
    assert (r.success, r.offset_msg_id, r.tags, r.cost_ms) == (False, "", None, 7)
    long = encode_record(PUB)[:-1] + CONTENT_SPLITOR + "10.0.0.5" + FIELD_SPLITOR
    assert decode(long)[0].client_host == "10.0.0.5"
    # A SubAfter of RocketMQ 4.4 (no context code, no time).
    (after,) = decode(CONTENT_SPLITOR.join(["SubAfter", "REQ", MSG_ID, "9", "true", "k"]) + FIELD_SPLITOR)
    assert (after.cost_ms, after.success, after.context_code, after.timestamp) == (9, True,
                                                                                   ConsumeReturnType.SUCCESS, 0)


def test_garbage_is_a_typed_error() -> None:
    with pytest.raises(TraceDecodeError):
        decode("Pub" + CONTENT_SPLITOR + "not-a-time" + FIELD_SPLITOR)
    with pytest.raises(TraceDecodeError):
        decode("Nonsense" + CONTENT_SPLITOR + "x" + FIELD_SPLITOR)
    assert decode("") == []


def test_keys_are_the_message_ids_and_user_keys() -> None:
    assert trace_keys(PUB) == [MSG_ID, OFFSET_ID, "order-1"]
    assert trace_keys(SUB_AFTER) == [MSG_ID, "order-1"]
    assert trace_keys(END_TX) == [MSG_ID]


def test_a_full_dispatcher_queue_drops_and_counts_never_blocks() -> None:
    from rocketmesh import Producer
    from rocketmesh.client.trace.msg_trace import TraceDispatcher

    # Not started: nothing drains the queue.
    d = TraceDispatcher("g", "127.0.0.1:1", new_producer=Producer, queue_size=2)
    for _ in range(5):
        d.put(PUB)
    assert d.dropped == 3
    d.close(0.1)  # what is left is counted too, and no producer was ever made
    assert d.dropped == 5
