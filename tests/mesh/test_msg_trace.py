"""RocketMQ's message trace against real processes: a producer and a push consumer with enable_msg_trace write
Pub / SubBefore / SubAfter records into RMQ_SYS_TRACE_TOPIC (which the broker creates), a pull consumer records
what its polls return, a transactional message adds an EndTransaction, and ``rocketmesh admin query-msg-trace-by-id``
(the real CLI) prints the message's life, a delay and a retried delivery included.
Without enable_msg_trace nothing is written.
"""

from __future__ import annotations

import threading

from clientkit import FAST_CLIENT, make_topic
from procs import run_cli, wait_for
from rocketmesh import Admin, LocalTransactionState, Message, Producer, TransactionProducer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PullConsumer, PushConsumer
from rocketmesh.client.trace.trace_data import ConsumeReturnType, TraceMessageType, TraceRecord, TraceType
from rocketmesh.model.message import MessageExt
from rocketmesh.model.topics import TRACE_TOPIC

SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def trace_of(admin: Admin, msg_id: str, *types: TraceType, trace_topic: str | None = None) -> list[TraceRecord]:
    """The message's trace records, once every one of ``types`` is among them."""
    def found() -> list[TraceRecord]:
        records = admin.query_msg_trace(msg_id, trace_topic)
        return records if set(types) <= {r.type for r in records} else []
    return wait_for(found, 15, f"trace records {[t.value for t in types]} of {msg_id}")  # type: ignore[return-value]


