"""The client SDK's spans against real processes: the application (this test process) configures an
OpenTelemetry SDK with an in-memory exporter; a message's send, its stored ``traceparent``, each process span
of it (also through %RETRY%, a delay level, a timer, a batch and a transaction; a dead letter keeps it) and a
PullConsumer's receive share one trace. Without an SDK, nothing is written into messages.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from clientkit import FAST_CLIENT, make_topic
from procs import FAST_BROKER, FAST_CHECKER, TxnCheckerProcess, wait_for
from rocketmesh import LocalTransactionState, Message, MQError, Producer, TransactionProducer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PullConsumer, PushConsumer
from rocketmesh.model.message import MessageConst, MessageExt, MessageQueue
from rocketmesh.telemetry import semconv as sc
from tracekit import named, traceparent, wait_spans

LEVELS = "1s 1s 1s 3s 5s"  # the first retry (level 3) after 1 s
BROKER_ARGS = dict(FAST_BROKER, messageDelayLevel=LEVELS)
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
TRACEPARENT = MessageConst.TRACE_CONTEXT


class Recorder:
    """A listener that records each delivery's topic and current span, failing the first ``fail_first``."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.lock = threading.Lock()
        self.got: list[tuple[str, int, str]] = []  # (topic, current span id, body)

    def __call__(self, msgs: list[MessageExt]) -> object:
        with self.lock:
            for m in msgs:
                self.got.append((m.topic, trace.get_current_span().get_span_context().span_id, m.body.decode()))
            if len(self.got) <= self.fail_first:
                return LATER
        return SUCCESS


def push_consumer(namesrv: str, group: str, topic: str, listener: Recorder) -> PushConsumer:
    c = PushConsumer(group, namesrv, instance_name=group, consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT)
    c.subscribe(topic, "*")
    c.register_listener(listener)
    return c.start()


def test_a_send_and_both_deliveries_of_a_retried_message_share_one_trace(namesrv, broker, scheduler, admin, spans):
    topic = "TraceRetry"
    make_topic(admin, topic, 1)
    with Producer("trace-p", namesrv.addr, **FAST_CLIENT) as producer:
        result = producer.send(Message(topic, "once-failed", tags="TagA", keys=["k1", "k2"]))
    [send] = named(spans, f"send {topic}")
    assert send.kind is SpanKind.PRODUCER and send.status.status_code is StatusCode.UNSET
    attrs = send.attributes
    assert attrs[sc.MESSAGING_SYSTEM] == "rocketmq"
    assert attrs[sc.OPERATION_TYPE] == "send"
    assert attrs[sc.DESTINATION_NAME] == topic
    assert attrs[sc.MESSAGE_ID] == result.msg_id
    assert attrs[sc.ROCKETMQ_MESSAGE_TAG] == "TagA"
    assert tuple(attrs[sc.ROCKETMQ_MESSAGE_KEYS]) == ("k1", "k2")
    assert attrs[sc.ROCKETMQ_MESSAGE_TYPE] == "normal"
    assert attrs[sc.ROCKETMQ_CLIENT_GROUP] == "trace-p"
    assert attrs[sc.SERVER_ADDRESS] == broker.addr.rpartition(":")[0]
    assert attrs[sc.SERVER_PORT] == int(broker.addr.rpartition(":")[2])
    # Stored with the message: whoever reads it later joins the trace.
    assert admin.view_message(result.offset_msg_id).properties[TRACEPARENT] == traceparent(send)

    listener = Recorder(fail_first=1)
    consumer = push_consumer(namesrv.addr, "trace-c", topic, listener)
    try:
        first, retry = sorted(wait_spans(spans, f"process {topic}", 2), key=lambda s: s.start_time)
    finally:
        consumer.shutdown()
    for span in (first, retry):
        assert span.kind is SpanKind.CONSUMER
        assert span.context.trace_id == send.context.trace_id
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        assert span.attributes[sc.CONSUMER_GROUP_NAME] == "trace-c"
        assert span.attributes[sc.MESSAGE_ID] == result.msg_id
        assert span.attributes[sc.DESTINATION_NAME] == topic  # the retry's too: not %RETRY%trace-c
        assert span.attributes[sc.ROCKETMQ_MESSAGE_TAG] == "TagA"
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes[sc.ERROR_TYPE] == "RECONSUME_LATER"
    assert retry.status.status_code is StatusCode.UNSET
    # The listener ran with its process span current.
    assert [(t, sid) for t, sid, _ in listener.got] == [(topic, first.context.span_id), (topic, retry.context.span_id)]


