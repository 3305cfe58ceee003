"""The TCP doors of a real name server and broker, spoken to as RocketMQ's own clients speak: remoting frames
with string-valued ``extFields`` (tests/tcpkit.py), beside rocketmesh's SDK over ZeroMQ on the same topics."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from clientkit import FAST_CLIENT
from procs import FAST_BROKER, BrokerProcess, NamesrvProcess, free_port, wait_for
from rocketmesh.client import Admin, CMResult, MQBrokerError, MQClientError, Producer
from rocketmesh.client.consumer import PullConsumer
from rocketmesh.model.codec import decode_message_id, decode_record, decode_records, encode_batch
from rocketmesh.model.fields import encode_properties
from rocketmesh.model.message import Message, MessageQueue
from rocketmesh.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.command import ONEWAY_FLAG, RESPONSE_FLAG
from rocketmesh.remoting.protocol.rocketmq_wire import LanguageCode, SerializeType
from tcpkit import RawClient, cmd

TOPIC = "DoorTopic"


@dataclass
class Mesh:
    namesrv: NamesrvProcess
    broker: BrokerProcess
    ns_door: str
    broker_door: str
    admin: Admin


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    root: Path = tmp_path_factory.mktemp("door-mesh")
    ns_port, broker_port = free_port(), free_port()
    namesrv = NamesrvProcess(root / "namesrv", remotingListenPort=ns_port).start()
    broker = BrokerProcess(root / "broker", namesrv.addr, remotingListenPort=broker_port, **FAST_BROKER)
    try:
        broker.start(timeout_s=30)
        broker.wait_registered()
        admin = Admin(namesrv.addr)
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        admin.wait_topic_route(TOPIC)
        yield Mesh(namesrv, broker, f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}", admin)
        admin.close()
    finally:
        broker.stop()
        namesrv.stop()


def strings(ext: dict[str, Any]) -> dict[str, str]:
    """``ext`` as RocketMQ's C++ client writes it: every value a string, booleans as "1" / "0"."""
    return {k: ("1" if v else "0") if isinstance(v, bool) else str(v) for k, v in ext.items()}


def send_v2(client: RawClient, opaque: int, topic: str, body: bytes, props: dict[str, str], queue_id: int = 0,
            code: int = RequestCode.SEND_MESSAGE_V2, sys_flag: int = 0) -> tuple[Any, Any]:
    """A SEND_MESSAGE_V2 (or, with ``code``, a SEND_BATCH_MESSAGE) with the one-letter keys."""
    ext = {"a": "door-producer", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": sys_flag,
           "g": int(time.time() * 1000), "h": 0, "i": encode_properties(props).decode(), "j": 0, "k": False,
           "m": code == RequestCode.SEND_BATCH_MESSAGE}
    return client.call(cmd(code, opaque, strings(ext), body))


def test_a_route_asked_at_the_door_names_the_brokers_doors(mesh: Mesh) -> None:
    client = RawClient(mesh.ns_door)
    try:
        resp, _ = client.call(cmd(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": TOPIC}))
        assert resp.code == ResponseCode.SUCCESS and resp.opaque == 1 and resp.is_response
        route = orjson.loads(resp.body)
        assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"0": mesh.broker_door}]
        assert [(q["brokerName"], q["writeQueueNums"]) for q in route["queueDatas"]] == [("broker-a", 2)]

        # No route answers at once (RocketMQ's clients wait 5 s per unanswered route request).
        started = time.monotonic()
        resp, _ = client.call(cmd(RequestCode.GET_ROUTEINFO_BY_TOPIC, 2, {"topic": "NoSuchTopic"}))
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST and time.monotonic() - started < 1.0

        resp, _ = client.call(cmd(RequestCode.GET_BROKER_CLUSTER_INFO, 3))
        info = orjson.loads(resp.body)
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": mesh.broker_door}
    finally:
        client.close()
    # The same route over ZeroMQ: the brokers' ZeroMQ addresses, their doors beside them.
    with RemotingClient(name="door-test") as zmq_client:
        resp = zmq_client.invoke_sync(mesh.namesrv.addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}),
                                      3000)
    (bd,) = orjson.loads(resp.body)["brokerDatas"]
    assert bd["brokerAddrs"] == {"0": mesh.broker.addr} and bd["remotingAddrs"] == {"0": mesh.broker_door}


