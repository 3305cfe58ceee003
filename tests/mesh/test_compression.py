"""Compressed message bodies through real name server, broker, scheduler and txn-checker processes (black box).

What a user checks: a large body sent with the Producer is stored zlib-compressed with sysFlag bit 0, as
RocketMQ's producers store it, and every reader hands back the bytes that were sent (push and pull
consumers, admin view and query); a small one is stored as it is; a SEND_MESSAGE built as a RocketMQ client
builds it, with sysFlag 1 and a zlib body, is consumed inflated, and one whose body does not inflate is
reported while the consumer goes on with its other queues; and the broker's copies of a compressed message
(a delay level's delivery, a retry, a dead letter, a transaction's commit) reach the consumer once, as sent.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable

from clientkit import FAST_CLIENT, make_topic, quietly
from procs import FAST_BROKER, FAST_CHECKER, wait_for
from rocketmesh import LocalTransactionState, Message, TransactionProducer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PullConsumer, PushConsumer
from rocketmesh.model.codec import decode_message_id, decode_record
from rocketmesh.model.message import MessageExt, SysFlag
from rocketmesh.remoting import RequestCode, ResponseCode, request

#: Short delay levels: level 1 (a delayed message) and level 3 (the first retry) each wait 1 s.
BROKER_ARGS = dict(FAST_BROKER, messageDelayLevel="1s 1s 1s 3s 5s")
COMPRESSED = int(SysFlag.COMPRESSED)
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER
COMMIT = LocalTransactionState.COMMIT_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW


def body(name: str, size: int = 10 * 1024) -> bytes:
    """``size`` bytes that begin with ``name``: compressible, as most large bodies are, and told apart."""
    return (name.encode() + b":" + b"".join(b"%06d,order line,EUR,12.50;" % i for i in range(size // 20 + 1)))[:size]


class Arrivals:
    """A push consumer's listener: every message it got, per key; answers with ``decide(key, attempt)``."""

    def __init__(self, decide: Callable[[str, int], ConsumeConcurrentlyStatus] = lambda key, attempt: SUCCESS):
        self.decide = decide
        self.lock = threading.Lock()
        self.got: dict[str, list[MessageExt]] = {}

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        answer = SUCCESS
        for m in msgs:
            key = m.keys or ""
            with self.lock:
                seen = self.got.setdefault(key, [])
                seen.append(m)
                attempt = len(seen)
            if self.decide(key, attempt) is LATER:
                answer = LATER
        return answer

    def of(self, key: str) -> list[MessageExt]:
        with self.lock:
            return list(self.got.get(key, []))

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {k: len(v) for k, v in self.got.items()}


def push_consumer(namesrv: str, group: str, topic: str, listener: Arrivals, **kw: object) -> PushConsumer:
    c = PushConsumer(group, namesrv, instance_name=group, consume_from="CONSUME_FROM_FIRST_OFFSET",
                     rebalance_interval_ms=1000, **FAST_CLIENT, **kw)
    c.subscribe(topic, "*")
    c.register_listener(listener)
    return c.start()


def poll_all(namesrv: str, group: str, topic: str, n: int) -> list[MessageExt]:
    """What a PullConsumer of a new group reads of ``topic``: its first ``n`` messages."""
    got: list[MessageExt] = []
    with PullConsumer(group, namesrv, instance_name=group, consume_from="CONSUME_FROM_FIRST_OFFSET",
                      **FAST_CLIENT) as c:
        c.subscribe(topic)
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got.extend(c.poll(timeout_ms=500))
    return got


