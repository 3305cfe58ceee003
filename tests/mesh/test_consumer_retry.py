"""Consumer retry and dead letters through real name server, broker and scheduler processes (black box):
CONSUMER_SEND_MSG_BACK, %RETRY% and %DLQ% topics, push consumers that fail, time out or give up, and the
admin's dead-letter listing, resend and retry history (SDK and CLI)."""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clientkit import FAST_CLIENT, make_topic, quietly
from procs import FAST_BROKER, BrokerProcess, run_cli, wait_for
from rocketmesh import Admin, Message, MQClientError, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, PushConsumer
from rocketmesh.model.codec import decode_message_id
from rocketmesh.model.message import MessageConst, MessageExt
from rocketmesh.remoting import RemotingClient, RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.headers import ConsumerSendMsgBackRequestHeader, PullMessageRequestHeader

StartBroker = Callable[..., BrokerProcess]
#: Short delay levels: the first retry (level 3) after 1 s, the second (level 4) after 3 s, then 5 s.
LEVELS = "1s 1s 1s 3s 5s"
BROKER_ARGS = dict(FAST_BROKER, messageDelayLevel=LEVELS)
FAST_CONSUMER = dict(FAST_CLIENT, rebalance_interval_ms=1000)
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


class Deliveries:
    """A listener recording each delivery (arrival time, topic, reconsume times, properties) per body; it
    answers with ``decide(body, attempt)``."""

    def __init__(self, decide: Callable[[str, int], object]) -> None:
        self.decide = decide
        self.lock = threading.Lock()
        self.got: dict[str, list[tuple[float, str, int, dict[str, str]]]] = {}

    def __call__(self, msgs: list[MessageExt]) -> object:
        answer = None
        for m in msgs:
            body = m.body.decode()
            with self.lock:
                seen = self.got.setdefault(body, [])
                seen.append((time.monotonic(), m.topic, m.reconsume_times, dict(m.properties)))
                attempt = len(seen)
            answer = self.decide(body, attempt)
        return answer

    def of(self, body: str) -> list[tuple[float, str, int, dict[str, str]]]:
        with self.lock:
            return list(self.got.get(body, []))


def push_consumer(namesrv: str, group: str, topic: str, listener, orderly: bool = False, **kw) -> PushConsumer:
    c = PushConsumer(group, namesrv, instance_name=group, consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CONSUMER,
                     **kw)
    c.subscribe(topic, "*")
    c.register_listener(listener, orderly=orderly)
    return c.start()


def send_back(client: RemotingClient, addr: str, **header) -> object:
    return client.invoke_sync(addr, request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                            ConsumerSendMsgBackRequestHeader(**header).to_ext()), 3000)


def cli(namesrv: str, *args: str) -> subprocess.CompletedProcess:
    """``rocketmesh admin <args> -n namesrv``."""
    return run_cli("admin", *args, "-n", namesrv)


# --- the broker's send-back ---