def test_a_delayed_message_and_a_batch_keep_their_send_trace(namesrv, broker, scheduler, admin, spans):
    topic = "TraceDelayBatch"
    make_topic(admin, topic, 1)
    with Producer("trace-delay-p", namesrv.addr, **FAST_CLIENT) as producer:
        delayed = producer.send(Message(topic, "late", delay_level=1))
        batch = producer.send_batch([Message(topic, f"b{i}") for i in range(3)])
    sends = named(spans, f"send {topic}")
    assert len(sends) == 2
    [delay_send] = [s for s in sends if s.attributes.get(sc.ROCKETMQ_MESSAGE_TYPE) == "delay"]
    [batch_send] = [s for s in sends if sc.BATCH_MESSAGE_COUNT in s.attributes]
    assert delay_send.attributes[sc.ROCKETMQ_DELAY_TIME_LEVEL] == 1
    assert delay_send.attributes[sc.MESSAGE_ID] == delayed.msg_id
    assert batch_send.attributes[sc.BATCH_MESSAGE_COUNT] == 3
    for offset_id in batch.offset_msg_id.split(","):
        assert admin.view_message(offset_id).properties[TRACEPARENT] == traceparent(batch_send)

    listener = Recorder()
    consumer = push_consumer(namesrv.addr, "trace-delay-c", topic, listener)
    try:
        processed = wait_spans(spans, f"process {topic}", 4)
    finally:
        consumer.shutdown()
    by_body = {body: sid for _, sid, body in listener.got}
    parents = {s.context.span_id: s.parent.span_id for s in processed}
    assert parents[by_body["late"]] == delay_send.context.span_id
    assert {parents[by_body[f"b{i}"]] for i in range(3)} == {batch_send.context.span_id}
    assert {s.context.trace_id for s in processed if s.context.span_id == by_body["late"]} == \
        {delay_send.context.trace_id}


def test_a_timer_message_and_a_dead_letter_keep_their_send_trace(namesrv, broker, scheduler, admin, spans):
    """A timer message (delay_ms) is processed in its send's trace once the scheduler delivers it; a message
    whose group gives up on it (max_reconsume_times=0) lands in %DLQ%<group> carrying its send's context."""
    topic = "TraceTimerDlq"
    make_topic(admin, topic, 1)
    with Producer("trace-timer-p", namesrv.addr, **FAST_CLIENT) as producer:
        producer.send(Message(topic, "timed", delay_ms=1000))
        doomed = producer.send(Message(topic, "doomed", keys="doomed-key"))
    sends = {s.attributes.get(sc.MESSAGE_ID): s for s in named(spans, f"send {topic}")}
    doomed_send = sends.pop(doomed.msg_id)
    [timed_send] = sends.values()
    assert timed_send.attributes[sc.ROCKETMQ_MESSAGE_TYPE] == "delay"

    class FailsDoomed(Recorder):
        def __call__(self, msgs: list[MessageExt]) -> object:
            super().__call__(msgs)
            return LATER if msgs[0].body == b"doomed" else SUCCESS

    listener = FailsDoomed()
    group = "trace-timer-c"
    consumer = PushConsumer(group, namesrv.addr, instance_name=group, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            max_reconsume_times=0, **FAST_CLIENT)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    consumer.start()
    try:
        wait_for(lambda: "timed" in {body for _, _, body in listener.got}, 20, "the timer message's delivery")
        dead = wait_for(lambda: admin.query_msg_by_key(f"%DLQ%{group}", "doomed-key"), 20, "the dead letter")
    finally:
        consumer.shutdown()
    [timed_span] = [sid for _, sid, body in listener.got if body == "timed"]
    processed = {s.context.span_id: s for s in named(spans, f"process {topic}")}
    assert processed[timed_span].parent.span_id == timed_send.context.span_id
    assert processed[timed_span].context.trace_id == timed_send.context.trace_id
    assert dead[0].properties[TRACEPARENT] == traceparent(doomed_send)