def test_a_v2_send_at_the_door_is_read_by_the_sdk_and_its_offset_id_names_the_door(mesh: Mesh) -> None:
    props = {"KEYS": "order-1", "TAGS": "paid", "UNIQ_KEY": "0A0000010000000000000000000000AA", "color": "red"}
    client = RawClient(mesh.broker_door)
    client_addr = "{}:{}".format(*client.sock.getsockname()[:2])
    try:
        resp, _ = send_v2(client, 7, TOPIC, b"from a RocketMQ client", props, queue_id=1)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        ip, port, offset = decode_message_id(resp.ext["msgId"])
        assert f"{ip}:{port}" == mesh.broker_door
        assert resp.ext["queueId"] == "1"
        # VIEW_MESSAGE_BY_ID at the address and offset the id names, as a RocketMQ client's viewMessage does.
        resp, _ = client.call(cmd(RequestCode.VIEW_MESSAGE_BY_ID, 8, {"offset": str(offset)}))
        assert resp.code == ResponseCode.SUCCESS
        assert decode_record(resp.body).body == b"from a RocketMQ client"
    finally:
        client.close()
    viewed = mesh.admin.view_message(resp_id := decode_record(resp.body).msg_id)
    assert viewed.body == b"from a RocketMQ client" and viewed.msg_id == resp_id
    assert viewed.born_host == client_addr and viewed.store_host == mesh.broker_door

    got: list = []
    with PullConsumer("door-sdk-reader", mesh.namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                      **FAST_CLIENT) as consumer:
        consumer.assign([MessageQueue(TOPIC, "broker-a", 1)])
        wait_for(lambda: got.extend(consumer.poll(timeout_ms=200)) or any(m.keys == "order-1" for m in got), 10,
                 "the SDK to read the message sent at the door")
    (m,) = [m for m in got if m.keys == "order-1"]
    assert (m.tags, m.properties["color"], m.unique_key) == ("paid", "red", props["UNIQ_KEY"])


def test_a_batch_at_the_door_is_stored_as_its_messages(mesh: Mesh) -> None:
    items = [Message(TOPIC, f"item {i}".encode(), keys=f"batch-{i}") for i in range(3)]
    client = RawClient(mesh.broker_door)
    try:
        resp, _ = send_v2(client, 9, TOPIC, encode_batch(items), {}, queue_id=0, code=RequestCode.SEND_BATCH_MESSAGE)
    finally:
        client.close()
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    ids = resp.ext["msgId"].split(",")
    assert len(ids) == 3
    assert [mesh.admin.view_message(i).keys for i in ids] == ["batch-0", "batch-1", "batch-2"]


def test_a_pull_at_the_door_answers_as_rocketmq_does(mesh: Mesh) -> None:
    client = RawClient(mesh.broker_door)
    try:
        send_v2(client, 1, TOPIC, b"to pull", {"KEYS": "pull-me"}, queue_id=0)
        pull = {"consumerGroup": "door-puller", "topic": TOPIC, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
                "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
                "expressionType": "TAG"}
        resp, _ = client.call(cmd(RequestCode.PULL_MESSAGE, 2, strings(pull)), SerializeType.ROCKETMQ)
        assert resp.code == ResponseCode.SUCCESS
        msgs = decode_records(resp.body)
        assert "pull-me" in [m.keys for m in msgs]
        end = int(resp.ext["nextBeginOffset"])
        assert end == int(resp.ext["maxOffset"]) == len(msgs)

        resp, _ = client.call(cmd(RequestCode.PULL_MESSAGE, 3, strings({**pull, "queueOffset": end})))
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        resp, _ = client.call(cmd(RequestCode.PULL_MESSAGE, 4, strings({**pull, "queueOffset": end + 100})))
        # RocketMQ's correction: past the end of a queue that still starts at 0, start again from 0.
        assert resp.code == ResponseCode.PULL_OFFSET_MOVED and resp.ext["nextBeginOffset"] == "0"

        # Offsets: UPDATE_CONSUMER_OFFSET as a oneway (no answer) and with flag 0 (answered), both applied.
        update = {"consumerGroup": "door-puller", "topic": TOPIC, "queueId": "0", "commitOffset": "1"}
        client.send(cmd(RequestCode.UPDATE_CONSUMER_OFFSET, 5, update, flag=ONEWAY_FLAG))
        query = {"consumerGroup": "door-puller", "topic": TOPIC, "queueId": "0"}
        wait_for(lambda: client.call(cmd(RequestCode.QUERY_CONSUMER_OFFSET, 6, query))[0].ext.get("offset") == "1",
                 5, "the oneway offset update")
        resp, _ = client.call(cmd(RequestCode.UPDATE_CONSUMER_OFFSET, 7, {**update, "commitOffset": str(end)}))
        assert resp.code == ResponseCode.SUCCESS and resp.opaque == 7
        resp, _ = client.call(cmd(RequestCode.QUERY_CONSUMER_OFFSET, 8, query))
        assert resp.ext["offset"] == str(end)
    finally:
        client.close()


