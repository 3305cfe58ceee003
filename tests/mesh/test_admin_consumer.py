"""Admin's consumer-group commands and the quickstart consumer, against real name server and broker
processes (black box): progress, connections, offset reset, subscription groups, ``rocketmesh consume``.
The processes are the session's shared mesh (conftest.py's ``mesh_admin``): each test has topics and
groups of its own."""

from __future__ import annotations

import re
import threading
import time

import pytest

from clientkit import FAST_CLIENT, make_topic, quietly, refused_with
from procs import run_cli, wait_for
from rocketmesh import Admin, Message, MQBrokerError, MQClientError, Producer
from rocketmesh.client import ResponseCode
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PullConsumer, PushConsumer
from rocketmesh.model.message import MessageExt, MessageQueue
from rocketmesh.remoting import RemotingClient, RequestCode, request
from rocketmesh.remoting.protocol.headers import PullMessageRequestHeader, UpdateConsumerOffsetRequestHeader
from rocketmesh.testing import LocalMesh

# FAST_CLIENT: short client timings so joins show within seconds. The broker keeps its default channel expiry:
# a consumer shares the client instance the mesh's Admin started first, whose heartbeat interval is the
# default one.


def send_to(producer: Producer, admin: Admin, topic: str, per_queue: dict[int, int], prefix: str = "m") -> None:
    """Send ``per_queue[qid]`` messages to each queue of broker-a and wait until they are in the consume queues."""
    expected = {}
    for qid, n in per_queue.items():
        mq = MessageQueue(topic, "broker-a", qid)
        before = admin.max_offset(mq)
        for i in range(n):
            producer.send(Message(topic, f"{prefix}-{qid}-{i}", tags="TagA"), queue=mq)
        expected[mq] = before + n
    # The consume queue is built asynchronously; wait until every message is counted.
    for mq, n in expected.items():
        wait_for(lambda mq=mq, n=n: admin.max_offset(mq) >= n, what=f"messages in {mq}")


def commit_raw(client: RemotingClient, addr: str, group: str, topic: str, qid: int, offset: int) -> None:
    resp = client.invoke_sync(addr, request(RequestCode.UPDATE_CONSUMER_OFFSET,
                                            UpdateConsumerOffsetRequestHeader(group, topic, qid, offset).to_ext()))
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def pull_raw(client: RemotingClient, addr: str, group: str, topic: str, qid: int, offset: int = 0) -> int:
    header = PullMessageRequestHeader(group, topic, qid, offset, max_msg_nums=8, suspend_timeout_millis=0)
    return client.invoke_sync(addr, request(RequestCode.PULL_MESSAGE, header.to_ext())).code


# --- admin only: offsets driven by raw requests -------------------------------------------------------------


def test_consume_stats_from_committed_offsets(mesh_admin: Admin, mesh_producer: Producer, rocketmesh_mesh: LocalMesh,
        remoting_client: RemotingClient) -> None:
    make_topic(mesh_admin, "StatsT", 2)
    send_to(mesh_producer, mesh_admin, "StatsT", {0: 6, 1: 4})
    commit_raw(remoting_client, rocketmesh_mesh.broker_addr, "stats-group", "StatsT", 0, 4)
    commit_raw(remoting_client, rocketmesh_mesh.broker_addr, "stats-group", "StatsT", 1, 1)

    stats = mesh_admin.consume_stats("stats-group")
    q0, q1 = MessageQueue("StatsT", "broker-a", 0), MessageQueue("StatsT", "broker-a", 1)
    assert list(stats.offset_table) == [q0, q1]
    assert (stats.offset_table[q0].broker_offset, stats.offset_table[q0].consumer_offset) == (6, 4)
    assert (stats.offset_table[q1].broker_offset, stats.offset_table[q1].consumer_offset) == (4, 1)
    assert stats.offset_table[q0].diff == 2 and stats.offset_table[q1].diff == 3
    assert stats.total_diff() == 5
    # The store time of the last consumed message (offset 3 of queue 0).
    assert stats.offset_table[q0].last_timestamp > 0
    assert mesh_admin.consume_stats("stats-group", "StatsT") == stats


