"""The broker as a process: registration, liveness, topics, flow control, bad input."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import orjson
import pytest
import zmq

from procs import wait_for
from rocketmesh import Message, Producer
from rocketmesh.client import Admin, MQBrokerError, SendStatus
from rocketmesh.model.codec import decode_records, encode_batch, encode_properties
from rocketmesh.remoting import RemotingClient, RequestCode, ResponseCode, pack_frame, request

FAST_LIVENESS = dict(scanNotActiveBrokerInterval=200, brokerChannelExpiredTime=1500)


def route_brokers(client: RemotingClient, namesrv: str, topic: str) -> set[str]:
    resp = client.invoke_sync(namesrv, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 3000)
    if resp.code != ResponseCode.SUCCESS:
        return set()
    return {b["brokerName"] for b in orjson.loads(resp.body)["brokerDatas"]}


def send_raw(client, addr, topic, body=b"x", queue_id=0, **ext):
    header = {"producerGroup": "raw", "topic": topic, "queueId": queue_id, "bornTimestamp": int(time.time() * 1000),
              "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
              "properties": encode_properties({"KEYS": "raw-key"}).decode(), **ext}
    return client.invoke_sync(addr, request(RequestCode.SEND_MESSAGE, header, body), 5000)


def test_registers_with_every_namesrv_and_unregisters_on_shutdown(start_namesrv, start_broker, remoting_client):
    ns1, ns2 = start_namesrv(), start_namesrv()
    broker = start_broker(f"{ns1.addr};{ns2.addr}")
    for ns in (ns1, ns2):
        routed = wait_for(lambda ns=ns: route_brokers(remoting_client, ns.addr, "TBW102"), 15, what="route")
        assert routed == {"broker-a"}
    broker.stop()
    assert broker.returncode == 0, broker.output()
    # A clean shutdown unregisters at once; no waiting for the liveness expiry.
    for ns in (ns1, ns2):
        assert route_brokers(remoting_client, ns.addr, "TBW102") == set()


def test_killed_broker_drops_out_and_sends_go_to_the_survivor(start_namesrv, start_broker, remoting_client):
    ns = start_namesrv(**FAST_LIVENESS)
    a = start_broker(ns.addr, "broker-a", registerNameServerPeriod=300)
    start_broker(ns.addr, "broker-b", registerNameServerPeriod=300)
    with Admin(namesrv=ns.addr) as admin:
        admin.create_topic("Orders", read_queue_nums=2, write_queue_nums=2)
        wait_for(lambda: route_brokers(remoting_client, ns.addr, "Orders") == {"broker-a", "broker-b"},
                   what="both brokers in the route")
    a.kill()
    wait_for(lambda: route_brokers(remoting_client, ns.addr, "Orders") == {"broker-b"}, timeout_s=10,
               what="broker-a to expire")
    with Producer("survivor-test", namesrv=ns.addr) as producer:
        results = [producer.send(Message("Orders", b"after-crash-%d" % i)) for i in range(20)]
    assert {r.message_queue.broker_name for r in results} == {"broker-b"}
    assert all(r.send_status is SendStatus.SEND_OK for r in results)

    # A broker that joins later gets traffic too.
    c = start_broker(ns.addr, "broker-c", registerNameServerPeriod=300)
    with Admin(namesrv=ns.addr) as admin:
        admin.create_topic("Orders", read_queue_nums=2, write_queue_nums=2, broker_addr=c.addr)
    wait_for(lambda: "broker-c" in route_brokers(remoting_client, ns.addr, "Orders"), what="broker-c")
    with Producer("joiner-test", namesrv=ns.addr, poll_name_server_interval_ms=200) as producer:
        brokers = {producer.send(Message("Orders", b"x")).message_queue.broker_name for _ in range(20)}
    assert brokers == {"broker-b", "broker-c"}


def test_topics_persist_across_restart_and_auto_creation(start_namesrv, start_broker, remoting_client, tmp_path):
    ns = start_namesrv()
    broker = start_broker(ns.addr)
    with Admin(namesrv=ns.addr) as admin:
        admin.create_topic("Kept", read_queue_nums=3, write_queue_nums=3)
    with Producer("auto", namesrv=ns.addr) as producer:
        r = producer.send(Message("AutoMade", b"hello", keys="k1"))
    assert r.send_status is SendStatus.SEND_OK
    broker.stop()
    table = orjson.loads((broker.store_dir / "config" / "topics.json").read_bytes())["topicConfigTable"]
    assert table["Kept"]["writeQueueNums"] == 3 and "AutoMade" in table
    broker.start(timeout_s=30)
    wait_for(lambda: route_brokers(remoting_client, ns.addr, "Kept"), what="route after restart")
    resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.QUERY_MESSAGE, {"topic": "AutoMade",
                                                                                        "key": "k1"}), 3000)
    assert resp.code == ResponseCode.SUCCESS and [m.body for m in decode_records(resp.body)] == [b"hello"]


def test_auto_creation_off_answers_topic_not_exist(start_namesrv, start_broker, remoting_client):
    ns = start_namesrv()
    broker = start_broker(ns.addr, autoCreateTopicEnable="false")
    resp = send_raw(remoting_client, broker.addr, "NoSuchTopic")  # asks for TBW102, which is not there
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in resp.remark


def test_bad_input_gets_clear_errors_and_the_broker_keeps_serving(start_namesrv, start_broker, remoting_client):
    ns = start_namesrv()
    broker = start_broker(ns.addr, maxMessageSize=1024)
    c, addr = remoting_client, broker.addr
    cases = [
        (send_raw(c, addr, "bad topic!"), ResponseCode.SYSTEM_ERROR, "illegal"),
        (send_raw(c, addr, "x" * 128), ResponseCode.SYSTEM_ERROR, "longer than 127"),
        (send_raw(c, addr, "TBW102"), ResponseCode.NO_PERMISSION, "forbidden"),
        (send_raw(c, addr, "Fine", body=b"y" * 1025), ResponseCode.MESSAGE_ILLEGAL, "maxMessageSize"),
        (send_raw(c, addr, "Fine", body=b""), ResponseCode.MESSAGE_ILLEGAL, "empty"),
        (send_raw(c, addr, "Fine", queue_id=99), ResponseCode.SYSTEM_ERROR, "queueId"),
        (c.invoke_sync(addr, request(RequestCode.SEND_MESSAGE, {"topic": 5}, b"x"), 3000),
         ResponseCode.SYSTEM_ERROR, "<producerGroup>"),
        (send_raw(c, addr, 5), ResponseCode.SYSTEM_ERROR, "<topic> must be a string"),
        (c.invoke_sync(addr, request(RequestCode.GET_MAX_OFFSET, {"topic": "Fine"}), 3000),
         ResponseCode.SYSTEM_ERROR, "queueId"),
        (c.invoke_sync(addr, request(4242), 3000), ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "4242"),
    ]
    for resp, code, text in cases:
        assert resp.code == code and text in (resp.remark or ""), (resp.code, resp.remark)

    # A batch may not hold delayed messages; a batch that does not decode is refused whole.
    batch_header = {"producerGroup": "raw", "topic": "Fine", "queueId": 0, "bornTimestamp": 1, "batch": True}
    delayed = encode_batch([Message("Fine", b"a"), Message("Fine", b"b", delay_level=2)])
    resp = c.invoke_sync(addr, request(RequestCode.SEND_BATCH_MESSAGE, batch_header, delayed), 3000)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "delayed" in resp.remark
    resp = c.invoke_sync(addr, request(RequestCode.SEND_BATCH_MESSAGE, batch_header, delayed[:-2]), 3000)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "decode" in resp.remark

    # Garbage straight at the ROUTER: wrong frame counts, non-JSON, huge headers.
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(f"tcp://{addr}")
    for frames in ([b"\xff\xfe"], [pack_frame(b"not json")], [pack_frame(b"[]")],
                   [pack_frame(b'{"code": "x", "opaque": 1}')], [pack_frame(b"{" * 10_000)],
                   [pack_frame(b'{"code": 10, "opaque": 1, "flag": 0, "ext": []}', b"x")],
                   [b'{"code": 10, "opaque": 1, "flag": 0, "ext": {}}', b"x"], [b"a", b"b", b"c", b"d"]):
        raw.send_multipart(frames)
    time.sleep(0.3)
    raw.close()
    assert broker.alive, broker.output()
    resp = send_raw(c, addr, "Fine", body=b"still serving")
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def test_send_that_waited_too_long_in_queue_is_answered_system_busy(start_namesrv, start_broker):
    ns = start_namesrv()
    start_broker(ns.addr, waitTimeMillsInSendQueue=0)
    with Producer("busy", namesrv=ns.addr, retry_times_when_send_failed=0) as producer:
        with pytest.raises(MQBrokerError) as info:
            producer.send(Message("Busy", b"x"))
    assert info.value.response_code == ResponseCode.SYSTEM_BUSY
    assert "flow control" in str(info.value)


def test_runtime_info_counts_puts(start_namesrv, start_broker):
    ns = start_namesrv()
    broker = start_broker(ns.addr)
    with Producer("stats", namesrv=ns.addr) as producer:
        for _ in range(5):
            producer.send(Message("Stats", b"x" * 100))
    with Admin(namesrv=ns.addr) as admin:
        info = admin.broker_runtime_info(broker.addr)
    assert int(info["putMessageTimesTotal"]) >= 5
    assert info["brokerName"] == "broker-a" and len(info["putTps"].split()) == 3


def test_sync_flush_broker_acknowledges_concurrent_sends_after_fsync(start_namesrv, start_broker):
    ns = start_namesrv()
    broker = start_broker(ns.addr, flushDiskType="SYNC_FLUSH")
    results, errors = [], []

    def producer_thread(n: int) -> None:
        try:
            with Producer(f"sync-flush-{n}", namesrv=ns.addr) as producer:
                for i in range(25):
                    results.append(producer.send(Message("Durable", b"%d-%d" % (n, i), keys=f"d{n}-{i}")))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def batch_thread() -> None:
        try:
            with Producer("sync-flush-batches", namesrv=ns.addr) as producer:
                for i in range(3):
                    batches.append(producer.send_batch([Message("Durable", b"b%d-%d" % (i, j)) for j in range(10)]))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    batches = []
    threads = [threading.Thread(target=producer_thread, args=(n,)) for n in range(6)]
    threads.append(threading.Thread(target=batch_thread))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 150 and all(r.send_status is SendStatus.SEND_OK for r in results)
    assert len(batches) == 3 and all(b.send_status is SendStatus.SEND_OK for b in batches)
    assert all(len(b.offset_msg_id.split(",")) == 10 for b in batches)
    with Admin(namesrv=ns.addr) as admin:
        # Queue offsets follow the acknowledgement by a dispatch step.
        wait_for(lambda: sum(o.max_offset for o in admin.topic_status("Durable").values()) == 180,
                   what="180 messages in the queues")
        info = admin.broker_runtime_info(broker.addr)
    assert info["flushDiskType"] == "SYNC_FLUSH"


def test_broker_conf_file_environment_and_flags(start_namesrv, tmp_path, remoting_client):
    from procs import ServiceProcess, free_port, stdout_line

    ns = start_namesrv()
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text(f"# RocketMQ-style broker.conf\nbrokerClusterName=ConfCluster\nbrokerName=from-file\n"
                    f"listenPort={port}\nlistenAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
                    f"storePathRootDir={tmp_path / 'store'}\nmappedFileSizeCommitLog=4194304\n"
                    f"maxHashSlotNum=10000\nmaxIndexNum=40000\ndefaultTopicQueueNums=3\n")
    # The file names the broker; the environment overrides the file; a flag overrides both.
    proc = ServiceProcess("broker", ["-c", str(conf), "-n", ns.addr, "--broker-name", "from-flag"],
                          tmp_path / "proc", ready=stdout_line(r"listening on"),
                          env={"ROCKETMESH_BROKER_CLUSTER_NAME": "EnvCluster"})
    proc.start(timeout_s=30)
    try:
        assert f"broker from-flag listening on 127.0.0.1:{port}" in proc.stdout_text()
        with Admin(namesrv=ns.addr) as admin:
            wait_for(lambda: admin.cluster_list("EnvCluster"), what="broker in EnvCluster")
            assert [(b.broker_name, b.addr) for b in admin.cluster_list("EnvCluster")] == \
                [("from-flag", f"127.0.0.1:{port}")]
        resp = send_raw(remoting_client, f"127.0.0.1:{port}", "ConfTopic")
        assert resp.code == ResponseCode.SUCCESS
        assert (tmp_path / "store" / "commitlog").is_dir()
    finally:
        proc.stop()
    assert proc.returncode == 0

    bad = tmp_path / "bad.conf"
    bad.write_text("flushDiskType=SOMETIMES\n")
    out = subprocess.run([sys.executable, "-m", "rocketmesh.broker", "-c", str(bad)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "flushDiskType" in out.stderr


def test_silent_clients_expire_from_the_client_table(start_namesrv, start_broker, remoting_client):
    ns = start_namesrv()
    broker = start_broker(ns.addr, channelExpiredTimeout=800, clientScanInterval=200)
    heartbeat = {"clientID": "127.0.0.1@silent", "producerDataSet": [{"groupName": "silent-producers"}],
                 "consumerDataSet": []}
    resp = remoting_client.invoke_sync(broker.addr, request(RequestCode.HEARTBEAT, body=orjson.dumps(heartbeat)),
                                       3000)
    assert resp.code == ResponseCode.SUCCESS
    with Admin(namesrv=ns.addr) as admin:
        assert admin.broker_runtime_info(broker.addr)["producerCount"] == 1
        wait_for(lambda: admin.broker_runtime_info(broker.addr)["producerCount"] == 0, timeout_s=5,
                   what="the silent producer to expire")
    bad = remoting_client.invoke_sync(broker.addr, request(RequestCode.HEARTBEAT, body=b"{not json"), 3000)
    assert bad.code == ResponseCode.SYSTEM_ERROR and "heartbeat" in bad.remark