class TxListener:
    """Leaves "check-me" open (the checker asks later), commits everything else."""

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        if msg.keys == "check-me":
            return LocalTransactionState.UNKNOW
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


def test_a_transactional_message_is_settled_and_checked_in_its_send_trace(
        namesrv, broker, admin, start_txn_checker: Callable[..., TxnCheckerProcess], spans):
    topic = "TraceTx"
    make_topic(admin, topic, 1)
    start_txn_checker(namesrv.addr, **FAST_CHECKER)
    listener = Recorder()
    consumer = push_consumer(namesrv.addr, "trace-tx-c", topic, listener)
    try:
        with TransactionProducer("trace-tx-p", namesrv.addr, TxListener(), **FAST_CLIENT) as producer:
            committed = producer.send_message_in_transaction(Message(topic, "now", keys="commit-me"))
            checked = producer.send_message_in_transaction(Message(topic, "later", keys="check-me"))
            [check] = wait_spans(spans, f"check {topic}", 1)
        processed = wait_spans(spans, f"process {topic}", 2)
    finally:
        consumer.shutdown()
    sends = {s.attributes[sc.MESSAGE_ID]: s for s in named(spans, f"send {topic}")}
    assert {s.attributes[sc.ROCKETMQ_MESSAGE_TYPE] for s in sends.values()} == {"transaction"}
    settles = {s.attributes[sc.MESSAGE_ID]: s for s in named(spans, f"settle {topic}")}
    for result, state in ((committed, "COMMIT_MESSAGE"), (checked, "UNKNOW")):
        send, settle = sends[result.msg_id], settles[result.msg_id]
        assert settle.parent.span_id == send.context.span_id
        assert settle.attributes["messaging.rocketmq.transaction.state"] == state
    # The check-back the broker pushed runs in the half message's trace.
    assert check.kind is SpanKind.CONSUMER
    assert check.context.trace_id == sends[checked.msg_id].context.trace_id
    assert check.attributes["messaging.rocketmq.transaction.state"] == "COMMIT_MESSAGE"
    by_body = {body: sid for _, sid, body in listener.got}
    traces = {s.context.span_id: s.context.trace_id for s in processed}
    assert traces[by_body["now"]] == sends[committed.msg_id].context.trace_id
    assert traces[by_body["later"]] == sends[checked.msg_id].context.trace_id


def test_async_oneway_ordered_and_auto_batched_sends_each_have_a_span(namesrv, broker, admin, spans):
    topic = "TraceModes"
    make_topic(admin, topic, 1)
    with Producer("trace-modes-p", namesrv.addr, **FAST_CLIENT) as producer:
        async_result = producer.send_async(Message(topic, "async")).result(5)
        producer.send_oneway(Message(topic, "oneway"))
        fifo = producer.send(Message(topic, "fifo"), selector=lambda queues, msg, arg: queues[0])
    with Producer("trace-auto-p", namesrv.addr, auto_batch=True, **FAST_CLIENT) as producer:
        futures = [producer.send_async(Message(topic, f"auto{i}")) for i in range(5)]
        auto = [f.result(5) for f in futures]
    sends = wait_spans(spans, f"send {topic}", 8, 5)
    by_id = {s.attributes.get(sc.MESSAGE_ID): s for s in sends}
    assert by_id[async_result.msg_id].attributes[sc.ROCKETMQ_MESSAGE_TYPE] == "normal"
    assert by_id[fifo.msg_id].attributes[sc.ROCKETMQ_MESSAGE_TYPE] == "fifo"
    assert all(s.kind is SpanKind.PRODUCER and s.status.status_code is StatusCode.UNSET for s in sends)
    for result in auto:  # one span per send call, each message carrying its own
        stored = admin.view_message(result.offset_msg_id)
        assert stored.properties[TRACEPARENT] == traceparent(by_id[result.msg_id])


def test_a_failed_send_ends_its_span_with_an_error(namesrv, broker, admin, spans):
    topic = "TraceFail"
    make_topic(admin, topic, 1)
    with Producer("trace-fail-p", namesrv.addr, **FAST_CLIENT) as producer:
        with pytest.raises(MQError):
            producer.send(Message(topic, "x"), queue=MessageQueue(topic, "no-such-broker", 0))
    [send] = named(spans, f"send {topic}")
    assert send.status.status_code is StatusCode.ERROR
    assert send.attributes[sc.ERROR_TYPE]