def test_consume_stats_of_an_unknown_group(mesh_admin: Admin) -> None:
    with pytest.raises(MQClientError, match="no progress on any broker") as ei:
        mesh_admin.consume_stats("nobody-home")
    assert ei.value.response_code == ResponseCode.CONSUMER_NOT_ONLINE
    with pytest.raises(MQClientError) as ei:
        mesh_admin.consumer_connection("nobody-home")
    assert ei.value.response_code == ResponseCode.CONSUMER_NOT_ONLINE
    assert mesh_admin.consumer_ids("nobody-home") == []


def test_reset_offset_by_time(mesh_admin: Admin, mesh_producer: Producer, rocketmesh_mesh: LocalMesh,
        remoting_client: RemotingClient) -> None:
    make_topic(mesh_admin, "ResetT", 2)
    send_to(mesh_producer, mesh_admin, "ResetT", {0: 3, 1: 2}, prefix="first")
    time.sleep(0.05)
    between = int(time.time() * 1000)
    time.sleep(0.05)
    send_to(mesh_producer, mesh_admin, "ResetT", {0: 2, 1: 1}, prefix="second")
    q0, q1 = MessageQueue("ResetT", "broker-a", 0), MessageQueue("ResetT", "broker-a", 1)

    assert mesh_admin.reset_offset_by_time("reset-group", "ResetT", between) == {q0: 3, q1: 2}
    stats = mesh_admin.consume_stats("reset-group", "ResetT")  # the broker stored the new offsets
    assert {mq: w.consumer_offset for mq, w in stats.offset_table.items()} == {q0: 3, q1: 2}
    assert mesh_admin.reset_offset_by_time("reset-group", "ResetT", -1) == {q0: 5, q1: 3}
    assert mesh_admin.reset_offset_by_time("reset-group", "ResetT", 0) == {q0: 0, q1: 0}
    # Without force an offset only goes back, never forward.
    assert mesh_admin.reset_offset_by_time("reset-group", "ResetT", -1, force=False) == {q0: 0, q1: 0}
    commit_raw(remoting_client, rocketmesh_mesh.broker_addr, "reset-group", "ResetT", 0, 5)
    assert mesh_admin.reset_offset_by_time("reset-group", "ResetT", between, force=False) == {q0: 3, q1: 0}

    with pytest.raises(MQClientError):
        mesh_admin.reset_offset_by_time("reset-group", "ResetT", -5)


def test_update_and_delete_subscription_group(mesh_admin: Admin, mesh_producer: Producer, rocketmesh_mesh: LocalMesh,
        remoting_client: RemotingClient) -> None:
    make_topic(mesh_admin, "SubGroupT", queues=1)
    send_to(mesh_producer, mesh_admin, "SubGroupT", {0: 1})
    assert mesh_admin.update_subscription_group("gated", broker_addr=rocketmesh_mesh.broker_addr, consume_enable=False,
                                           retry_max_times=3) == [rocketmesh_mesh.broker_addr]
    cfg = mesh_admin.subscription_groups(rocketmesh_mesh.broker_addr)["gated"]
    assert cfg["consumeEnable"] is False and cfg["retryMaxTimes"] == 3 and cfg["groupName"] == "gated"
    assert pull_raw(remoting_client, rocketmesh_mesh.broker_addr, "gated", "SubGroupT", 0) == ResponseCode.NO_PERMISSION

    assert mesh_admin.update_subscription_group("gated", cluster="DefaultCluster") == [rocketmesh_mesh.broker_addr]
    assert mesh_admin.subscription_groups(rocketmesh_mesh.broker_addr)["gated"]["consumeEnable"] is True
    assert pull_raw(remoting_client, rocketmesh_mesh.broker_addr, "gated", "SubGroupT", 0) == ResponseCode.SUCCESS

    mesh_admin.delete_subscription_group("gated")
    assert "gated" not in mesh_admin.subscription_groups(rocketmesh_mesh.broker_addr)
    with pytest.raises(MQClientError, match="no cluster named"):
        mesh_admin.update_subscription_group("gated", cluster="NoSuchCluster")
    with pytest.raises(MQClientError):
        mesh_admin.update_subscription_group("bad group name", broker_addr=rocketmesh_mesh.broker_addr)
    with pytest.raises(MQClientError):
        mesh_admin.update_subscription_group("gated", broker_addr=rocketmesh_mesh.broker_addr, retry_max_times=-1)


