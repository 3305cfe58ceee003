"""One trace per message across the mesh: the client's spans go to the application's SDK (this process, in
memory), the broker's, the scheduler's and the txn-checker's to a real OTLP/HTTP receiver. A message sent with
a delay level whose listener fails once, and a transactional message settled by check-back, are each followed
from the producer's send through every service to each consumer process span, in one trace.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from clientkit import FAST_CLIENT, make_topic
from otlp_receiver import OtlpReceiver, ReceivedSpan
from procs import FAST_BROKER, FAST_CHECKER, TxnCheckerProcess
from rocketmesh import LocalTransactionState, Message, Producer, TransactionProducer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.model.message import MessageExt
from rocketmesh.telemetry import semconv as sc
from tracekit import named, wait_spans

LEVELS = "1s 1s 1s 3s 5s"  # delay level 1 after 1 s, the first retry (level 3) after 1 s
# opentelemetry.proto.trace.v1.Span.SpanKind
SERVER, CLIENT, PRODUCER = 2, 3, 4


@pytest.fixture
def broker_args(otlp_receiver: OtlpReceiver) -> dict[str, object]:
    """The broker (and, started after it, the scheduler) export to the receiver: it runs first."""
    return dict(FAST_BROKER, messageDelayLevel=LEVELS)


@pytest.fixture
def txn_checker(otlp_receiver: OtlpReceiver, namesrv, broker,
                start_txn_checker: Callable[..., TxnCheckerProcess]) -> TxnCheckerProcess:
    return start_txn_checker(namesrv.addr, **FAST_CHECKER, rebalanceIntervalMs=1000)


class FailsOnce:
    """A listener that asks for a retry of the first delivery of each message and takes the second."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with self.lock:
            first = [m for m in msgs if m.unique_key not in self.seen]
            self.seen.update(m.unique_key for m in msgs)
        return ConsumeConcurrentlyStatus.RECONSUME_LATER if first else ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def consume(namesrv: str, group: str, topic: str, listener: Callable[[list[MessageExt]], object]) -> PushConsumer:
    consumer = PushConsumer(group, namesrv, instance_name=group, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            **FAST_CLIENT)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    return consumer.start()


def hex_id(span: ReadableSpan) -> tuple[str, str]:
    """(trace id, span id) of a client span, as the receiver spells them."""
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def parent_of(span: ReadableSpan) -> str:
    assert span.parent is not None, f"{span.name} has no parent"
    return f"{span.parent.span_id:016x}"


def one(receiver: OtlpReceiver, trace_id: str, service: str, name: str) -> ReceivedSpan:
    """The one span ``name`` of ``service`` in the trace (waits for it)."""
    [span] = receiver.wait_for(lambda s: s.trace_id == trace_id and s.service == service and s.name == name)
    return span


def test_a_delayed_message_failed_once_is_one_trace_from_send_to_retry(
        otlp_receiver: OtlpReceiver, namesrv, broker, scheduler, admin, spans: InMemorySpanExporter):
    topic, group = "E2EDelayed", "e2e-delay-c"
    make_topic(admin, topic, 1)
    with Producer("e2e-delay-p", namesrv.addr, **FAST_CLIENT) as producer:
        sent = producer.send(Message(topic, "late", tags="TagA", delay_level=1))
    [send] = named(spans, f"send {topic}")
    trace_id, send_id = hex_id(send)
    consumer = consume(namesrv.addr, group, topic, FailsOnce())
    try:
        first, retry = sorted(wait_spans(spans, f"process {topic}", 2, 30), key=lambda s: s.start_time)
    finally:
        consumer.shutdown()

    # The broker stored it: a child of the producer's send.
    stored = one(otlp_receiver, trace_id, "rocketmesh-broker", f"send {topic}")
    assert (stored.kind, stored.parent_span_id) == (SERVER, send_id)
    # The scheduler delivered it when level 1 was due: a child of the send, the first process span its child.
    delivery = one(otlp_receiver, trace_id, "rocketmesh-scheduler", f"send {topic}")
    assert (delivery.kind, delivery.parent_span_id) == (PRODUCER, send_id)
    assert delivery.attributes[sc.MESSAGING_SYSTEM] == "rocketmq"
    assert delivery.attributes[sc.OPERATION_TYPE] == "send"
    assert delivery.attributes[sc.DESTINATION_NAME] == topic
    assert delivery.attributes[sc.MESSAGE_ID] == sent.msg_id
    assert delivery.attributes[sc.ROCKETMQ_MESSAGE_TYPE] == "delay"
    assert delivery.attributes[sc.ROCKETMQ_DELAY_TIME_LEVEL] == 1
    assert delivery.attributes[sc.SERVER_ADDRESS] == broker.addr.rpartition(":")[0]
    assert hex_id(first) == (trace_id, hex_id(first)[1]) and parent_of(first) == delivery.span_id
    # The listener asked for a retry: the broker took the send-back as a child of the first process span ...
    send_back = one(otlp_receiver, trace_id, "rocketmesh-broker", f"settle {topic}")
    assert (send_back.kind, send_back.parent_span_id) == (SERVER, hex_id(first)[1])
    assert send_back.attributes[sc.CONSUMER_GROUP_NAME] == group
    # ... the scheduler re-delivered it through %RETRY% in the same trace, and the retry was processed there.
    redelivery = one(otlp_receiver, trace_id, "rocketmesh-scheduler", f"send %RETRY%{group}")
    assert (redelivery.kind, redelivery.parent_span_id) == (PRODUCER, delivery.span_id)
    assert redelivery.attributes[sc.MESSAGE_ID] == sent.msg_id
    assert hex_id(retry)[0] == trace_id and parent_of(retry) == redelivery.span_id
    for span in (first, retry):
        assert span.attributes[sc.DESTINATION_NAME] == topic  # what the listener sees, not %RETRY%
        assert span.attributes[sc.CONSUMER_GROUP_NAME] == group
        assert span.attributes[sc.MESSAGE_ID] == sent.msg_id
        assert span.attributes[sc.ROCKETMQ_MESSAGE_TAG] == "TagA"