def test_a_large_body_is_stored_compressed_and_every_reader_gets_the_bytes_sent(namesrv, broker, admin, producer):
    topic = "ZipT"
    make_topic(admin, topic, 2)
    big, small = body("big"), body("small", 1024)
    sent_big = producer.send(Message(topic, big, keys="big"))
    sent_small = producer.send(Message(topic, small, keys="small"))

    # The stored records, by their offset message ids: the large one compressed (sysFlag bit 0, a record
    # smaller than its body), the small one as it was sent.
    stored_big, stored_small = admin.view_message(sent_big.offset_msg_id), admin.view_message(sent_small.offset_msg_id)
    assert stored_big.body == big and stored_big.sys_flag & COMPRESSED and stored_big.store_size < len(big) // 2
    assert stored_small.body == small and stored_small.sys_flag == 0 and stored_small.store_size > len(small)
    assert [m.body for m in admin.query_msg_by_key(topic, "big")] == [big]
    # What a RocketMQ consumer reads off the wire: the stored body is a zlib stream of the bytes sent.
    _, _, offset = decode_message_id(sent_big.offset_msg_id)
    raw = decode_record(admin.api.view_message(broker.addr, offset, 3000), inflate=False)
    assert raw.sys_flag & COMPRESSED and zlib.decompress(raw.body) == big

    arrivals = Arrivals()
    c = push_consumer(namesrv.addr, "zip-push", topic, arrivals)
    try:
        wait_for(lambda: arrivals.counts() == {"big": 1, "small": 1}, 20, what="both messages pushed")
    finally:
        c.shutdown()
    [pushed_big], [pushed_small] = arrivals.of("big"), arrivals.of("small")
    assert pushed_big.body == big and pushed_big.sys_flag & COMPRESSED and pushed_big.msg_id == sent_big.offset_msg_id
    assert pushed_small.body == small and pushed_small.sys_flag == 0

    pulled = {m.keys: m for m in poll_all(namesrv.addr, "zip-pull", topic, 2)}
    assert pulled["big"].body == big and pulled["big"].sys_flag & COMPRESSED
    assert pulled["small"].body == small and pulled["small"].sys_flag == 0


def test_a_send_message_with_sysflag_1_and_a_zlib_body_as_rocketmq_clients_send_it_is_consumed_inflated(
        namesrv, broker, admin, remoting_client):
    topic = "ZipRawT"
    make_topic(admin, topic, 1)
    original = body("raw")
    # SEND_MESSAGE as RocketMQ's producer writes it: the header's long field names, sysFlag 1 (COMPRESSED),
    # the body deflated with a zlib header (java.util.zip.Deflater; any level).
    header = {"producerGroup": "rocketmq-producer", "topic": topic, "defaultTopic": "TBW102",
              "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 1, "bornTimestamp": int(time.time() * 1000),
              "flag": 0, "properties": "KEYS\x01raw\x02UNIQ_KEY\x010A0000010001000000000000000000AA\x02",
              "reconsumeTimes": 0, "unitMode": False, "batch": False}
    resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.SEND_MESSAGE, header,
                                                            zlib.compress(original, 9)), 3000)
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    [got] = poll_all(namesrv.addr, "zip-raw", topic, 1)
    assert got.body == original and got.sys_flag == 1 and got.keys == "raw"
    assert got.unique_key == "0A0000010001000000000000000000AA"


def test_a_compressed_flag_on_a_body_that_does_not_inflate_stops_only_its_queue(
        namesrv, broker, admin, producer, remoting_client, caplog):
    topic = "ZipBadT"
    make_topic(admin, topic, 2)
    header = {"producerGroup": "rocketmq-producer", "topic": topic, "queueId": 0, "sysFlag": 1,
              "bornTimestamp": int(time.time() * 1000), "properties": "KEYS\x01bad\x02"}
    resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.SEND_MESSAGE, header,
                                                            b"raw bytes under a compressed flag"), 3000)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    queue1 = next(mq for mq in producer.message_queues(topic) if mq.queue_id == 1)
    arrivals = Arrivals()
    c = push_consumer(namesrv.addr, "zip-bad", topic, arrivals)
    try:
        producer.send(Message(topic, body("good"), keys="good"), queue=queue1)
        wait_for(lambda: arrivals.counts().get("good") == 1, 20, what="the other queue's message consumed")
        # The consumer reports the corrupt record and goes on serving its other queue; the bad one is never
        # handed to the listener as something it is not.
        wait_for(lambda: "flagged compressed" in caplog.text, 10, what="the corrupt record reported")
        producer.send(Message(topic, body("later"), keys="later"), queue=queue1)
        wait_for(lambda: arrivals.counts().get("later") == 1, 20, what="a later message consumed")
        assert "bad" not in arrivals.counts() and c.running
        assert [m.body for m in arrivals.of("good")] == [body("good")]
    finally:
        c.shutdown()