def test_cli_admin_consumer_commands(rocketmesh_namesrv: str, mesh_admin: Admin, mesh_producer: Producer,
        rocketmesh_mesh: LocalMesh, remoting_client: RemotingClient) -> None:
    make_topic(mesh_admin, "CliProgT", 2)
    send_to(mesh_producer, mesh_admin, "CliProgT", {0: 3, 1: 2})
    commit_raw(remoting_client, rocketmesh_mesh.broker_addr, "cli-group", "CliProgT", 0, 1)
    commit_raw(remoting_client, rocketmesh_mesh.broker_addr, "cli-group", "CliProgT", 1, 1)

    progress = run_cli("admin", "consumer-progress", "-n", rocketmesh_namesrv, "-g", "cli-group")
    assert progress.returncode == 0, progress.stderr
    assert "#Broker Offset" in progress.stdout and "#Consumer Offset" in progress.stdout
    assert re.search(r"^CliProgT\s+broker-a\s+0\s+3\s+1\s+2\s", progress.stdout, re.MULTILINE), progress.stdout
    assert "Diff Total: 3" in progress.stdout and "Consume TPS:" in progress.stdout

    missing = run_cli("admin", "consumer-progress", "-n", rocketmesh_namesrv, "-g", "no-such-group")
    assert missing.returncode == 1
    assert len(missing.stderr.strip().splitlines()) == 1 and "no progress" in missing.stderr

    reset_args = ("admin", "reset-offset-by-time", "-n", rocketmesh_namesrv, "-g", "cli-group", "-t", "CliProgT")
    reset = run_cli(*reset_args, "-s", "now")
    assert reset.returncode == 0, reset.stderr
    assert "#brokerName" in reset.stdout
    assert re.search(r"^broker-a\s+0\s+3$", reset.stdout, re.MULTILINE)
    assert re.search(r"^broker-a\s+1\s+2$", reset.stdout, re.MULTILINE)
    assert mesh_admin.consume_stats("cli-group").total_diff() == 0
    dated = run_cli("admin", "reset-offset-by-time", "-n", rocketmesh_namesrv, "-g", "cli-group", "-t", "CliProgT",
                "-s", "2000-01-01#00:00:00:000", "-f", "true")
    assert dated.returncode == 0, dated.stderr
    assert mesh_admin.consume_stats("cli-group").total_diff() == 5
    bad = run_cli(*reset_args, "-s", "soon")
    assert bad.returncode == 1 and "bad timestamp" in bad.stderr

    update = run_cli("admin", "update-sub-group", "-n", rocketmesh_namesrv, "-g", "cli-sub",
                     "-b", rocketmesh_mesh.broker_addr,
                 "--consume-enable", "false", "--retry-max-times", "5")
    assert update.returncode == 0, update.stderr
    assert rocketmesh_mesh.broker_addr in update.stdout
    cfg = mesh_admin.subscription_groups(rocketmesh_mesh.broker_addr)["cli-sub"]
    assert cfg["consumeEnable"] is False and cfg["retryMaxTimes"] == 5
    bad_flag = run_cli("admin", "update-sub-group", "-n", rocketmesh_namesrv, "-g", "cli-sub", "-c", "DefaultCluster",
                   "--consume-enable", "maybe")
    assert bad_flag.returncode == 1 and "--consume-enable" in bad_flag.stderr
    deleted = run_cli("admin", "delete-sub-group", "-n", rocketmesh_namesrv, "-g", "cli-sub")
    assert deleted.returncode == 0, deleted.stderr
    assert "cli-sub" not in mesh_admin.subscription_groups(rocketmesh_mesh.broker_addr)


# --- with the consumer SDK --------------------------------------------------------------------------------------