def test_send_back_retries_through_the_retry_topic_then_dead_letters_past_the_limit(
        namesrv, broker, scheduler, admin, producer, remoting_client):
    make_topic(admin, "SbT", 1)
    admin.update_subscription_group("sb-group", broker_addr=broker.addr, retry_max_times=1)
    sent = producer.send(Message("SbT", "payload", tags="TagA", keys="k1 k2", properties={"color": "red"}))
    _, _, offset = decode_message_id(sent.offset_msg_id)

    resp = send_back(remoting_client, broker.addr, offset=offset, group="sb-group", origin_msg_id=sent.offset_msg_id,
                     origin_topic="SbT")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    route = admin.wait_topic_route("%RETRY%sb-group")
    assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [(1, 1, 6)]

    # Parked at level 3 (1 s), then delivered to the retry topic by the scheduler.
    history = wait_for(quietly(lambda: (h := admin.retry_history(sent.msg_id, "sb-group"))
                               and any(m.topic == "%RETRY%sb-group" for m in h) and h), 15,
                       what="the retry delivered to %RETRY%sb-group")
    assert [(m.topic, m.reconsume_times) for m in history] == [
        ("SbT", 0), ("SCHEDULE_TOPIC_XXXX", 1), ("%RETRY%sb-group", 1)]
    original, parked, retry = history
    assert parked.properties[MessageConst.DELAY_TIME_LEVEL] == "3"
    assert retry.store_timestamp - parked.store_timestamp >= 1000
    assert retry.body == b"payload" and retry.tags == "TagA" and retry.keys == "k1 k2"
    props = retry.properties
    assert props["color"] == "red"
    assert props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == sent.msg_id
    assert props[MessageConst.RETRY_TOPIC] == "SbT"
    assert props[MessageConst.ORIGIN_MESSAGE_ID] == original.msg_id == sent.offset_msg_id
    assert props[MessageConst.RECONSUME_TIME] == "1"
    assert MessageConst.REAL_TOPIC not in props and MessageConst.DELAY_TIME_LEVEL not in props

    # Only messages a consumer was given can come back: not a parked record.
    resp = send_back(remoting_client, broker.addr, offset=parked.commitlog_offset, group="sb-group")
    assert resp.code == ResponseCode.SYSTEM_ERROR and "SCHEDULE_TOPIC_XXXX" in resp.remark

    # The retried copy fails again: 2 > the group's retryMaxTimes of 1, so it is dead-lettered.
    resp = send_back(remoting_client, broker.addr, offset=retry.commitlog_offset, group="sb-group",
                     origin_msg_id=retry.msg_id, origin_topic="SbT")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    dlq_route = admin.wait_topic_route("%DLQ%sb-group")
    assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in dlq_route.queue_datas] == [(1, 1, 2)]
    [letter] = wait_for(quietly(lambda: admin.dlq_messages("sb-group")), what="the dead letter listed")
    assert letter.msg_id == sent.msg_id and letter.original_topic == "SbT" and letter.reconsume_times == 2
    assert letter.origin_msg_id == sent.offset_msg_id and letter.message.keys == "k1 k2"
    assert letter.message.properties[MessageConst.RECONSUME_TIME] == "2"
    # Write-only for users: a pull of the dead-letter queue is refused.
    pull = request(RequestCode.PULL_MESSAGE, PullMessageRequestHeader("sb-group", "%DLQ%sb-group", 0, 0).to_ext())
    assert remoting_client.invoke_sync(broker.addr, pull, 3000).code == ResponseCode.NO_PERMISSION

    # The request's maxReconsumeTimes wins over the group's; a negative delay level dead-letters at once.
    resp = send_back(remoting_client, broker.addr, offset=offset, group="sb-group", max_reconsume_times=0)
    assert resp.code == ResponseCode.SUCCESS
    resp = send_back(remoting_client, broker.addr, offset=offset, group="sb-group", delay_level=-1,
                     max_reconsume_times=16)
    assert resp.code == ResponseCode.SUCCESS
    letters = wait_for(quietly(lambda: len(d := admin.dlq_messages("sb-group")) == 3 and d),
                       what="two more dead letters")
    assert [d.reconsume_times for d in letters] == [2, 1, 1]
    history = admin.retry_history(sent.offset_msg_id)
    assert [m.topic for m in history].count("%DLQ%sb-group") == 3
    info = admin.broker_runtime_info(broker.addr)
    assert (info["sendBackRetried"], info["sendBackDeadLettered"]) == (1, 3)


def test_send_back_errors_carry_rocketmq_codes(namesrv, broker, start_broker: StartBroker, remoting_client):
    resp = send_back(remoting_client, broker.addr, offset=123_456_789, group="sb-errors")
    assert resp.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in resp.remark
    resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "g"}), 3000)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "offset" in resp.remark
    resp = send_back(remoting_client, broker.addr, offset=0, group="bad group!")
    assert resp.code == ResponseCode.SYSTEM_ERROR
    strict = start_broker(namesrv.addr, name="broker-ro", autoCreateSubscriptionGroup="false", brokerPermission=4)
    resp = send_back(remoting_client, strict.addr, offset=0, group="nobody-home")
    assert resp.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    resp = send_back(remoting_client, strict.addr, offset=0, group="TOOLS_CONSUMER")
    assert resp.code == ResponseCode.NO_PERMISSION and "sending message is forbidden" in resp.remark


# --- push consumers ---