def test_a_cpp_style_heartbeat_registers_and_a_closed_connection_leaves_at_once(mesh: Mesh) -> None:
    group = "door-consumers"
    heartbeat = {
        "clientID": "127.0.0.1@4242#cpp", "producerDataSet": [],
        # The C++ client's enums are ordinals; its codeSet may be empty.
        "consumerDataSet": [{"groupName": group, "consumeType": 1, "messageModel": 1, "consumeFromWhere": 0,
                             "unitMode": False,
                             "subscriptionDataSet": [{"topic": TOPIC, "subString": "paid || shipped",
                                                      "tagsSet": ["paid", "shipped"], "codeSet": [],
                                                      "subVersion": 1, "classFilterMode": False}]}],
    }
    client = RawClient(mesh.broker_door)
    try:
        resp, _ = client.call(cmd(RequestCode.HEART_BEAT, 1, {}, orjson.dumps(heartbeat)))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        conn = mesh.admin.consumer_connection(group)
        assert conn.message_model == "CLUSTERING" and conn.consume_type == "CONSUME_PASSIVELY"
        assert conn.consume_from_where == "CONSUME_FROM_LAST_OFFSET"
        resp, _ = client.call(cmd(RequestCode.GET_CONSUMER_LIST_BY_GROUP, 2, {"consumerGroup": group}))
        assert resp.code == ResponseCode.SUCCESS, resp
        assert orjson.loads(resp.body)["consumerIdList"] == ["127.0.0.1@4242#cpp"]

        # A pull without an expression (as Java's push consumers send them) is filtered by the heartbeat's.
        for i, tag in enumerate(["paid", "other", "shipped"]):
            send_v2(client, 10 + i, TOPIC, f"tagged {tag}".encode(), {"TAGS": tag, "KEYS": f"tag-{tag}"}, 1)
        pull = {"consumerGroup": group, "topic": TOPIC, "queueId": "1", "queueOffset": "0", "maxMsgNums": "32",
                "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0"}
        resp, _ = client.call(cmd(RequestCode.PULL_MESSAGE, 20, pull))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        tags = {m.tags for m in decode_records(resp.body) if (m.keys or "").startswith("tag-")}
        assert tags == {"paid", "shipped"}
        resp, _ = client.call(cmd(RequestCode.PULL_MESSAGE, 21, {**pull, "consumerGroup": "no-heartbeat-group"}))
        assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST and "no-heartbeat-group" in (resp.remark or "")
    finally:
        client.close()
    wait_for(lambda: not online(mesh.admin, group), 3, "the consumer whose connection closed to leave its group")