def test_consume_stats_lag_after_pull_consumer_commit(rocketmesh_namesrv: str, mesh_admin: Admin,
        mesh_producer: Producer) -> None:
    make_topic(mesh_admin, "LagT", 2)
    send_to(mesh_producer, mesh_admin, "LagT", {0: 6, 1: 4})
    n, k = 10, 4
    consumer = PullConsumer("lag-group", rocketmesh_namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            auto_commit=False,
                            pull_batch_size=1, **FAST_CLIENT)
    consumer.subscribe("LagT")
    consumer.start()
    try:
        got: list[MessageExt] = []
        deadline = time.monotonic() + 20
        while len(got) < k and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_ms=1000))
        assert len(got) == k
        consumer.commit()
        stats = wait_for(quietly(lambda: (s := mesh_admin.consume_stats("lag-group", "LagT")).total_diff() == n - k
                                 and s),
                         what="the commit on the broker")
    finally:
        consumer.shutdown()
    q0, q1 = MessageQueue("LagT", "broker-a", 0), MessageQueue("LagT", "broker-a", 1)
    assert {mq: w.broker_offset for mq, w in stats.offset_table.items()} == {q0: 6, q1: 4}
    assert sum(w.consumer_offset for w in stats.offset_table.values()) == k
    assert all(w.diff == w.broker_offset - w.consumer_offset for w in stats.offset_table.values())
    # Without a topic the group's retry topic may be listed too, with nothing in it.
    assert mesh_admin.consume_stats("lag-group").total_diff() == n - k