def test_a_failing_message_comes_back_with_growing_gaps_then_lands_in_the_dlq_and_resend_brings_it_back(
        namesrv, broker, scheduler, admin, producer):
    make_topic(admin, "FailT", 2)
    healed = threading.Event()

    def decide(body: str, attempt: int) -> object:
        if body == "raises" and attempt == 1:
            raise RuntimeError("a listener failure counts as RECONSUME_LATER")
        return SUCCESS if healed.is_set() or body != "poison" else LATER

    got = Deliveries(decide)
    c = push_consumer(namesrv.addr, "fail-group", "FailT", got, max_reconsume_times=2)
    try:
        sent = producer.send(Message("FailT", "poison", tags="TagP", keys="order-7", properties={"a": "1"}))
        producer.send(Message("FailT", "fine"))
        producer.send(Message("FailT", "raises"))
        letters = wait_for(quietly(lambda: admin.dlq_messages("fail-group")), 25, what="the message dead-lettered")
        seen = got.of("poison")
        # 1 + max_reconsume_times deliveries, each showing the original topic and how often it was retried.
        assert [(topic, times) for _, topic, times, _ in seen] == [("FailT", 0), ("FailT", 1), ("FailT", 2)]
        assert all(p[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == sent.msg_id for *_, p in seen)
        assert [p.get(MessageConst.RETRY_TOPIC) for *_, p in seen] == [None, "FailT", "FailT"]
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(seen)]
        assert gaps[0] >= 1.0 and gaps[1] >= 3.0 and gaps[1] > gaps[0], gaps
        assert len(got.of("fine")) == 1
        assert [(topic, times) for _, topic, times, _ in got.of("raises")] == [("FailT", 0), ("FailT", 1)]
        [letter] = letters
        assert (letter.msg_id, letter.original_topic, letter.reconsume_times) == (sent.msg_id, "FailT", 3)
        time.sleep(1.5)
        assert len(got.of("poison")) == 3  # nothing more after the dead letter

        listing = cli(namesrv.addr, "list-dlq", "-g", "fail-group")
        assert listing.returncode == 0, listing.stderr
        row = next(line for line in listing.stdout.splitlines() if line.startswith(sent.msg_id))
        assert row.split()[1:3] == ["FailT", "3"] and "'poison'" in row
        history = cli(namesrv.addr, "retry-history", "-i", sent.msg_id, "-g", "fail-group", "-t", "FailT")
        assert history.returncode == 0, history.stderr
        topics = [line.split()[0] for line in history.stdout.splitlines()[1:]]
        assert topics.count("FailT") == 1 and topics.count("%RETRY%fail-group") == 2
        assert topics.count("SCHEDULE_TOPIC_XXXX") == 2 and topics[-1] == "%DLQ%fail-group"

        missing = cli(namesrv.addr, "resend-dlq", "-g", "fail-group", "-i", "0" * 32)
        assert missing.returncode == 1 and "no message" in missing.stderr and "fail-group" in missing.stderr
        healed.set()
        resent = cli(namesrv.addr, "resend-dlq", "-g", "fail-group", "-i", sent.msg_id)
        assert resent.returncode == 0, resent.stderr
        assert "SEND_OK" in resent.stdout
        wait_for(lambda: len(got.of("poison")) == 4, 15, what="the resent message consumed")
        _, topic, times, props = got.of("poison")[-1]
        # A new message to the original topic: same tags, keys and user properties, a new id, no retry marks.
        assert (topic, times) == ("FailT", 0)
        assert props[MessageConst.TAGS] == "TagP" and props[MessageConst.KEYS] == "order-7" and props["a"] == "1"
        assert props[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] != sent.msg_id
        assert MessageConst.RETRY_TOPIC not in props and MessageConst.ORIGIN_MESSAGE_ID not in props
    finally:
        c.shutdown()


def test_group_retry_max_times_applies_when_the_consumer_sets_none(namesrv, broker, scheduler, admin, producer):
    make_topic(admin, "GroupMaxT", 1)
    admin.update_subscription_group("group-max", broker_addr=broker.addr, retry_max_times=1)
    got = Deliveries(lambda body, attempt: LATER)
    c = push_consumer(namesrv.addr, "group-max", "GroupMaxT", got)
    try:
        producer.send(Message("GroupMaxT", "twice"))
        wait_for(quietly(lambda: admin.dlq_messages("group-max")), 20, what="the message dead-lettered")
        assert [times for _, _, times, _ in got.of("twice")] == [0, 1]
    finally:
        c.shutdown()


def test_orderly_consumer_dead_letters_a_message_after_its_local_retries_and_moves_on(namesrv, broker, admin,
                                                                                        producer):
    make_topic(admin, "OrderDlqT", 1)
    order: list[str] = []

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        body = msgs[0].body.decode()
        order.append(body)
        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT if body == "bad" else ConsumeOrderlyStatus.SUCCESS

    c = push_consumer(namesrv.addr, "order-dlq", "OrderDlqT", listener, orderly=True, max_reconsume_times=2,
                      suspend_current_queue_time_ms=100)
    try:
        for body in ("m0", "bad", "m2"):
            producer.send(Message("OrderDlqT", body))
        wait_for(lambda: "m2" in order, 15, what="the queue moving on past the bad message")
        assert order == ["m0", "bad", "bad", "bad", "m2"]
        [letter] = wait_for(quietly(lambda: admin.dlq_messages("order-dlq")), what="the dead letter")
        assert letter.original_topic == "OrderDlqT" and letter.message.body == b"bad"
        wait_for(quietly(lambda: admin.consume_stats("order-dlq", "OrderDlqT").total_diff() == 0),
                 what="the offset committed past the dead letter")
    finally:
        c.shutdown()


