"""Checks before anything is sent: bad topics, system topics, bodies, batches, groups, settings.

The producer points at a port where nothing listens, and the remoting
client is rigged to fail the test if any request is attempted.
"""

from __future__ import annotations

import pytest

from rocketmesh import Message, MQClientError, Producer
from rocketmesh.client import ClientErrorCode, ResponseCode
from rocketmesh.model.message import MessageConst, MessageQueue
from rocketmesh.remoting import RemotingClient

NOWHERE = "127.0.0.1:1"


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a request was sent")

    for name in ("invoke_sync", "invoke_async", "invoke_oneway"):
        monkeypatch.setattr(RemotingClient, name, refuse)


@pytest.fixture
def producer(no_network: None):
    p = Producer("validation-group", NOWHERE, max_message_size=1024)
    yield p
    p.shutdown()


def assert_illegal(exc_info: pytest.ExceptionInfo[MQClientError], *words: str) -> None:
    assert exc_info.value.response_code == ResponseCode.MESSAGE_ILLEGAL
    text = str(exc_info.value)
    for w in words:
        assert w in text


@pytest.mark.parametrize("topic", ["", "   ", "a" * 128, "bad topic", "a/b", "tópico", "x;y"])
def test_bad_topic_names(producer: Producer, topic: str) -> None:
    for send in (producer.send, producer.send_async, producer.send_oneway):
        with pytest.raises(MQClientError) as ei:
            send(Message(topic, b"body"))
        assert_illegal(ei, "topic")
    assert not producer.running


def test_longest_legal_topic_passes_validation(producer: Producer) -> None:
    producer._check(Message("a" * 127, b"x"))


@pytest.mark.parametrize("topic", ["TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_anything",
                                   "BenchmarkTest", "OFFSET_MOVED_EVENT"])
def test_system_topics_refused(producer: Producer, topic: str) -> None:
    with pytest.raises(MQClientError) as ei:
        producer.send(Message(topic, b"body"))
    assert_illegal(ei, "system topic")


def test_empty_body(producer: Producer) -> None:
    with pytest.raises(MQClientError) as ei:
        producer.send(Message("T", b""))
    assert_illegal(ei, "empty")


def test_body_over_max(producer: Producer) -> None:
    producer._check(Message("T", b"x" * 1024))
    with pytest.raises(MQClientError) as ei:
        producer.send(Message("T", b"x" * 1025))
    assert_illegal(ei, "1025", "1024")
    with pytest.raises(MQClientError):
        producer.send_async(Message("T", b"x" * 1025))
    with pytest.raises(MQClientError):
        producer.send_oneway(Message("T", b"x" * 1025))
    assert not producer.running


def test_not_a_message(producer: Producer) -> None:
    with pytest.raises(MQClientError) as ei:
        producer.send(b"raw bytes")  # type: ignore[arg-type]
    assert_illegal(ei, "Message")


def test_queue_of_another_topic(producer: Producer) -> None:
    with pytest.raises(MQClientError) as ei:
        producer.send(Message("T", b"x"), queue=MessageQueue("Other", "b", 0))
    assert_illegal(ei, "Other")


class TestBatch:
    def test_mixed_topics(self, producer: Producer) -> None:
        with pytest.raises(MQClientError) as ei:
            producer.send_batch([Message("T", b"a"), Message("U", b"b")])
        assert_illegal(ei, "same topic")

    def test_delayed_message(self, producer: Producer) -> None:
        with pytest.raises(MQClientError) as ei:
            producer.send_batch([Message("T", b"a"), Message("T", b"b", delay_level=3)])
        assert_illegal(ei, "delay")

    def test_timer_and_transactional_messages(self, producer: Producer) -> None:
        with pytest.raises(MQClientError) as ei:
            producer.send_batch([Message("T", b"a"), Message("T", b"b", delay_ms=1000)])
        assert_illegal(ei, "timer")
        prepared = Message("T", b"b", properties={MessageConst.TRANSACTION_PREPARED: "true"})
        with pytest.raises(MQClientError) as ei:
            producer.send_batch([Message("T", b"a"), prepared])
        assert_illegal(ei, "transactional")

    def test_retry_topic(self, producer: Producer) -> None:
        with pytest.raises(MQClientError) as ei:
            producer.send_batch([Message("%RETRY%group", b"a")])
        assert_illegal(ei, "retry")

    def test_empty_and_not_a_list(self, producer: Producer) -> None:
        with pytest.raises(MQClientError):
            producer.send_batch([])
        with pytest.raises(MQClientError):
            producer.send_batch(Message("T", b"a"))  # type: ignore[arg-type]

    def test_each_message_checked(self, producer: Producer) -> None:
        with pytest.raises(MQClientError) as ei:
            producer.send_batch([Message("T", b"a"), Message("T", b"")])
        assert_illegal(ei, "empty")
        with pytest.raises(MQClientError):
            producer.send_batch([Message("TBW102", b"a")])

    def test_encoded_size_over_max(self, producer: Producer) -> None:
        msgs = [Message("T", b"x" * 300) for _ in range(4)]  # each fits, 1200+ bytes together
        with pytest.raises(MQClientError) as ei:
            producer.send_batch(msgs)
        assert_illegal(ei, "batch", "1024")
        assert not producer.running


@pytest.mark.parametrize("group", ["", "  ", "bad group", "g" * 256, "DEFAULT_PRODUCER"])
def test_bad_groups(group: str) -> None:
    with pytest.raises(MQClientError):
        Producer(group, NOWHERE)


@pytest.mark.parametrize("setting", [
    {"send_msg_timeout_ms": 0}, {"retry_times_when_send_failed": -1}, {"max_message_size": 0},
    {"retry_times_when_send_async_failed": "2"},
])
def test_bad_settings(setting: dict) -> None:
    with pytest.raises(MQClientError):
        Producer("g", NOWHERE, **setting)


def test_name_server_from_env_or_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    with pytest.raises(MQClientError) as ei:
        Producer("g")
    assert ei.value.response_code == ClientErrorCode.NO_NAME_SERVER_EXCEPTION
    assert "NAMESRV_ADDR" in str(ei.value)
    monkeypatch.setenv("NAMESRV_ADDR", "10.0.0.1:9876; 10.0.0.2:9876")
    assert Producer("g").namesrv_addrs == ("10.0.0.1:9876", "10.0.0.2:9876")
    with pytest.raises(MQClientError):
        Producer("g", "not an address")


def test_shut_down_producer_refuses(no_network: None) -> None:
    p = Producer("g", NOWHERE)
    p.start()
    assert p.running
    p.shutdown()
    with pytest.raises(MQClientError, match="shut down"):
        p.send(Message("T", b"x"))
