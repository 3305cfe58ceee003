"""The name server as a black box: a real process, spoken to as brokers and clients do."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import zmq

from procs import NamesrvProcess, ServiceProcess, free_port, remoting_probe, wait_for
from rocketmesh.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode, decode, pack_frame, request


def topic_config(name: str, queues: int = 4, perm: int = 6) -> dict[str, Any]:
    return {
        "topicName": name,
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": perm,
        "topicSysFlag": 0,
        "order": False,
    }


def register(
    client: RemotingClient,
    addr: str,
    broker_name: str,
    broker_addr: str,
    topics: list[str],
    broker_id: int = 0,
    cluster: str = "DefaultCluster",
    version: int = 1,
    ha_addr: str | None = None,
) -> RemotingCommand:
    """REGISTER_BROKER as a broker sends it."""
    body = {
        "topicConfigTable": {t: topic_config(t) for t in topics},
        "dataVersion": {"timestamp": 1_700_000_000_000, "counter": version},
    }
    ext = {
        "clusterName": cluster,
        "brokerName": broker_name,
        "brokerId": broker_id,
        "brokerAddr": broker_addr,
        "haServerAddr": ha_addr or broker_addr.replace(":109", ":119"),
    }
    resp = client.invoke_sync(addr, request(RequestCode.REGISTER_BROKER, ext, orjson.dumps(body)), 3000)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return resp


def route(client: RemotingClient, addr: str, topic: str) -> RemotingCommand:
    return client.invoke_sync(addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 3000)


def call(client: RemotingClient, addr: str, code: int, ext: dict | None = None) -> RemotingCommand:
    return client.invoke_sync(addr, request(code, ext or {}), 3000)


def test_prints_listening_line(namesrv: NamesrvProcess) -> None:
    # The fixture waits for the port to answer; the line may reach the file a moment later on a busy machine.
    wait_for(lambda: f"namesrv listening on {namesrv.addr}" in namesrv.stdout_text(), 10,
             what="the listening line on stdout")


def test_register_then_route(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    resp = register(remoting_client, namesrv.addr, "broker-a", "127.0.0.1:10911", ["TopicA", "TopicB"])
    assert resp.ext == {}  # a master has no master: null fields are left out, as RocketMQ's extFields leave them
    assert orjson.loads(resp.body) == {"table": {}}

    r = route(remoting_client, namesrv.addr, "TopicA")
    assert r.code == ResponseCode.SUCCESS
    data = orjson.loads(r.body)
    assert data == {
        "queueDatas": [
            {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
        ],
        "brokerDatas": [
            {"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerAddrs": {"0": "127.0.0.1:10911"}}
        ],
    }  # no orderTopicConf: a topic with no order config omits it, as RocketMQ's JSON omits nulls


def test_unknown_topic_is_topic_not_exist(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    r = route(remoting_client, namesrv.addr, "NoSuchTopic")
    assert r.code == ResponseCode.TOPIC_NOT_EXIST
    assert "NoSuchTopic" in (r.remark or "")


def test_master_and_slave(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    register(remoting_client, namesrv.addr, "broker-a", "127.0.0.1:10911", ["T"], ha_addr="127.0.0.1:10912")
    # A slave's topics create no queue data; its answer names the master.
    slave = register(remoting_client, namesrv.addr, "broker-a", "127.0.0.1:20911", ["OnlyOnSlave"], broker_id=1)
    assert slave.ext == {"haServerAddr": "127.0.0.1:10912", "masterAddr": "127.0.0.1:10911"}
    assert route(remoting_client, namesrv.addr, "OnlyOnSlave").code == ResponseCode.TOPIC_NOT_EXIST
    data = orjson.loads(route(remoting_client, namesrv.addr, "T").body)
    assert data["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911", "1": "127.0.0.1:20911"}

    # The master leaves: the broker name keeps its slave, and its routes stay.
    ext = {"clusterName": "DefaultCluster", "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a", "brokerId": 0}
    assert call(remoting_client, namesrv.addr, RequestCode.UNREGISTER_BROKER, ext).code == ResponseCode.SUCCESS
    data = orjson.loads(route(remoting_client, namesrv.addr, "T").body)
    assert data["brokerDatas"][0]["brokerAddrs"] == {"1": "127.0.0.1:20911"}


def test_cluster_info_and_topic_list(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    register(remoting_client, namesrv.addr, "broker-a", "127.0.0.1:10911", ["T1", "T2"], cluster="c1")
    register(remoting_client, namesrv.addr, "broker-b", "127.0.0.1:10921", ["T2", "T3"], cluster="c2")

    info = orjson.loads(call(remoting_client, namesrv.addr, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"] == {"c1": ["broker-a"], "c2": ["broker-b"]}
    assert info["brokerAddrTable"]["broker-b"] == {
        "cluster": "c2",
        "brokerName": "broker-b",
        "brokerAddrs": {"0": "127.0.0.1:10921"},
    }

    topics = orjson.loads(call(remoting_client, namesrv.addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)
    assert topics == {"topicList": ["T1", "T2", "T3"]}
    by_cluster = call(remoting_client, namesrv.addr, RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "c1"})
    assert orjson.loads(by_cluster.body) == {"topicList": ["T1", "T2"]}

    t2 = orjson.loads(route(remoting_client, namesrv.addr, "T2").body)
    assert [q["brokerName"] for q in t2["queueDatas"]] == ["broker-a", "broker-b"]
    assert [b["brokerName"] for b in t2["brokerDatas"]] == ["broker-a", "broker-b"]


def test_delete_topic(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    register(remoting_client, namesrv.addr, "broker-a", "127.0.0.1:10911", ["Keep", "Drop"])
    resp = call(remoting_client, namesrv.addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Drop"})
    assert resp.code == ResponseCode.SUCCESS
    assert route(remoting_client, namesrv.addr, "Drop").code == ResponseCode.TOPIC_NOT_EXIST
    assert route(remoting_client, namesrv.addr, "Keep").code == ResponseCode.SUCCESS
    # Re-registering with an unchanged data version does not bring it back...
    register(remoting_client, namesrv.addr, "broker-a", "127.0.0.1:10911", ["Keep", "Drop"])
    assert route(remoting_client, namesrv.addr, "Drop").code == ResponseCode.TOPIC_NOT_EXIST
    # ...a new data version does.
    register(remoting_client, namesrv.addr, "broker-a", "127.0.0.1:10911", ["Keep", "Drop"], version=2)
    assert route(remoting_client, namesrv.addr, "Drop").code == ResponseCode.SUCCESS


def test_kv_config(start_namesrv: Callable[..., NamesrvProcess], remoting_client: RemotingClient) -> None:
    ns = start_namesrv(orderMessageEnable="true")
    c, addr = remoting_client, ns.addr
    key = {"namespace": "ORDER_TOPIC_CONFIG", "key": "OrderTopic"}
    assert call(c, addr, RequestCode.GET_KV_CONFIG, key).code == ResponseCode.QUERY_NOT_FOUND
    assert call(c, addr, RequestCode.PUT_KV_CONFIG, {**key, "value": "broker-a:4"}).code == ResponseCode.SUCCESS
    got = call(c, addr, RequestCode.GET_KV_CONFIG, key)
    assert (got.code, got.ext) == (ResponseCode.SUCCESS, {"value": "broker-a:4"})
    listing = call(c, addr, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"})
    assert orjson.loads(listing.body) == {"table": {"OrderTopic": "broker-a:4"}}

    # The order config shows in routes and in the register answer.
    resp = register(c, addr, "broker-a", "127.0.0.1:10911", ["OrderTopic"])
    assert orjson.loads(resp.body) == {"table": {"OrderTopic": "broker-a:4"}}
    assert orjson.loads(route(c, addr, "OrderTopic").body)["orderTopicConf"] == "broker-a:4"

    # Kept on disk across a restart.
    ns.stop()
    ns.start()
    assert call(c, addr, RequestCode.GET_KV_CONFIG, key).ext == {"value": "broker-a:4"}

    assert call(c, addr, RequestCode.DELETE_KV_CONFIG, key).code == ResponseCode.SUCCESS
    assert call(c, addr, RequestCode.GET_KV_CONFIG, key).code == ResponseCode.QUERY_NOT_FOUND


def test_missing_ext_field_is_an_error_not_a_crash(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    resp = call(remoting_client, namesrv.addr, RequestCode.REGISTER_BROKER, {"clusterName": "c"})
    assert resp.code == ResponseCode.SYSTEM_ERROR and "brokerName" in (resp.remark or "")
    bad_body = request(
        RequestCode.REGISTER_BROKER,
        {"clusterName": "c", "brokerName": "b", "brokerId": 0, "brokerAddr": "127.0.0.1:1"},
        b"{not json",
    )
    assert remoting_client.invoke_sync(namesrv.addr, bad_body).code == ResponseCode.SYSTEM_ERROR
    assert route(remoting_client, namesrv.addr, "x").code == ResponseCode.TOPIC_NOT_EXIST


def test_unsupported_code(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    resp = call(remoting_client, namesrv.addr, RequestCode.SEND_MESSAGE)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_unregister_removes_routes(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    register(remoting_client, namesrv.addr, "broker-a", "127.0.0.1:10911", ["Shared", "OnlyA"], cluster="c")
    register(remoting_client, namesrv.addr, "broker-b", "127.0.0.1:10921", ["Shared"], cluster="c")
    ext = {"clusterName": "c", "brokerAddr": "127.0.0.1:10911", "brokerName": "broker-a", "brokerId": 0}
    assert call(remoting_client, namesrv.addr, RequestCode.UNREGISTER_BROKER, ext).code == ResponseCode.SUCCESS

    assert route(remoting_client, namesrv.addr, "OnlyA").code == ResponseCode.TOPIC_NOT_EXIST
    shared = orjson.loads(route(remoting_client, namesrv.addr, "Shared").body)
    assert [q["brokerName"] for q in shared["queueDatas"]] == ["broker-b"]
    info = orjson.loads(call(remoting_client, namesrv.addr, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["clusterAddrTable"] == {"c": ["broker-b"]} and list(info["brokerAddrTable"]) == ["broker-b"]


def test_silent_broker_expires_with_its_routes(
    start_namesrv: Callable[..., NamesrvProcess], remoting_client: RemotingClient
) -> None:
    ns = start_namesrv(scanNotActiveBrokerInterval=200, brokerChannelExpiredTime=1000)
    c, addr = remoting_client, ns.addr
    register(c, addr, "quiet", "127.0.0.1:10911", ["QuietTopic", "Both"])
    register(c, addr, "chatty", "127.0.0.1:10921", ["ChattyTopic", "Both"])
    assert route(c, addr, "QuietTopic").code == ResponseCode.SUCCESS

    # "chatty" keeps re-registering (as brokers do every 30 s); "quiet" stops.
    started = time.monotonic()
    while time.monotonic() - started < 1.8:
        register(c, addr, "chatty", "127.0.0.1:10921", ["ChattyTopic", "Both"])
        time.sleep(0.2)
    wait_for(lambda: route(c, addr, "QuietTopic").code == ResponseCode.TOPIC_NOT_EXIST, 3, "quiet expires")
    assert time.monotonic() - started >= 0.9

    assert route(c, addr, "ChattyTopic").code == ResponseCode.SUCCESS
    both = orjson.loads(route(c, addr, "Both").body)
    assert [q["brokerName"] for q in both["queueDatas"]] == ["chatty"]
    info = orjson.loads(call(c, addr, RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert list(info["brokerAddrTable"]) == ["chatty"]
    assert info["clusterAddrTable"] == {"DefaultCluster": ["chatty"]}
    assert "broker_expired" in ns.stderr_text()


def test_two_namesrvs_are_independent(
    start_namesrv: Callable[..., NamesrvProcess], remoting_client: RemotingClient
) -> None:
    first, second = start_namesrv(), start_namesrv()
    register(remoting_client, first.addr, "broker-a", "127.0.0.1:10911", ["OnlyInFirst"])
    assert route(remoting_client, first.addr, "OnlyInFirst").code == ResponseCode.SUCCESS
    assert route(remoting_client, second.addr, "OnlyInFirst").code == ResponseCode.TOPIC_NOT_EXIST
    call(remoting_client, second.addr, RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "2"})
    assert call(remoting_client, first.addr, RequestCode.GET_KV_CONFIG, {"namespace": "n", "key": "k"}).code == (
        ResponseCode.QUERY_NOT_FOUND
    )
    # One of them going away does not disturb the other.
    first.kill()
    assert call(remoting_client, second.addr, RequestCode.GET_KV_CONFIG, {"namespace": "n", "key": "k"}).ext == {
        "value": "2"
    }


def test_garbage_does_not_kill_it(namesrv: NamesrvProcess, remoting_client: RemotingClient) -> None:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 3000)
    sock.connect(f"tcp://{namesrv.addr}")
    try:
        for frames in (
            [b"\xff\xfe"],
            [pack_frame(b"{")],
            [pack_frame(b"null", b"x")],
            [b'{"code": 103, "opaque": 3}', b""],  # two frames, no length field: dropped
            [pack_frame(b'{"code": "103", "opaque": 1}')],
            [pack_frame(b"{}"), b"", b"", b""],
            [pack_frame(b'{"code": 105, "opaque": 2, "ext": {"topic": ["not", "a", "string"]}}')],
        ):
            sock.send_multipart(frames)
        answers = {}
        for _ in range(2):
            reply = decode(sock.recv_multipart())
            answers[reply.opaque] = reply.code
        assert answers == {1: ResponseCode.SYSTEM_ERROR, 2: ResponseCode.SYSTEM_ERROR}
    finally:
        sock.close()
    assert namesrv.alive
    assert route(remoting_client, namesrv.addr, "Anything").code == ResponseCode.TOPIC_NOT_EXIST


def test_sigterm_stops_it_cleanly(namesrv: NamesrvProcess) -> None:
    assert namesrv.stop() == 0
    assert "namesrv_stopped" in namesrv.stderr_text()


def test_config_file(tmp_path: Path, remoting_client: RemotingClient) -> None:
    port = free_port()
    conf = tmp_path / "namesrv.conf"
    conf.write_text(
        f"# RocketMQ-style properties\nlistenPort={port}\nlistenAddress=127.0.0.1\n"
        f"kvConfigPath={tmp_path / 'kv.json'}\n"
    )
    addr = f"127.0.0.1:{port}"
    proc = ServiceProcess("namesrv", ["-c", str(conf)], tmp_path, ready=remoting_probe(addr))
    proc.start()
    try:
        call(remoting_client, addr, RequestCode.PUT_KV_CONFIG, {"namespace": "a", "key": "b", "value": "c"})
        assert orjson.loads((tmp_path / "kv.json").read_bytes()) == {"configTable": {"a": {"b": "c"}}}
    finally:
        proc.stop()


def test_bad_config_exits_with_an_error(tmp_path: Path) -> None:
    proc = ServiceProcess("namesrv", ["--set", "listenPort=notanumber"], tmp_path)
    proc.start()
    assert proc.proc is not None and proc.proc.wait(10) == 2
    assert "listenPort" in proc.stderr_text()
