"""An admin asks a running consumer through the broker (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY):
real name server and broker processes (the session's shared mesh: conftest.py's ``mesh_admin``), the SDK's
PushConsumer, Admin and ``rocketmesh admin`` (black box)."""

from __future__ import annotations

import threading
import time

import pytest

from clientkit import FAST_CLIENT, make_topic
from procs import run_cli, wait_for
from rocketmesh import Admin, Message, MQBrokerError, MQError, Producer
from rocketmesh.client import CMResult, ConsumerRunningInfo, ResponseCode
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.client.running_info import PROP_NAMESERVER_ADDR
from rocketmesh.model.message import MessageExt

GROUP = "callback-group"
TOPIC = "CallbackT"


class Recorder:
    """A listener that records what it is given; it raises while ``refuse`` is set."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[MessageExt] = []
        self.refuse = False

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with self.lock:
            self.seen.extend(msgs)
        if self.refuse:
            raise RuntimeError("the listener says no")
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def keys(self) -> list[str | None]:
        with self.lock:
            return [m.keys for m in self.seen]


def running_info(admin: Admin, client_id: str) -> ConsumerRunningInfo | None:
    try:
        return admin.consumer_running_info(GROUP, client_id)
    except MQError:
        return None


def test_an_admin_reads_a_push_consumers_running_info_and_has_it_consume_a_message(rocketmesh_namesrv: str,
        mesh_admin: Admin, mesh_producer: Producer) -> None:
    make_topic(mesh_admin, TOPIC, 2)
    sent = mesh_producer.send(Message(TOPIC, "direct me", tags="TagA", keys="direct-1"))
    listener = Recorder()
    started_ms = int(time.time() * 1000)
    consumer = PushConsumer(GROUP, rocketmesh_namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", consume_thread_nums=3,
                            **FAST_CLIENT)
    consumer.subscribe(TOPIC, "TagA || TagB")
    consumer.register_listener(listener)
    consumer.start()
    try:
        wait_for(lambda: "direct-1" in listener.keys(), 20, "the message consumed as usual")
        client_id = consumer.client_id
        assert client_id is not None
        mq = sent.message_queue

        # The queue holding the message shows its offset committed past it.
        def committed() -> ConsumerRunningInfo | None:
            info = running_info(mesh_admin, client_id)
            pq = None if info is None else info.mq_table.get(mq)
            return info if pq is not None and pq.commit_offset == sent.queue_offset + 1 else None

        info = wait_for(committed, 20, "the running info with the message committed")
        assert {s.topic: s.sub_string for s in info.subscriptions} == {TOPIC: "TagA || TagB",
                                                                       f"%RETRY%{GROUP}": "*"}
        assert {q for q in info.mq_table if q.topic == TOPIC} == set(consumer.assigned_queues())
        pq = info.mq_table[mq]
        assert pq.cached_msg_count == 0 and not pq.dropped and pq.last_pull_timestamp >= started_ms
        assert info.consume_type == "CONSUME_PASSIVELY" and not info.orderly
        assert started_ms <= info.start_timestamp <= int(time.time() * 1000)
        props = info.properties
        assert (props["consumerGroup"], props["messageModel"], props["consumeFromWhere"]) == (
            GROUP, "CLUSTERING", "CONSUME_FROM_FIRST_OFFSET")
        assert props["consumeThreadMin"] == props["consumeThreadMax"] == "3"
        assert props[PROP_NAMESERVER_ADDR] == rocketmesh_namesrv
        assert props["PROP_CLIENT_VERSION"].startswith("rocketmesh")
        assert "secretKey" not in props and info.jstack is None
        assert "Thread:" in (mesh_admin.consumer_running_info(GROUP, client_id, jstack=True).jstack or "")

        # The message again, straight through the listener: consumed once more, nothing else.
        before = len(listener.keys())
        result = mesh_admin.consume_message_directly(GROUP, client_id, sent.offset_msg_id)
        assert result.consume_result is CMResult.CR_SUCCESS and not result.order and result.auto_commit
        assert result.spent_time_mills >= 0 and result.remark is None
        assert listener.keys()[before:] == ["direct-1"]
        listener.refuse = True
        result = mesh_admin.consume_message_directly(GROUP, client_id, sent.offset_msg_id)
        assert result.consume_result is CMResult.CR_THROW_EXCEPTION
        assert "the listener says no" in (result.remark or "")

        # The CLI shows the same.
        shown = run_cli("admin", "consumer-status", "-n", rocketmesh_namesrv, "-g", GROUP, "-i", client_id)
        assert shown.returncode == 0, shown.stderr
        assert "TagA || TagB" in shown.stdout and "PROP_CONSUME_TYPE" in shown.stdout and TOPIC in shown.stdout
        shown = run_cli("admin", "consumer-status", "-n", rocketmesh_namesrv, "-g", GROUP)
        assert shown.returncode == 0, shown.stderr
        assert client_id in shown.stdout and "Same subscription in the same group of consumer" in shown.stdout
        listener.refuse = False
        shown = run_cli("admin", "consume-message-directly", "-n", rocketmesh_namesrv, "-g", GROUP, "-d", client_id,
                        "-i", sent.offset_msg_id)
        assert shown.returncode == 0, shown.stderr
        assert "CR_SUCCESS" in shown.stdout
    finally:
        consumer.shutdown()


def test_a_client_that_is_not_online_is_named_in_the_error(rocketmesh_namesrv: str, mesh_admin: Admin,
        mesh_producer: Producer) -> None:
    make_topic(mesh_admin, TOPIC, 1)
    sent = mesh_producer.send(Message(TOPIC, "nobody reads this"))
    stranger = "10.0.0.1@nobody"
    with pytest.raises(MQBrokerError) as err:
        mesh_admin.consumer_running_info(GROUP, stranger)
    assert err.value.response_code == ResponseCode.SYSTEM_ERROR
    assert err.value.remark == f"The Consumer <{GROUP}> <{stranger}> not online"
    with pytest.raises(MQBrokerError) as err:
        mesh_admin.consume_message_directly(GROUP, stranger, sent.offset_msg_id)
    assert err.value.response_code == ResponseCode.SYSTEM_ERROR and stranger in err.value.remark
    shown = run_cli("admin", "consumer-status", "-n", rocketmesh_namesrv, "-g", GROUP, "-i", stranger)
    assert shown.returncode == 1 and "not online" in shown.stderr