def test_send_and_consume_are_traced_and_the_cli_prints_them(namesrv, broker, admin) -> None:
    make_topic(admin, "TraceOrders", 1)
    done = threading.Event()
    seen: list[MessageExt] = []

    def listener(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        seen.extend(msgs)
        if msgs[0].keys == "boom":
            raise RuntimeError("listener failed")
        done.set()
        return SUCCESS

    consumer = PushConsumer("trace-consumer", namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            enable_msg_trace=True, **FAST_CLIENT)
    consumer.subscribe("TraceOrders")
    consumer.register_listener(listener)
    with Producer("trace-producer", namesrv.addr, enable_msg_trace=True) as producer:
        result = producer.send(Message("TraceOrders", b"order 1", tags="TagA", keys="order-1"))
        failing = producer.send_async(Message("TraceOrders", b"order 2", keys="boom")).result(5)
    with consumer:
        assert done.wait(15)

        records = trace_of(admin, result.msg_id, TraceType.Pub, TraceType.SubBefore, TraceType.SubAfter)
        pub = next(r for r in records if r.type is TraceType.Pub)
        assert (pub.group, pub.topic, pub.tags, pub.keys, pub.success) == (
            "trace-producer", "TraceOrders", "TagA", "order-1", True)
        assert (pub.offset_msg_id, pub.msg_type, pub.body_length) == (result.offset_msg_id,
                                                                      TraceMessageType.Normal_Msg, 7)
        assert pub.store_host and pub.client_host
        before = next(r for r in records if r.type is TraceType.SubBefore)
        after = next(r for r in records if r.type is TraceType.SubAfter)
        assert (before.group, before.retry_times, after.request_id) == ("trace-consumer", 0, before.request_id)
        assert (after.success, after.context_code) == (True, ConsumeReturnType.SUCCESS)
        # The offset id finds the Pub too.
        assert any(r.type is TraceType.Pub for r in admin.query_msg_trace(result.offset_msg_id))

        # A listener that raised: the async send's Pub, and a SubAfter that failed with EXCEPTION.
        failed = trace_of(admin, failing.msg_id, TraceType.Pub, TraceType.SubAfter)
        assert [(r.success, r.context_code) for r in failed if r.type is TraceType.SubAfter][0] == (
            False, ConsumeReturnType.EXCEPTION)

    cli = run_cli("admin", "query-msg-trace-by-id", "-n", namesrv.addr, "-i", result.msg_id, timeout=30)
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.splitlines()
    pub_line = next(line for line in lines if line.startswith("Pub "))
    assert "trace-producer" in pub_line and "success" in pub_line
    assert "topic TraceOrders" in cli.stdout and "keys [order-1]" in cli.stdout and "queue 0" in cli.stdout
    sub_line = next(line for line in lines if line.startswith("Sub "))
    assert "trace-consumer" in sub_line and "success" in sub_line

    cli = run_cli("admin", "query-msg-trace-by-id", "-n", namesrv.addr, "-i", failing.msg_id, timeout=30)
    assert "failed(EXCEPTION)" in next(line for line in cli.stdout.splitlines() if line.startswith("Sub "))


def test_a_delayed_message_failed_once_shows_its_delay_and_both_deliveries(namesrv, start_broker,
                                                                            start_scheduler) -> None:
    """The life query-msg-trace-by-id prints: sent as a delayed message, consumed and failed (retry 0), then
    consumed again from %RETRY% (retry 1) and succeeded."""
    start_broker(namesrv.addr, messageDelayLevel="1s 1s 1s")
    start_scheduler(namesrv.addr, rebalanceIntervalMs=1000, heartbeatBrokerIntervalMs=1000,
                    pollNameServerIntervalMs=1000)
    calls: list[int] = []
    done = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        calls.append(msgs[0].reconsume_times)
        if len(calls) == 1:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        done.set()
        return SUCCESS

    with Admin(namesrv.addr) as admin:
        make_topic(admin, "TraceLater", 1)
        consumer = PushConsumer("trace-later-c", namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                                enable_msg_trace=True, **FAST_CLIENT)
        consumer.subscribe("TraceLater")
        consumer.register_listener(listener)
        with Producer("trace-later-p", namesrv.addr, enable_msg_trace=True) as producer:
            sent = producer.send(Message("TraceLater", b"later", keys="later-1", delay_level=1))
        with consumer:
            assert done.wait(30), f"deliveries so far: {calls}"

            def both_outcomes() -> list[TraceRecord]:
                records = admin.query_msg_trace(sent.msg_id)
                return records if sum(r.type is TraceType.SubAfter for r in records) >= 2 else []
            records = wait_for(both_outcomes, 15, "both SubAfter records")
    assert next(r for r in records if r.type is TraceType.Pub).msg_type is TraceMessageType.Delay_Msg
    befores = {r.request_id: r for r in records if r.type is TraceType.SubBefore}
    outcomes = sorted((befores[r.request_id].retry_times, r.success) for r in records
                      if r.type is TraceType.SubAfter)
    assert outcomes == [(0, False), (1, True)]

    cli = run_cli("admin", "query-msg-trace-by-id", "-n", namesrv.addr, "-i", sent.msg_id, timeout=30)
    assert cli.returncode == 0, cli.stderr
    assert "delayed message" in cli.stdout
    subs = sorted(line.split()[-1] for line in cli.stdout.splitlines() if line.startswith("Sub "))
    assert subs == ["0", "1"], cli.stdout


def test_a_pull_consumer_records_what_its_polls_return(namesrv, broker, admin) -> None:
    make_topic(admin, "TracePolled", 1)
    with Producer("poll-producer", namesrv.addr) as producer:
        result = producer.send(Message("TracePolled", b"polled", keys="poll-1"))
    with PullConsumer("trace-poller", namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET", enable_msg_trace=True,
                      **FAST_CLIENT) as consumer:
        consumer.subscribe("TracePolled")
        got = wait_for(lambda: consumer.poll(timeout_ms=500), 15, "the message polled")
    assert [m.unique_key for m in got] == [result.msg_id]
    # Shut down: what was queued has been flushed.
    records = trace_of(admin, result.msg_id, TraceType.SubBefore, TraceType.SubAfter)
    before = next(r for r in records if r.type is TraceType.SubBefore)
    after = next(r for r in records if r.type is TraceType.SubAfter)
    assert (before.group, before.keys, before.retry_times) == ("trace-poller", "poll-1", 0)
    assert (after.request_id, after.success, after.context_code) == (before.request_id, True,
                                                                     ConsumeReturnType.SUCCESS)


class Commit:
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


def test_a_transactional_message_shows_its_end_transaction(namesrv, broker, admin) -> None:
    make_topic(admin, "TraceTx", 1)
    with TransactionProducer("trace-tx", namesrv.addr, Commit(), enable_msg_trace=True, trace_topic="MyTrace",
                             **FAST_CLIENT) as producer:
        result = producer.send_message_in_transaction(Message("TraceTx", b"pay", keys="pay-1"))
    # Shut down: what was queued has been flushed.
    records = trace_of(admin, result.msg_id, TraceType.Pub, TraceType.EndTransaction, trace_topic="MyTrace")
    pub = next(r for r in records if r.type is TraceType.Pub)
    end = next(r for r in records if r.type is TraceType.EndTransaction)
    assert (pub.group, pub.msg_type) == ("trace-tx", TraceMessageType.Trans_Msg_Half)
    assert (end.group, end.topic, end.transaction_state, end.from_transaction_check, end.transaction_id) == (
        "trace-tx", "TraceTx", "COMMIT_MESSAGE", False, result.msg_id)

    cli = run_cli("admin", "query-msg-trace-by-id", "-n", namesrv.addr, "-i", result.msg_id, "-t", "MyTrace",
                  timeout=30)
    assert cli.returncode == 0, cli.stderr
    end_line = next(line for line in cli.stdout.splitlines() if line.startswith("EndTransaction "))
    assert "trace-tx" in end_line and "COMMIT_MESSAGE" in end_line
    assert "transactional (half) message" in cli.stdout


def test_without_enable_msg_trace_nothing_is_written(namesrv, broker, admin) -> None:
    make_topic(admin, "TraceOff", 1)
    route = admin.wait_topic_route(TRACE_TOPIC)  # the broker creates the trace topic at start
    assert route.queue_datas
    with Producer("untraced-producer", namesrv.addr) as producer:
        result = producer.send(Message("TraceOff", b"quiet"))
    assert all(o.max_offset == 0 for o in admin.topic_status(TRACE_TOPIC).values())
    cli = run_cli("admin", "query-msg-trace-by-id", "-n", namesrv.addr, "-i", result.msg_id, timeout=30)
    assert cli.returncode == 0 and "no trace of message" in cli.stdout, cli.stderr