def test_consumer_connection_lists_the_running_consumer(rocketmesh_namesrv: str, mesh_admin: Admin) -> None:
    make_topic(mesh_admin, "ConnT", 2)
    consumer = PushConsumer("conn-group", rocketmesh_namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT)
    consumer.subscribe("ConnT", "TagA || TagB")
    consumer.register_listener(lambda msgs: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()
    try:
        client_id = consumer.client_id
        cc = wait_for(quietly(lambda: mesh_admin.consumer_connection("conn-group")), what="the consumer's heartbeat")
        assert [c.client_id for c in cc.connections] == [client_id]
        assert cc.connections[0].language and cc.connections[0].last_update_timestamp > 0
        assert cc.subscriptions["ConnT"]["subString"] == "TagA || TagB"
        assert cc.consume_type == "CONSUME_PASSIVELY"
        assert cc.message_model == "CLUSTERING"
        assert cc.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
        assert mesh_admin.consumer_ids("conn-group") == [client_id]

        shown = run_cli("admin", "consumer-connection", "-n", rocketmesh_namesrv, "-g", "conn-group")
        assert shown.returncode == 0, shown.stderr
        assert client_id in shown.stdout and "TagA || TagB" in shown.stdout
        assert "ConsumeType: CONSUME_PASSIVELY" in shown.stdout and "MessageModel: CLUSTERING" in shown.stdout
    finally:
        consumer.shutdown()

    wait_for(refused_with(lambda: mesh_admin.consumer_connection("conn-group"), ResponseCode.CONSUMER_NOT_ONLINE),
             what="the consumer to leave the group")


def test_producer_connection_lists_the_online_producer(rocketmesh_namesrv: str, mesh_admin: Admin) -> None:
    make_topic(mesh_admin, "ProducerConnT", 1)
    producer = Producer("conn-producer", rocketmesh_namesrv, instance_name="conn-producer", **FAST_CLIENT)
    producer.start()
    try:
        producer.send(Message("ProducerConnT", "hello"))  # learns the broker's route, then heartbeats it
        pc = wait_for(quietly(lambda: mesh_admin.producer_connection("conn-producer")),
                      what="the producer's heartbeat")
        assert [c.client_id for c in pc.connections] == [producer.client_id]
        conn = pc.connections[0]
        assert conn.language == "PYTHON" and conn.version > 0 and conn.client_addr
        assert conn.last_update_timestamp > 0
    finally:
        producer.shutdown()

    wait_for(refused_with(lambda: mesh_admin.producer_connection("conn-producer"), ResponseCode.SYSTEM_ERROR),
             what="the producer to leave its group")


def test_producer_connection_of_a_group_without_producer_is_the_brokers_error(mesh_admin: Admin) -> None:
    with pytest.raises(MQBrokerError) as ei:
        mesh_admin.producer_connection("nobody-produces")
    assert ei.value.response_code == ResponseCode.SYSTEM_ERROR
    assert ei.value.remark == "the producer group[nobody-produces] not exist"


def test_topic_consumers_lists_subscribed_and_committed_groups(rocketmesh_namesrv: str, mesh_admin: Admin,
        rocketmesh_mesh: LocalMesh, remoting_client: RemotingClient) -> None:
    make_topic(mesh_admin, "WhoT", 2)
    make_topic(mesh_admin, "WhoNobodyT", 1)
    assert mesh_admin.topic_consumers("WhoNobodyT") == []
    commit_raw(remoting_client, rocketmesh_mesh.broker_addr, "who-committed", "WhoT", 1, 0)
    assert mesh_admin.topic_consumers("WhoT") == ["who-committed"]
    consumer = PushConsumer("who-push", rocketmesh_namesrv, instance_name="who-push", **FAST_CLIENT)
    consumer.subscribe("WhoT")
    consumer.register_listener(lambda msgs: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    consumer.start()
    try:
        wait_for(lambda: mesh_admin.topic_consumers("WhoT") == ["who-committed", "who-push"],
                 what="the subscribed consumer's group")
        assert mesh_admin.topic_consumers("WhoNobodyT") == []
    finally:
        consumer.shutdown()
    with pytest.raises(MQBrokerError) as ei:
        mesh_admin.topic_consumers("NoSuchWhoT")
    assert ei.value.response_code == ResponseCode.TOPIC_NOT_EXIST


def test_broker_consume_stats_is_each_groups_consume_stats_in_one_answer(mesh_admin: Admin,
        mesh_producer: Producer, rocketmesh_mesh: LocalMesh, remoting_client: RemotingClient) -> None:
    make_topic(mesh_admin, "BcsT", 2)
    make_topic(mesh_admin, "BcsU", 2)
    make_topic(mesh_admin, "BcsOrderT", 1, order=True)
    send_to(mesh_producer, mesh_admin, "BcsT", {0: 5, 1: 3})
    send_to(mesh_producer, mesh_admin, "BcsU", {0: 2, 1: 4})
    send_to(mesh_producer, mesh_admin, "BcsOrderT", {0: 6})
    addr = rocketmesh_mesh.broker_addr
    commits = {"bcs-a": [("BcsT", 0, 5), ("BcsT", 1, 1)],  # lag 0 + 2
               "bcs-b": [("BcsT", 0, 2), ("BcsU", 0, 2), ("BcsU", 1, 0)],  # lag 3 + 3 (never committed) + 0 + 4
               "bcs-c": [("BcsOrderT", 0, 4)]}  # lag 2
    for group, offsets in commits.items():
        for topic, qid, offset in offsets:
            commit_raw(remoting_client, addr, group, topic, qid, offset)

    bcs = mesh_admin.broker_consume_stats(addr)
    assert bcs.broker_addr == addr
    for group in commits:
        one = mesh_admin.consume_stats(group)
        assert bcs.group_stats(group) == one
        assert {mq: (w.broker_offset, w.consumer_offset) for mq, w in bcs.group_stats(group).offset_table.items()} \
            == {mq: (w.broker_offset, w.consumer_offset) for mq, w in one.offset_table.items()}
    assert [sorted({mq.topic for mq in s.offset_table}) for s in bcs.consume_stats["bcs-b"]] == [["BcsT"], ["BcsU"]]
    assert [bcs.group_stats(g).total_diff() for g in commits] == [2, 10, 2]
    # The broker's total is the lag of every group it lists (the session's other groups too).
    assert bcs.total_diff == sum(s.total_diff() for per_topic in bcs.consume_stats.values() for s in per_topic)

    ordered = mesh_admin.broker_consume_stats(addr, is_order=True)
    assert ordered.consume_stats["bcs-a"] == [] and ordered.consume_stats["bcs-b"] == []
    assert ordered.group_stats("bcs-c") == bcs.group_stats("bcs-c")


def test_reset_offset_reaches_a_running_push_consumer(rocketmesh_namesrv: str, mesh_admin: Admin,
        mesh_producer: Producer) -> None:
    make_topic(mesh_admin, "ResetPushT", 2)
    send_to(mesh_producer, mesh_admin, "ResetPushT", {0: 2, 1: 1}, prefix="first")
    time.sleep(0.05)
    between = int(time.time() * 1000)
    time.sleep(0.05)
    send_to(mesh_producer, mesh_admin, "ResetPushT", {0: 1, 1: 1}, prefix="second")
    lock = threading.Lock()
    bodies: list[str] = []

    def on_messages(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with lock:
            bodies.extend(m.body.decode() for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("reset-push-group", rocketmesh_namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            **FAST_CLIENT)
    consumer.subscribe("ResetPushT")
    consumer.register_listener(on_messages)
    consumer.start()
    try:
        wait_for(lambda: len(bodies) == 5, timeout_s=20, what="all 5 messages")
        wait_for(quietly(lambda: mesh_admin.consume_stats("reset-push-group", "ResetPushT").total_diff() == 0),
                 timeout_s=15, what="the offsets committed")
        mesh_admin.reset_offset_by_time("reset-push-group", "ResetPushT", between)
        wait_for(lambda: len(bodies) == 7, timeout_s=20, what="the second batch again")
        with lock:
            assert sorted(bodies[5:]) == ["second-0-0", "second-1-0"]
    finally:
        consumer.shutdown()


def test_disabled_group_gets_no_messages_until_enabled(rocketmesh_namesrv: str, mesh_admin: Admin,
        mesh_producer: Producer, rocketmesh_mesh: LocalMesh) -> None:
    make_topic(mesh_admin, "GateT", queues=1)
    send_to(mesh_producer, mesh_admin, "GateT", {0: 3})
    mesh_admin.update_subscription_group("gate-group", broker_addr=rocketmesh_mesh.broker_addr, consume_enable=False)
    assert mesh_admin.subscription_groups(rocketmesh_mesh.broker_addr)["gate-group"]["consumeEnable"] is False
    consumer = PullConsumer("gate-group", rocketmesh_namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT)
    consumer.subscribe("GateT")
    consumer.start()
    try:
        assert consumer.poll(timeout_ms=3000) == []
        mesh_admin.update_subscription_group("gate-group", broker_addr=rocketmesh_mesh.broker_addr, consume_enable=True)
        got: list[MessageExt] = []
        deadline = time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_ms=1000))
        assert sorted(m.body.decode() for m in got) == ["m-0-0", "m-0-1", "m-0-2"]
    finally:
        consumer.shutdown()


def test_cli_consume_prints_count_messages_and_exits(rocketmesh_namesrv: str, mesh_admin: Admin,
        mesh_producer: Producer) -> None:
    make_topic(mesh_admin, "CliConsumeT", 2)
    send_to(mesh_producer, mesh_admin, "CliConsumeT", {0: 3, 1: 2})
    first = run_cli("consume", "-n", rocketmesh_namesrv, "-t", "CliConsumeT", "-g", "cli-consume", "--count", "3",
                "--from", "first", "--timeout", "30")
    assert first.returncode == 0, first.stderr
    lines = [ln for ln in first.stdout.splitlines() if ln.startswith("Receive New Messages: ")]
    assert len(lines) == 3, first.stdout
    fields = lines[0].split(" ", 8)
    assert re.fullmatch(r"[0-9A-F]{32}", fields[3]) and fields[4] == "CliConsumeT" and fields[7] == "TagA"

    # What the first run printed was committed; what it did not print comes next time.
    rest = run_cli("consume", "-n", rocketmesh_namesrv, "-t", "CliConsumeT", "-g", "cli-consume", "--timeout", "5")
    assert rest.returncode == 0, rest.stderr
    seen_first = {ln.rsplit(" ", 1)[1] for ln in lines}
    seen_rest = {ln.rsplit(" ", 1)[1] for ln in rest.stdout.splitlines() if ln.startswith("Receive New Messages: ")}
    assert seen_first.isdisjoint(seen_rest)
    assert seen_first | seen_rest == {"m-0-0", "m-0-1", "m-0-2", "m-1-0", "m-1-1"}


def test_cli_consume_refuses_a_bad_sql_expression(rocketmesh_namesrv: str) -> None:
    bad = run_cli("consume", "-n", rocketmesh_namesrv, "-t", "AnyT", "--sql", "a >", "--timeout", "5")
    assert bad.returncode == 1
    err = bad.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("consume: ") and "SUBSCRIPTION_PARSE_FAILED" in err[0], bad.stderr
    assert "Receive New Messages" not in bad.stdout