def test_the_offset_index_and_config_requests_of_rocketmq_tools_at_the_door(mesh: Mesh) -> None:
    """GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP, QUERY_MESSAGE and CHECK_CLIENT_CONFIG, as
    RocketMQ's clients and mqadmin ask them (string ext fields)."""
    topic = "DoorTools"
    client = RawClient(mesh.broker_door)
    try:
        before = int(time.time() * 1000)
        for i in range(3):
            resp, _ = send_v2(client, i, topic, b"tool %d" % i, {"KEYS": "tool-key"}, queue_id=0)
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        queue = {"topic": topic, "queueId": "0"}
        resp, _ = client.call(cmd(RequestCode.GET_MAX_OFFSET, 10, queue))
        assert (resp.code, resp.ext["offset"]) == (ResponseCode.SUCCESS, "3")
        resp, _ = client.call(cmd(RequestCode.GET_MIN_OFFSET, 11, queue))
        assert (resp.code, resp.ext["offset"]) == (ResponseCode.SUCCESS, "0")
        resp, _ = client.call(cmd(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, 12, {**queue, "timestamp": str(before)}))
        assert (resp.code, resp.ext["offset"]) == (ResponseCode.SUCCESS, "0")
        query = {"topic": topic, "key": "tool-key", "maxNum": "32", "beginTimestamp": "0",
                 "endTimestamp": str(2**62)}
        resp, _ = wait_query(client, query, 3)
        assert sorted(m.body for m in decode_records(resp.body)) == [b"tool 0", b"tool 1", b"tool 2"]
        assert int(resp.ext["indexLastUpdatePhyoffset"]) > 0
        check = {"clientId": "127.0.0.1@cpp", "group": "door-tools",
                 "subscriptionData": {"topic": topic, "subString": "*", "expressionType": "TAG"}}
        resp, _ = client.call(cmd(RequestCode.CHECK_CLIENT_CONFIG, 14, {}, orjson.dumps(check)))
        assert resp.code == ResponseCode.SUCCESS
        sql = {**check, "subscriptionData": {"topic": topic, "subString": "a > 1", "expressionType": "SQL92"}}
        resp, _ = client.call(cmd(RequestCode.CHECK_CLIENT_CONFIG, 15, {}, orjson.dumps(sql)))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "enablePropertyFilter" in (resp.remark or "")
    finally:
        client.close()