def test_compressed_messages_arrive_once_as_sent_after_a_delay_a_retry_and_from_the_dlq(
        namesrv, broker, scheduler, admin, producer):
    topic = "ZipRetryT"
    group = "zip-retry"
    make_topic(admin, topic, 1)
    healed = threading.Event()

    def decide(key: str, attempt: int) -> ConsumeConcurrentlyStatus:
        if key == "retried" and attempt == 1:
            return LATER
        if key == "poison" and not healed.is_set():
            return LATER
        return SUCCESS

    arrivals = Arrivals(decide)
    bodies = {key: body(key) for key in ("delayed", "retried", "poison")}
    c = push_consumer(namesrv.addr, group, topic, arrivals, max_reconsume_times=1)
    try:
        sent = {key: producer.send(Message(topic, b, keys=key, delay_level=1 if key == "delayed" else 0))
                for key, b in bodies.items()}
        letters = wait_for(quietly(lambda: admin.dlq_messages(group)), 30, what="the poison message dead-lettered")
        wait_for(lambda: arrivals.counts() == {"delayed": 1, "retried": 2, "poison": 2}, 20,
                 what=f"every delivery (have {arrivals.counts()})")
        # The delayed message once, the retried one twice (first try, one retry), the poison one twice, then
        # dead-lettered: each time the bytes that were sent, from a copy that is stored compressed.
        for key, b in bodies.items():
            for m in arrivals.of(key):
                assert m.body == b and m.sys_flag & COMPRESSED, (key, m.topic, m.reconsume_times)
        assert [m.reconsume_times for m in arrivals.of("retried")] == [0, 1]
        delayed = arrivals.of("delayed")[0]
        assert delayed.store_timestamp - delayed.born_timestamp >= 1000

        # Every stored copy of the retried message (original, parked, retry topic) is compressed and reads back.
        history = admin.retry_history(sent["retried"].msg_id, group)
        assert [m.topic for m in history] == [topic, "SCHEDULE_TOPIC_XXXX", f"%RETRY%{group}"]
        assert all(m.body == bodies["retried"] and m.sys_flag & COMPRESSED for m in history)

        [letter] = letters
        assert letter.msg_id == sent["poison"].msg_id and letter.original_topic == topic
        assert letter.message.body == bodies["poison"] and letter.message.sys_flag & COMPRESSED
        # A resend is a new message: the admin's producer compresses it again; the consumer gets it once more.
        healed.set()
        [resent] = admin.resend_dlq(group, sent["poison"].msg_id)
        assert resent.sent is not None and resent.sent.ok
        wait_for(lambda: len(arrivals.of("poison")) == 3, 15, what="the resent message consumed")
        again = arrivals.of("poison")[-1]
        assert again.body == bodies["poison"] and again.sys_flag & COMPRESSED and again.reconsume_times == 0
        time.sleep(1.5)
        assert arrivals.counts() == {"delayed": 1, "retried": 2, "poison": 3}  # nothing more
    finally:
        c.shutdown()


class TxListener:
    """Commits at once (keys "commit") or leaves the outcome to a check, which commits; records the checks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked: list[MessageExt] = []

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return COMMIT if msg.keys == "commit" else UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked.append(msg)
        return COMMIT


def test_a_compressed_transactional_message_is_consumed_once_as_sent_after_commit_and_after_a_check(
        namesrv, broker, admin, start_txn_checker):
    topic = "ZipTxT"
    make_topic(admin, topic, 1)
    bodies = {"commit": body("tx-commit"), "check": body("tx-check")}
    listener = TxListener()
    arrivals = Arrivals()
    c = push_consumer(namesrv.addr, "zip-tx-consumer", topic, arrivals)
    try:
        with TransactionProducer("zip-tx", namesrv.addr, listener, instance_name="zip-tx", **FAST_CLIENT) as p:
            results = {key: p.send_message_in_transaction(Message(topic, b, keys=key)) for key, b in bodies.items()}
            assert results["commit"].local_transaction_state is COMMIT
            start_txn_checker(namesrv.addr, **FAST_CHECKER)
            wait_for(lambda: arrivals.counts() == {"commit": 1, "check": 1}, 30,
                     what=f"both transactions consumed (have {arrivals.counts()})")
        # The check was asked (once, or again if its answer came late) with the message as sent.
        assert listener.checked
        assert all((m.keys, m.body, m.topic) == ("check", bodies["check"], topic) for m in listener.checked)
        for key, b in bodies.items():
            [m] = arrivals.of(key)
            assert m.body == b and m.sys_flag & COMPRESSED and m.sys_flag & 0xC == SysFlag.TRANSACTION_COMMIT
            assert m.unique_key == results[key].msg_id
        time.sleep(1.5)
        assert arrivals.counts() == {"commit": 1, "check": 1}
    finally:
        c.shutdown()
