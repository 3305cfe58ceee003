"""RocketMQ's ConsumerRunningInfo and ConsumeMessageDirectlyResult JSON: ours read back, and the forms
RocketMQ's clients write (an ``mqTable`` keyed by queue objects, pretty-printed, keys as strings)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from rocketmesh.client import CMResult, ConsumeMessageDirectlyResult, ConsumerRunningInfo, ProcessQueueInfo
from rocketmesh.client.running_info import loads_lenient
from rocketmesh.filter import build_subscription
from rocketmesh.model.message import MessageQueue

MQ0, MQ1 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)


def test_our_running_info_reads_back_as_written() -> None:
    info = ConsumerRunningInfo({"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_CONSUMEORDERLY": "true"},
                               [build_subscription("T", "A || B")],
                               {MQ1: ProcessQueueInfo(7, 3, 5, 3, locked=True), MQ0: ProcessQueueInfo(2)},
                               {"T": {"pullRT": 1.5}}, "Thread: main")
    body = info.encode()
    # RocketMQ's form: queue objects as keys, in queue order.
    assert b'"mqTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"commitOffset":2' in body
    assert ConsumerRunningInfo.decode(body) == info
    assert info.orderly and info.consume_type == "CONSUME_PASSIVELY"


def test_a_java_style_answer_pretty_printed_with_absent_fields() -> None:
    body = b"""{
        "jstack" : null,
        "mqTable" : {
            {"brokerName":"broker-a","queueId":1,"topic":"T"} : {"commitOffset":9,"droped":true},
            "{\\"brokerName\\":\\"broker-a\\",\\"queueId\\":0,\\"topic\\":\\"T\\"}" : {}
        },
        "properties" : {"PROP_CONSUMER_START_TIMESTAMP" : "1700000000000", "consumeThreadMin" : 20},
        "subscriptionSet" : [{"topic":"T","subString":"*","classFilterMode":false}]
    }"""
    info = ConsumerRunningInfo.decode(body)
    assert info.mq_table == {MQ1: ProcessQueueInfo(9, dropped=True), MQ0: ProcessQueueInfo()}
    assert info.start_timestamp == 1700000000000 and info.properties["consumeThreadMin"] == "20"
    assert info.jstack is None and info.status_table == {}


@pytest.mark.parametrize("body", [b"", b"[]", b'{"mqTable":{[1]:{}}}', b'{"mqTable":{{"topic":"T"}:{}}}',
                                  b'{"mqTable":{{"a":1}:{}} x', b'{"properties":[]}', b"\xff"])
def test_what_is_not_a_running_info_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):
        ConsumerRunningInfo.decode(body)


def test_lenient_json_is_json_where_json_is_strict() -> None:
    text = '{"a": [1, 2.5, "x", true, null, {"b": {}}], "c": {"d": []}}'
    assert loads_lenient(text) == {"a": [1, 2.5, "x", True, None, {"b": {}}], "c": {"d": []}}
    assert loads_lenient('{{"k": 1}: 2}') == {(("k", 1),): 2}


def test_a_direct_consumption_result_reads_back() -> None:
    result = ConsumeMessageDirectlyResult(True, False, CMResult.CR_THROW_EXCEPTION, "RuntimeError: no", 12)
    assert ConsumeMessageDirectlyResult.decode(result.encode()) == result
    # RocketMQ leaves a null result out: read as none.
    assert ConsumeMessageDirectlyResult.decode(b'{"order":false,"autoCommit":true,"spentTimeMills":0}'
                                               ).consume_result is None
    with pytest.raises(ValueError):
        ConsumeMessageDirectlyResult.decode(b'{"consumeResult":"CR_MAYBE"}')


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20))
def test_lenient_json_reads_any_json(value: object) -> None:
    assert loads_lenient(json.dumps(value, indent=1)) == value


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200) | st.just(b"[" * 50_000) | st.just(b'{"mqTable":' + b"{" * 50_000))
def test_anything_a_client_sends_is_a_running_info_or_a_value_error(body: bytes) -> None:
    try:
        info = ConsumerRunningInfo.decode(body)
    except ValueError:
        return
    assert isinstance(info, ConsumerRunningInfo)
