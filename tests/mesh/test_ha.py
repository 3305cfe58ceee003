"""Master/slave replication through the ha service, over the wire, with real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from procs import BrokerProcess, wait_for
from rocketmesh import Admin, Message, Producer
from rocketmesh.model.codec import decode_records
from rocketmesh.remoting import RemotingClient, RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.headers import PullMessageRequestHeader

TOPIC = "HaTopic"


def runtime(client: RemotingClient, broker: BrokerProcess) -> dict:
    import orjson

    resp = client.invoke_sync(broker.addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 3000)
    return orjson.loads(resp.body)["table"]


def create_topic(namesrv: str, queues: int) -> None:
    """TOPIC with ``queues`` read and write queues, routable when this returns."""
    with Admin(namesrv) as admin:
        admin.create_topic(TOPIC, read_queue_nums=queues, write_queue_nums=queues)
        admin.wait_topic_route(TOPIC)


def kill_master_once_the_slave_knows_the_topic(namesrv, client: RemotingClient, master: BrokerProcess,
                                               slave: BrokerProcess) -> None:
    """SIGKILL the master once the slave's metadata sync brought TOPIC (a topic younger than the sync
    interval would not be served by the slave yet, as in RocketMQ), and wait until the routes drop it."""
    wait_for(lambda: TOPIC in topics_of(client, slave), 10, what="the topic synced to the slave")
    master.kill()
    with Admin(namesrv.addr) as admin:
        wait_for(lambda: master.addr not in admin.cluster_info().all_addrs(), 15, what="the master out of the routes")


def topics_of(client: RemotingClient, broker: BrokerProcess) -> set[str]:
    import orjson

    resp = client.invoke_sync(broker.addr, request(RequestCode.GET_ALL_TOPIC_CONFIG), 3000)
    return set(orjson.loads(resp.body)["topicConfigTable"])


def pull_all(client: RemotingClient, broker: BrokerProcess, topic: str, queue_id: int) -> list[str]:
    got: list[str] = []
    offset = 0
    while True:
        header = PullMessageRequestHeader("ha-test", topic, queue_id, offset, 64, 0, subscription="*")
        resp = client.invoke_sync(broker.addr, request(RequestCode.PULL_MESSAGE, header.to_ext()), 3000)
        if resp.code != ResponseCode.SUCCESS:
            return got
        got += [m.body.decode() for m in decode_records(resp.body)]
        offset = resp.ext["nextBeginOffset"]


@pytest.fixture
def group(namesrv, start_broker, start_ha):
    master = start_broker(namesrv.addr, name="broker-a")
    slave = start_broker(namesrv.addr, name="broker-a", brokerId=1, brokerRole="SLAVE",
                         slaveSyncIntervalMills=500)
    ha = start_ha(namesrv.addr, brokerName="broker-a")
    return master, slave, ha


def test_an_async_master_s_commitlog_reaches_the_slave_byte_for_byte(namesrv, remoting_client, group):
    master, slave, ha = group
    create_topic(namesrv.addr, 2)
    with Producer("ha-producer", namesrv.addr) as p:
        sent = [f"m{i}" for i in range(300)]
        for i in range(0, 300, 30):
            p.send_batch([Message(TOPIC, b) for b in sent[i:i + 30]])
    end = runtime(remoting_client, master)["commitLogMaxOffset"]
    wait_for(lambda: runtime(remoting_client, slave)["commitLogMaxOffset"] == end, 15,
             what="the slave's commitlog at the master's end")
    assert slave.commitlog_digest(end) == master.commitlog_digest(end)
    # The slave's consume queues answer the same pulls, once it knows the topic (metadata sync).
    wait_for(lambda: pull_all(remoting_client, slave, TOPIC, 0) == pull_all(remoting_client, master, TOPIC, 0)
             and pull_all(remoting_client, slave, TOPIC, 1) == pull_all(remoting_client, master, TOPIC, 1), 15,
             what="the slave's queues answering as the master's")
    assert sorted(pull_all(remoting_client, slave, TOPIC, 0) + pull_all(remoting_client, slave, TOPIC, 1)) == \
        sorted(sent)
    status = ha.status()
    assert status["slaveOffset"] == end and status["lagBytes"] == 0
    info = runtime(remoting_client, master)
    assert info["brokerRole"] == "ASYNC_MASTER" and info["haSlaves"][0]["addr"] == slave.addr
    assert runtime(remoting_client, slave)["brokerRole"] == "SLAVE"


def test_a_slave_refuses_sends(namesrv, remoting_client, group):
    master, slave, _ = group
    header = {"producerGroup": "g", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
              "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0}
    resp = remoting_client.invoke_sync(slave.addr, request(RequestCode.SEND_MESSAGE, header, b"x"), 3000)
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE


def view_on(client: RemotingClient, broker: BrokerProcess, offset_msg_id: str):
    """The message at an offset id's commitlog offset, read from ``broker`` (None when it has no such record)."""
    from rocketmesh.model.codec import decode_message_id, decode_record
    from rocketmesh.remoting.protocol.headers import ViewMessageRequestHeader

    offset = decode_message_id(offset_msg_id)[2]
    resp = client.invoke_sync(broker.addr, request(RequestCode.VIEW_MESSAGE_BY_ID,
                                                   ViewMessageRequestHeader(offset).to_ext()), 3000)
    return decode_record(resp.body) if resp.code == ResponseCode.SUCCESS else None