def test_a_message_past_the_consume_timeout_is_retried_and_its_offset_moves_on(namesrv, broker, scheduler, admin,
                                                                                producer):
    make_topic(admin, "SlowT", 1)
    release = threading.Event()

    def decide(body: str, attempt: int) -> object:
        if body == "slow" and attempt == 1:
            release.wait(30)
        return SUCCESS

    got = Deliveries(decide)
    # 0.03 minutes: 1.8 s.
    c = push_consumer(namesrv.addr, "slow-group", "SlowT", got, consume_timeout=0.03, consume_thread_nums=2)
    try:
        producer.send(Message("SlowT", "slow"))
        wait_for(lambda: len(got.of("slow")) == 2, 20, what="the timed-out message retried")
        first, second = got.of("slow")
        assert second[0] - first[0] >= 1.8 + 1.0  # the timeout, then delay level 3
        assert (second[1], second[2]) == ("SlowT", 1)
        # Handed back, so the group's offset moved on while the first listener still runs.
        wait_for(quietly(lambda: admin.consume_stats("slow-group", "SlowT").total_diff() == 0),
                 what="the offset committed past the timed-out message")
        assert not release.is_set()
    finally:
        release.set()
        time.sleep(0.5)
        c.shutdown()
    assert len(got.of("slow")) == 2


def test_a_failed_send_back_keeps_the_message_and_retries_it_locally(namesrv, tmp_path: Path):
    # A broker that stopped taking writes (brokerPermission=4) refuses the send-back with NO_PERMISSION:
    # the consumer keeps the message and consumes it again itself.
    data = tmp_path / "ro-broker"
    first = BrokerProcess(data, namesrv.addr, **BROKER_ARGS).start(timeout_s=30)
    first.wait_registered()
    try:
        with Admin(namesrv.addr) as admin, Producer("ro-producer", namesrv.addr) as producer:
            make_topic(admin, "LocalT", 1)
            producer.send(Message("LocalT", "flaky"))
            producer.send(Message("LocalT", "next"))
    finally:
        first.stop()
    ro = BrokerProcess(data, namesrv.addr, port=first.port, brokerPermission=4, **BROKER_ARGS).start(timeout_s=30)
    try:
        ro.wait_registered()
        got = Deliveries(lambda body, attempt: LATER if body == "flaky" and attempt == 1 else SUCCESS)
        c = push_consumer(namesrv.addr, "local-group", "LocalT", got)
        # An orderly consumer whose dead-lettering fails keeps retrying in place: the queue waits, nothing skips.
        stuck: list[str] = []

        def orderly(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
            stuck.append(msgs[0].body.decode())
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

        o = push_consumer(namesrv.addr, "local-orderly", "LocalT", orderly, orderly=True, max_reconsume_times=1,
                          suspend_current_queue_time_ms=100)
        try:
            wait_for(lambda: len(got.of("flaky")) == 2, 20, what="the message consumed again locally")
            assert [(topic, times) for _, topic, times, _ in got.of("flaky")] == [("LocalT", 0), ("LocalT", 1)]
            assert len(got.of("next")) == 1
            wait_for(lambda: len(stuck) >= 5, 15, what="the orderly consumer retrying past its limit")
            assert set(stuck) == {"flaky"}
        finally:
            c.shutdown()
            o.shutdown()
    finally:
        ro.stop()


def test_consumer_settings_are_checked(namesrv):
    with pytest.raises(MQClientError, match="consume_timeout"):
        PushConsumer("cfg-group", namesrv.addr, consume_timeout=0)
    with pytest.raises(MQClientError, match="max_reconsume_times"):
        PushConsumer("cfg-group", namesrv.addr, max_reconsume_times=-2)


def test_retry_history_and_dlq_errors_are_clear(namesrv, broker, admin):
    with pytest.raises(MQClientError, match="not a message id"):
        admin.retry_history("nope")
    with pytest.raises(MQClientError, match="no stored copy"):
        admin.retry_history("0" * 32, "nobody")
    assert admin.dlq_messages("never-failed") == []
    with pytest.raises(MQClientError, match="holds no message"):
        admin.resend_dlq("never-failed")
    out = cli(namesrv.addr, "resend-dlq", "-g", "never-failed", "--all")
    assert out.returncode == 1 and "holds no message" in out.stderr
    out = cli(namesrv.addr, "list-dlq", "-g", "never-failed")
    assert out.returncode == 0 and "0 message(s)" in out.stdout