class ChecksBack:
    """Leaves every transaction open; commits each when the broker asks."""

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


def test_a_transaction_settled_by_check_back_is_one_trace(
        otlp_receiver: OtlpReceiver, namesrv, broker, txn_checker, admin, spans: InMemorySpanExporter):
    topic, group = "E2ETx", "e2e-tx-c"
    make_topic(admin, topic, 1)
    got: list[str] = []
    consumer = consume(namesrv.addr, group, topic, lambda msgs: got.extend(m.body.decode() for m in msgs)
                       or ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    try:
        with TransactionProducer("e2e-tx-p", namesrv.addr, ChecksBack(), **FAST_CLIENT) as producer:
            sent = producer.send_message_in_transaction(Message(topic, "checked", keys="tx-1"))
            [check] = wait_spans(spans, f"check {topic}", 1, 30)
        [process] = wait_spans(spans, f"process {topic}", 1, 30)
    finally:
        consumer.shutdown()
    assert got == ["checked"]
    [send] = named(spans, f"send {topic}")
    trace_id, send_id = hex_id(send)

    # The txn-checker asked the broker to check the half message, as a child of its send ...
    asked = one(otlp_receiver, trace_id, "rocketmesh-txn-checker", f"check {topic}")
    assert (asked.kind, asked.parent_span_id) == (CLIENT, send_id)
    assert asked.attributes[sc.OPERATION_TYPE] == "settle"
    assert asked.attributes[sc.MESSAGE_ID] == sent.msg_id
    assert asked.attributes[sc.ROCKETMQ_MESSAGE_TYPE] == "transaction"
    assert asked.attributes["messaging.rocketmq.transaction.check_outcome"] == "CHECKED"
    # ... the broker handled it as the checker's child and pushed the check to the producer, whose check span
    # (a child of the send) links to the broker's ...
    handled = one(otlp_receiver, trace_id, "rocketmesh-broker", "check")
    assert (handled.kind, handled.parent_span_id) == (SERVER, asked.span_id)
    assert hex_id(check)[0] == trace_id and parent_of(check) == send_id
    assert [f"{link.context.span_id:016x}" for link in check.links] == [handled.span_id]
    # ... the producer's END_TRANSACTION after the send (UNKNOW) was handled as its settle span's child, and the
    # one after the check (COMMIT) as the check span's ...
    [settle] = named(spans, f"settle {topic}")
    ended = otlp_receiver.wait_for(lambda s: s.trace_id == trace_id and s.name == "end_transaction", 2)
    assert sorted((s.kind, s.parent_span_id) for s in ended) == sorted(
        [(SERVER, hex_id(settle)[1]), (SERVER, hex_id(check)[1])])
    # ... and the committed message was processed in the same trace.
    assert hex_id(process)[0] == trace_id
    assert process.attributes[sc.MESSAGE_ID] == sent.msg_id