@pytest.fixture
def sync_group(namesrv, start_broker, start_ha, remoting_client):
    master = start_broker(namesrv.addr, name="broker-a", brokerRole="SYNC_MASTER", haHousekeepingInterval=2000,
                          syncFlushTimeout=1500)
    slave = start_broker(namesrv.addr, name="broker-a", brokerId=1, brokerRole="SLAVE", slaveSyncIntervalMills=500)
    ha = start_ha(namesrv.addr, brokerName="broker-a")
    create_topic(namesrv.addr, 2)
    # The ha service serves before its first transfer reaches the master; until then the master has no
    # slave in sync and answers SLAVE_NOT_AVAILABLE, as it should. The tests start from a group in sync.
    wait_for(lambda: any(s["connected"] for s in runtime(remoting_client, master)["haSlaves"]), 10,
             what="the master seeing its slave connected")
    return master, slave, ha


def test_sync_master_answers_send_ok_only_for_what_the_slave_has(namesrv, remoting_client, sync_group):
    from rocketmesh.client.results import SendStatus

    master, slave, ha = sync_group
    with Producer("ha-sync-producer", namesrv.addr) as p:
        for i in range(50):
            r = p.send(Message(TOPIC, f"s{i}"))
            assert r.send_status is SendStatus.SEND_OK
            on_slave = view_on(remoting_client, slave, r.offset_msg_id)
            assert on_slave is not None and on_slave.body == f"s{i}".encode()
        batch = p.send_batch([Message(TOPIC, f"b{i}") for i in range(20)])
        assert batch.send_status is SendStatus.SEND_OK
        assert [view_on(remoting_client, slave, i).body for i in batch.offset_msg_id.split(",")] == \
            [f"b{i}".encode() for i in range(20)]


def test_sync_master_without_its_ha_service_says_so_and_the_restarted_service_resumes_without_gap(
        namesrv, remoting_client, sync_group, start_ha):
    from rocketmesh.client.results import SendStatus

    master, slave, ha = sync_group
    with Producer("ha-sync-producer-2", namesrv.addr, send_msg_timeout_ms=10_000) as p:
        assert p.send(Message(TOPIC, "before")).send_status is SendStatus.SEND_OK
        ha.kill()
        statuses = {p.send(Message(TOPIC, f"alone{i}")).send_status for i in range(5)}
        assert statuses <= {SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}, statuses
        # Past haHousekeepingInterval the slave counts as gone: answered at once.
        wait_for(lambda: p.send(Message(TOPIC, "gone")).send_status is SendStatus.SLAVE_NOT_AVAILABLE, 10,
                 what="SLAVE_NOT_AVAILABLE once the slave is gone")
        start_ha(namesrv.addr, name="ha-again", brokerName="broker-a")
        wait_for(lambda: p.send(Message(TOPIC, "after")).send_status is SendStatus.SEND_OK, 15,
                 what="SEND_OK again with the ha service back")
    end = runtime(remoting_client, master)["commitLogMaxOffset"]
    wait_for(lambda: runtime(remoting_client, slave)["commitLogMaxOffset"] == end, 15, what="the slave caught up")
    assert slave.commitlog_digest(end) == master.commitlog_digest(end)