def test_the_connection_and_progress_queries_of_mqadmin_at_the_door(mesh: Mesh) -> None:
    """GET_PRODUCER_CONNECTION_LIST, QUERY_TOPIC_CONSUME_BY_WHO and GET_BROKER_CONSUME_STATS as mqadmin asks
    them (string ext fields), answered with RocketMQ's body field names."""
    heartbeat = {"clientID": "127.0.0.1@4343#java", "producerDataSet": [{"groupName": "door-pg"}],
                 "consumerDataSet": [{"groupName": "door-who", "consumeType": "CONSUME_PASSIVELY",
                                      "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                      "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}]}]}
    client = RawClient(mesh.broker_door)
    try:
        # A C++ client's heartbeat, in RocketMQ's binary header with its language and version code.
        resp, _ = client.call(cmd(RequestCode.HEART_BEAT, 1, {}, orjson.dumps(heartbeat)), SerializeType.ROCKETMQ,
                              LanguageCode.CPP, 373)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        resp, _ = client.call(cmd(RequestCode.GET_PRODUCER_CONNECTION_LIST, 2, {"producerGroup": "door-pg"}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        [conn] = orjson.loads(resp.body)["connectionSet"]
        assert {"clientId", "clientAddr", "language", "version"} <= set(conn)
        # What the client said of itself, as RocketMQ's console shows it.
        assert (conn["clientId"], conn["language"], conn["version"]) == ("127.0.0.1@4343#java", "CPP", 373)
        with Producer("door-sdk-pg", mesh.namesrv.addr, **FAST_CLIENT) as sdk:
            assert sdk.send(Message(TOPIC, b"from the SDK")).ok  # its route names the broker it heartbeats

            def sdk_connections() -> list[Any]:
                try:
                    return mesh.admin.producer_connection("door-sdk-pg").connections
                except MQBrokerError:
                    return []  # no heartbeat yet
            [mine] = wait_for(sdk_connections, 10, what="the SDK producer's heartbeat")
        assert mine.language == "PYTHON", mine
        resp, _ = client.call(cmd(RequestCode.GET_PRODUCER_CONNECTION_LIST, 3, {"producerGroup": "door-nobody"}))
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "the producer group[door-nobody] not exist")

        commit = {"consumerGroup": "door-committed", "topic": TOPIC, "queueId": "0", "commitOffset": "0"}
        resp, _ = client.call(cmd(RequestCode.UPDATE_CONSUMER_OFFSET, 4, commit))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        resp, _ = client.call(cmd(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, 5, {"topic": TOPIC}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert {"door-committed", "door-who"} <= set(orjson.loads(resp.body)["groupList"])

        resp, _ = client.call(cmd(RequestCode.GET_BROKER_CONSUME_STATS, 6, {"isOrder": "false"}))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        body = orjson.loads(resp.body)
        assert set(body) == {"brokerAddr", "totalDiff", "consumeStatsList"} and isinstance(body["totalDiff"], int)
        per_group = {g: stats for entry in body["consumeStatsList"] for g, stats in entry.items()}
        [stats] = per_group["door-committed"]
        assert set(stats) == {"offsetTable", "consumeTps"}
        assert {"brokerOffset", "consumerOffset", "lastTimestamp"} <= set(stats["offsetTable"][0])
        resp, _ = client.call(cmd(RequestCode.GET_BROKER_CONSUME_STATS, 7, {}))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "isOrder" in (resp.remark or "")
    finally:
        client.close()


def wait_query(client: RawClient, query: dict[str, str], count: int) -> Any:
    """QUERY_MESSAGE until the index has ``count`` messages of the key (it is built behind the commitlog)."""
    found: list = []

    def asked() -> bool:
        found[:] = [client.call(cmd(RequestCode.QUERY_MESSAGE, 13, query))]
        resp = found[0][0]
        return resp.code == ResponseCode.SUCCESS and len(decode_records(resp.body)) >= count
    wait_for(asked, 5, "the index to have the messages")
    return found[0]


def online(admin: Admin, group: str) -> bool:
    try:
        return bool(admin.consumer_connection(group).connections)
    except MQClientError as exc:
        assert exc.response_code == ResponseCode.CONSUMER_NOT_ONLINE
        return False


def next_request(client: RawClient, code: int) -> RemotingCommand:
    """The next request the broker sends ``client`` with ``code`` (others, such as NOTIFY_CONSUMER_IDS_CHANGED,
    are passed over)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        frame, _ = client.recv(max(0.1, deadline - time.monotonic()))
        if not frame.is_response and frame.code == code:
            return frame
    raise AssertionError(f"no request {code} from the broker")


def in_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``fn`` on a thread; the returned call waits for it and returns its result (or raises its error)."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting test
            out.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> Any:
        thread.join(15)
        assert out, "the admin call did not return"
        ok, value = out[0]
        if not ok:
            raise value
        return value
    return result


def test_the_broker_calls_a_door_client_back_for_an_admin(mesh: Mesh) -> None:
    group, client_id = "door-called-back", "127.0.0.1@5151#cpp"
    heartbeat = {"clientID": client_id, "producerDataSet": [],
                 "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                                      "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                      "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "tagsSet": [],
                                                               "codeSet": [], "subVersion": 1}]}]}
    client = RawClient(mesh.broker_door)

    def beat() -> None:
        # The mesh's broker lets a silent client go after 3 s: each step starts with a fresh heartbeat.
        resp, _ = client.call(cmd(RequestCode.HEART_BEAT, 1, {}, orjson.dumps(heartbeat)))
        assert resp.code == ResponseCode.SUCCESS, resp.remark

    try:
        beat()
        resp, _ = send_v2(client, 2, TOPIC, b"consume me directly", {"KEYS": "called-back"}, queue_id=1)
        msg_id = resp.ext["msgId"]

        # GET_CONSUMER_RUNNING_INFO: the broker asks over this connection and relays the answer as it is,
        # mqTable keyed by queue objects as RocketMQ's C++ client writes it.
        asked = in_thread(lambda: mesh.admin.consumer_running_info(group, client_id))
        call = next_request(client, RequestCode.GET_CONSUMER_RUNNING_INFO)
        assert (call.ext["consumerGroup"], call.ext["clientId"]) == (group, client_id)
        body = (b'{"jstack":"","properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY","PROP_CONSUMEORDERLY":"false",'
                b'"PROP_CLIENT_VERSION":"V2_1_0"},"subscriptionSet":[{"topic":"' + TOPIC.encode() + b'","subString":'
                b'"*","tagsSet":[],"codeSet":[],"subVersion":1,"classFilterMode":false}],"mqTable":{'
                b'{"brokerName":"broker-a","queueId":1,"topic":"' + TOPIC.encode() + b'"}:{"commitOffset":7,'
                b'"cachedMsgCount":2,"locked":false,"lastConsumeTimestamp":1700000000000}}}')
        client.send(cmd(ResponseCode.SUCCESS, call.opaque, {}, body, flag=RESPONSE_FLAG))
        info = asked()
        assert info.properties["PROP_CLIENT_VERSION"] == "V2_1_0" and info.consume_type == "CONSUME_PASSIVELY"
        assert [(s.topic, s.sub_string) for s in info.subscriptions] == [(TOPIC, "*")]
        ((mq, pq),) = info.mq_table.items()
        assert mq == MessageQueue(TOPIC, "broker-a", 1)
        assert (pq.commit_offset, pq.cached_msg_count, pq.last_consume_timestamp) == (7, 2, 1700000000000)

        # CONSUME_MESSAGE_DIRECTLY: the stored record in the body, the broker's name in the header.
        beat()
        asked = in_thread(lambda: mesh.admin.consume_message_directly(group, client_id, msg_id))
        call = next_request(client, RequestCode.CONSUME_MESSAGE_DIRECTLY)
        assert (call.ext["msgId"], call.ext["brokerName"]) == (msg_id, "broker-a")
        record = decode_record(call.body)
        assert (record.body, record.keys, record.msg_id) == (b"consume me directly", "called-back", msg_id)
        client.send(cmd(ResponseCode.SUCCESS, call.opaque, {},
                        b'{"order":false,"autoCommit":true,"consumeResult":"CR_LATER","spentTimeMills":4}',
                        flag=RESPONSE_FLAG))
        result = asked()
        assert (result.consume_result, result.spent_time_mills, result.order) == (CMResult.CR_LATER, 4, False)

        # A client's refusal comes back as it gave it.
        beat()
        asked = in_thread(lambda: mesh.admin.consumer_running_info(group, client_id))
        call = next_request(client, RequestCode.GET_CONSUMER_RUNNING_INFO)
        remark = f"The Consumer Group <{group}> not exist in this consumer"
        client.send(RemotingCommand(ResponseCode.SYSTEM_ERROR, call.opaque, RESPONSE_FLAG, remark, {}))
        with pytest.raises(MQBrokerError) as err:
            asked()
        assert err.value.response_code == ResponseCode.SYSTEM_ERROR and err.value.remark == remark

        # A client that does not answer: the broker's wait ends before the admin's, naming the client.
        beat()
        with Admin(mesh.namesrv.addr, timeout_ms=4000, instance_name="door-impatient-admin") as impatient:
            started = time.monotonic()
            with pytest.raises(MQBrokerError) as err:
                impatient.consumer_running_info(group, client_id)
            assert time.monotonic() - started < 4.0
        assert err.value.response_code == ResponseCode.CONSUME_MSG_TIMEOUT
        assert group in err.value.remark and client_id in err.value.remark
        next_request(client, RequestCode.GET_CONSUMER_RUNNING_INFO)  # the call it left unanswered
    finally:
        client.close()


@pytest.mark.parametrize("which", ["namesrv", "broker"])
def test_an_unknown_code_is_not_supported_and_named(mesh: Mesh, which: str) -> None:
    client = RawClient(mesh.ns_door if which == "namesrv" else mesh.broker_door)
    try:
        resp, _ = client.call(cmd(4321, 1))
    finally:
        client.close()
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4321" in (resp.remark or "")


def test_sync_flush_sends_at_the_door_are_answered_once_flushed(mesh: Mesh, tmp_path: Path) -> None:
    """Under SYNC_FLUSH a send stored on the door's thread is flushed by that thread's round (group commit)."""
    port = free_port()
    broker = BrokerProcess(tmp_path / "sync-broker", mesh.namesrv.addr, name="broker-sync",
                           remotingListenPort=port, flushDiskType="SYNC_FLUSH")
    broker.start(timeout_s=30)
    client = RawClient(f"127.0.0.1:{port}")
    try:
        for i in range(20):
            started = time.monotonic()
            resp, _ = send_v2(client, i, "DoorSyncFlush", b"durable %d" % i, {"KEYS": f"sync-{i}"})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            assert time.monotonic() - started < 2.0, "a SYNC_FLUSH send waited for a flush nobody did"
    finally:
        client.close()
        broker.stop()