def test_a_pull_consumer_receives_in_a_span_linked_to_the_send(namesrv, broker, admin, spans):
    topic = "TracePull"
    make_topic(admin, topic, 1)
    with Producer("trace-pull-p", namesrv.addr, **FAST_CLIENT) as producer:
        producer.send(Message(topic, "pulled"))
    [send] = named(spans, f"send {topic}")
    with PullConsumer("trace-pull-c", namesrv.addr, instance_name="trace-pull-c",
                      consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT) as consumer:
        consumer.subscribe(topic)
        got: list[MessageExt] = []
        wait_for(lambda: got.extend(consumer.poll(500)) or got, 20, what="the message polled")
    receives = [s for s in named(spans, f"receive {topic}") if s.attributes.get(sc.BATCH_MESSAGE_COUNT)]
    assert receives, "no receive span with messages"
    receive = receives[0]
    assert receive.kind is SpanKind.CLIENT
    assert receive.attributes[sc.CONSUMER_GROUP_NAME] == "trace-pull-c"
    assert [link.context.span_id for link in receive.links] == [send.context.span_id]


NO_SDK_SENDER = """
import sys
from rocketmesh import Message, Producer
with Producer("trace-none-p", sys.argv[1]) as producer:
    msg = Message(sys.argv[2], "plain")
    result = producer.send(msg)
    print(result.offset_msg_id, "traceparent" in msg.properties,
          any(name.startswith("opentelemetry.sdk") for name in sys.modules))
"""


def test_without_an_sdk_no_traceparent_is_written(namesrv, broker, admin):
    """The client uses the OpenTelemetry API alone: without a provider it writes no context, and never
    loads the SDK."""
    topic = "TraceNone"
    make_topic(admin, topic, 1)
    # Its own process: this one has an SDK configured (the global provider cannot be unset).
    out = subprocess.run([sys.executable, "-c", NO_SDK_SENDER, namesrv.addr, topic], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    offset_id, written, sdk_loaded = out[-3], out[-2], out[-1]
    assert written == "False"
    assert sdk_loaded == "False"
    assert TRACEPARENT not in admin.view_message(offset_id).properties


SAMPLED_OUT_CONSUMER = """
import sys, threading
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
trace.set_tracer_provider(TracerProvider(sampler=ALWAYS_OFF))
from rocketmesh import Message, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.client.trace.tracing import current_traceparent
namesrv, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen, lock, done = {}, threading.Lock(), threading.Event()

def listener(msgs):
    inside = current_traceparent()
    with lock:
        seen[msgs[0].body.decode()] = (msgs[0].properties.get("traceparent"), inside)
        if len(seen) >= n:
            done.set()
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

consumer = PushConsumer("trace-sampled-out-g", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                        consume_thread_nums=4, pull_batch_size=64)
consumer.subscribe(topic, "*")
consumer.register_listener(listener)
consumer.start()
with Producer("trace-sampled-out-p", namesrv) as producer:
    for i in range(n):
        producer.send_async(Message(topic, str(i)))
done.wait(60)
consumer.shutdown()
for body, (sent, inside) in sorted(seen.items()):
    print(body, sent, inside)
"""


def test_under_an_sdk_that_samples_nothing_each_listener_call_is_in_its_own_message_s_trace(namesrv, broker, admin):
    """Four consume threads, hundreds of messages: each listener call sees the trace its message was sent in
    (with a span id of its own, not sampled), never another message's."""
    topic, n = "TraceSampledOut", 400
    make_topic(admin, topic, 1)
    out = subprocess.run([sys.executable, "-c", SAMPLED_OUT_CONSUMER, namesrv.addr, topic, str(n)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    assert sorted(int(body) for body, _, _ in rows) == list(range(n))
    trace_ids = set()
    for body, sent, inside in rows:
        _, sent_trace, sent_span, sent_flags = sent.split("-")
        _, inside_trace, inside_span, inside_flags = inside.split("-")
        assert inside_trace == sent_trace and inside_span != sent_span, (body, sent, inside)
        assert int(inside_flags, 16) & 1 == 0 and int(sent_flags, 16) & 1 == 0  # nothing sampled
        trace_ids.add(sent_trace)
    assert len(trace_ids) == n  # a trace of its own for each send