def test_up_with_ha_runs_a_synchronous_group_the_admin_commands_show(tmp_path: Path) -> None:
    """``rocketmesh up --ha --set brokerRole=SYNC_MASTER``: sends are SEND_OK because the slave has them,
    cluster-list shows both roles with the slave's lag, broker-status the master's slaves."""
    import re
    import signal
    import subprocess

    from procs import cli_command, free_port, run_cli

    namesrv = f"127.0.0.1:{free_port()}"
    slave_port = free_port()
    proc = subprocess.Popen(
        [*cli_command(), "up", "--data-dir", str(tmp_path / "mesh"), "--namesrv-port", namesrv.rsplit(":", 1)[1],
         "--no-remoting", "--broker-port", str(free_port()), "--scheduler-port", str(free_port()),
         "--txn-checker-port", str(free_port()), "--ha", "--slave-port", str(slave_port), "--ha-port", str(free_port()),
         "--no-metrics", "--no-dashboard", "--set", "brokerRole=SYNC_MASTER",
         "--set", "mappedFileSizeCommitLog=4194304", "--set", "maxHashSlotNum=10000", "--set", "maxIndexNum=40000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "Stop with Ctrl-C" in line:
                break
        assert any("mesh is up" in line for line in lines), "".join(lines)
        assert any(f"127.0.0.1:{slave_port}  (slave" in line for line in lines), "".join(lines)
        sent = run_cli("produce", "-n", namesrv, "-t", "HaUpTopic", "-c", "5")
        assert sent.returncode == 0 and sent.stdout.count("SEND_OK") == 5, sent.stdout + sent.stderr
        listed = run_cli("admin", "cluster-list", "-n", namesrv)
        assert listed.returncode == 0, listed.stderr
        assert re.search(r"broker-a\s+0\s+\S+\s+SYNC_MASTER", listed.stdout), listed.stdout
        assert re.search(rf"broker-a\s+1\s+127\.0\.0\.1:{slave_port}\s+SLAVE\s.*\s0\s*$", listed.stdout, re.M), \
            listed.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def test_a_slave_started_empty_beside_a_master_with_100_mb_catches_up(namesrv, remoting_client, start_broker,
                                                                      start_ha):
    master = start_broker(namesrv.addr, name="broker-a")
    create_topic(namesrv.addr, 4)
    body = b"z" * 4000
    with Producer("ha-bulk", namesrv.addr, send_msg_timeout_ms=30_000) as p:
        # At most 16 batches (4 MB) in flight: 100 MB queued at once would wait past waitTimeMillsInSendQueue
        # in the broker's send queue and be refused SYSTEM_BUSY, as it should be.
        window: list = []
        for _ in range(420):
            window.append(p.send_batch_async([Message(TOPIC, body) for _ in range(60)]))
            if len(window) >= 16:
                window.pop(0).result(60)
        for f in window:
            f.result(60)
    end = runtime(remoting_client, master)["commitLogMaxOffset"]
    assert end > 100 * 1024 * 1024
    slave = start_broker(namesrv.addr, name="broker-a", brokerId=1, brokerRole="SLAVE")
    ha = start_ha(namesrv.addr, brokerName="broker-a")
    wait_for(lambda: ha.status()["slaveOffset"] == end, 120, what="the empty slave at the master's end")
    assert slave.commitlog_digest(end) == master.commitlog_digest(end)
    assert ha.status()["resyncs"] == 0


def test_master_killed_under_sync_master_a_consumer_group_finishes_the_backlog_from_the_slave(
        namesrv, remoting_client, sync_group):
    from rocketmesh import PushConsumer
    from rocketmesh.client.results import SendStatus

    master, slave, ha = sync_group
    with Producer("ha-failover-producer", namesrv.addr) as p:
        sent = []
        for i in range(0, 200, 20):
            r = p.send_batch([Message(TOPIC, f"f{j}") for j in range(i, i + 20)])
            assert r.send_status is SendStatus.SEND_OK
            sent += [f"f{j}" for j in range(i, i + 20)]
    kill_master_once_the_slave_knows_the_topic(namesrv, remoting_client, master, slave)
    got: set[str] = set()
    consumer = PushConsumer("ha-failover-group", namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(lambda msgs: got.update(m.body.decode() for m in msgs) or "CONSUME_SUCCESS")
    with consumer:
        wait_for(lambda: got >= set(sent), 30, what="every SEND_OK message consumed from the slave")


def test_with_slave_read_enable_a_consumer_far_behind_reads_from_the_slave(namesrv, remoting_client, start_broker,
                                                                           start_ha):
    """accessMessageInMemoryMaxRatio=0 makes every unread message count as out of memory: the master
    suggests the slave (whichBrokerWhenConsumeSlowly) and the consumer follows; without slaveReadEnable
    it does not."""
    from rocketmesh import PushConsumer

    far = {"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": 0}
    master = start_broker(namesrv.addr, name="broker-a", **far)
    slave = start_broker(namesrv.addr, name="broker-a", brokerId=1, brokerRole="SLAVE", slaveSyncIntervalMills=500,
                         **far)
    start_ha(namesrv.addr, brokerName="broker-a")
    create_topic(namesrv.addr, 1)
    with Producer("ha-read-producer", namesrv.addr) as p:
        p.send_batch([Message(TOPIC, f"r{i}") for i in range(100)])
    end = runtime(remoting_client, master)["commitLogMaxOffset"]
    wait_for(lambda: runtime(remoting_client, slave)["commitLogMaxOffset"] == end
             and TOPIC in topics_of(remoting_client, slave), 10, what="the slave holding the messages and the topic")
    header = PullMessageRequestHeader("ha-read-group", TOPIC, 0, 0, 8, 0, subscription="*")
    resp = remoting_client.invoke_sync(master.addr, request(RequestCode.PULL_MESSAGE, header.to_ext()), 3000)
    assert resp.code == ResponseCode.SUCCESS and resp.ext["suggestWhichBrokerId"] == 1
    got: set[str] = set()
    consumer = PushConsumer("ha-read-group", namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            pull_batch_size=8)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(lambda msgs: got.update(m.body.decode() for m in msgs) or "CONSUME_SUCCESS")
    with consumer:
        wait_for(lambda: len(got) == 100, 20, what="the 100 messages consumed")
    assert runtime(remoting_client, slave)["getMessageTransferedMsgCount"] > 50  # most came from the slave


def test_without_slave_read_enable_the_master_keeps_its_consumers(namesrv, remoting_client, group):
    master, slave, _ = group
    create_topic(namesrv.addr, 1)
    with Producer("ha-read-producer-2", namesrv.addr) as p:
        p.send(Message(TOPIC, "x"))
    header = PullMessageRequestHeader("ha-read-group-2", TOPIC, 0, 0, 8, 0, subscription="*")
    resp = remoting_client.invoke_sync(master.addr, request(RequestCode.PULL_MESSAGE, header.to_ext()), 3000)
    assert resp.code == ResponseCode.SUCCESS and resp.ext.get("suggestWhichBrokerId", 0) == 0


def committed(client: RemotingClient, broker: BrokerProcess, group: str, queues: int = 2) -> int:
    """The sum of ``group``'s committed offsets of TOPIC's queues on ``broker`` (-1 when any is missing)."""
    from rocketmesh.remoting.protocol.headers import QueryConsumerOffsetRequestHeader

    total = 0
    for q in range(queues):
        resp = client.invoke_sync(broker.addr, request(RequestCode.QUERY_CONSUMER_OFFSET,
            QueryConsumerOffsetRequestHeader(group, TOPIC, q).to_ext()), 3000)
        if resp.code != ResponseCode.SUCCESS:
            return -1
        total += resp.ext["offset"]
    return total


def test_offsets_committed_on_the_slave_while_the_master_is_gone_reach_the_master_when_it_is_back(
        namesrv, remoting_client, sync_group):
    from rocketmesh import PushConsumer

    master, slave, ha = sync_group
    with Producer("ha-reconcile-producer", namesrv.addr) as p:
        for i in range(0, 60, 20):
            p.send_batch([Message(TOPIC, f"o{j}") for j in range(i, i + 20)])
    kill_master_once_the_slave_knows_the_topic(namesrv, remoting_client, master, slave)
    got: set[str] = set()
    consumer = PushConsumer("ha-reconcile-group", namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            persist_consumer_offset_interval_ms=500, poll_name_server_interval_ms=1000)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(lambda msgs: got.update(m.body.decode() for m in msgs) or "CONSUME_SUCCESS")
    with consumer:
        wait_for(lambda: len(got) == 60, 30, what="the 60 messages consumed from the slave")
        wait_for(lambda: committed(remoting_client, slave, "ha-reconcile-group") == 60, 10,
                 what="the offsets committed on the slave")
        master.start(timeout_s=30)
        # The consumer commits what it holds to the master once the route names it again.
        wait_for(lambda: committed(remoting_client, master, "ha-reconcile-group") == 60, 45,
                 what="the offsets committed meanwhile on the master")


def test_a_slave_refuses_a_chunk_that_does_not_start_where_its_commitlog_ends(namesrv, remoting_client, group):
    """A gap or an overlap is refused, naming the slave's real end (where the ha service goes on from)."""
    from rocketmesh.remoting.protocol.headers import HaAppendRequestHeader

    master, slave, _ = group
    with Producer("ha-gap-producer", namesrv.addr) as p:
        p.send(Message(TOPIC, "one"))
    end = runtime(remoting_client, master)["commitLogMaxOffset"]
    wait_for(lambda: runtime(remoting_client, slave)["commitLogMaxOffset"] == end, 10, what="the slave at the end")
    file_size = 4 * 1024 * 1024
    for start in (end + 100, end - 10):
        resp = remoting_client.invoke_sync(slave.addr, request(RequestCode.HA_APPEND,
            HaAppendRequestHeader(start, file_size).to_ext(), b"\0" * 64), 3000)
        assert resp.code == ResponseCode.SYSTEM_ERROR and resp.ext["offset"] == end, resp
        assert f"ends at {end}" in resp.remark
    assert runtime(remoting_client, slave)["commitLogMaxOffset"] == end
    resp = remoting_client.invoke_sync(master.addr, request(RequestCode.HA_APPEND,
        HaAppendRequestHeader(end, file_size).to_ext(), b"\0" * 64), 3000)
    assert resp.code == ResponseCode.SYSTEM_ERROR and "not a SLAVE" in resp.remark
