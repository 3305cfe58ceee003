"""Plain ACL, black-box: a name server and a broker (and the scheduler and txn-checker) as real processes
with aclEnable=true, one set per module, each refusal recorded for RELIABILITY.md."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from procs import BrokerProcess, NamesrvProcess, SchedulerProcess, TxnCheckerProcess, free_port, wait_for
from rmqclients import CPP_044, ClientRuns, require
from rocketmesh import Admin, LocalTransactionState, Message, Producer, TransactionProducer
from rocketmesh.acl import AclSigner, SessionCredentials
from rocketmesh.acl.signer import rocketmq_signature
from rocketmesh.client.consumer import PullConsumer
from rocketmesh.client.errors import MQBrokerError
from rocketmesh.model.message import MessageExt
from rocketmesh.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.headers import CreateTopicRequestHeader, PullMessageRequestHeader
from tcpkit import RawClient

ADMIN = SessionCredentials("rocketmq2", "12345678")
PUB_ONLY = SessionCredentials("publisher", "pubsecret")
READER = SessionCredentials("reader01", "readsecret")
TOPIC, DENIED_TOPIC, GROUP = "AclTopic", "AclDenied", "acl-group-ok"
RELOAD_MS = 200
FAST = dict(heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000)

ACL_YAML = f"""\
globalWhiteRemoteAddresses:
  - 10.250.0.*
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {PUB_ONLY.access_key}
    secretKey: {PUB_ONLY.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=PUB
  - accessKey: {READER.access_key}
    secretKey: {READER.secret_key}
    whiteRemoteAddress: 192.168.0.{{1,2}}
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    topicPerms:
      - {DENIED_TOPIC}=DENY
    groupPerms:
      - {GROUP}=SUB
"""


class Mesh:
    """The module's processes and what the tests need of them."""

    def __init__(self, root: Path) -> None:
        self.acl_file = root / "plain_acl.yml"
        self.acl_file.write_text(ACL_YAML)
        acl = dict(aclEnable="true", aclFile=str(self.acl_file), aclReloadIntervalMs=RELOAD_MS)
        # Both open the TCP door too: RocketMQ's own clients sign their way, checked with the same accounts.
        self.namesrv_door, self.broker_door = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        self.namesrv = NamesrvProcess(root / "namesrv", remotingListenPort=self.namesrv_door.split(":")[1],
                                      **acl).start()
        self.broker = BrokerProcess(root / "broker", self.namesrv.addr, credentials=ADMIN,
                                    remotingListenPort=self.broker_door.split(":")[1], **acl)
        self.broker.start(timeout_s=30)
        self.broker.wait_registered()  # so REGISTER_BROKER was signed, and accepted
        self.admin = Admin(self.namesrv.addr, access_key=ADMIN.access_key, secret_key=ADMIN.secret_key)
        for topic in (TOPIC, DENIED_TOPIC):
            self.admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
            self.admin.wait_topic_route(topic)
        self.system: list = []

    def stop(self) -> None:
        self.admin.close()
        for proc in [*self.system, self.broker, self.namesrv]:
            proc.stop()


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    m = Mesh(tmp_path_factory.mktemp("acl"))
    try:
        yield m
    finally:
        m.stop()


def call(addr: str, cmd: RemotingCommand, credentials: SessionCredentials | None = None,
         clock=time.time) -> RemotingCommand:
    """One raw request, signed with ``credentials`` (at ``clock``'s time) when given."""
    hook = None if credentials is None else AclSigner(credentials, clock)
    with RemotingClient(name="acl-test", rpc_hook=hook) as client:
        return client.invoke_sync(addr, cmd, 3000)


def pull(topic: str = TOPIC, group: str = GROUP) -> RemotingCommand:
    return request(RequestCode.PULL_MESSAGE, PullMessageRequestHeader(
        group, topic, 0, 0, max_msg_nums=1, suspend_timeout_millis=0).to_ext())


def send(topic: str = TOPIC, body: bytes = b"x") -> RemotingCommand:
    ext = {"producerGroup": "acl-raw-p", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 1,
           "queueId": 0, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": "",
           "reconsumeTimes": 0, "batch": False}
    return request(RequestCode.SEND_MESSAGE, ext, body)


def refused(resp: RemotingCommand, *words: str) -> str:
    assert resp.code == ResponseCode.NO_PERMISSION, (resp.code, resp.remark)
    for word in words:
        assert word in (resp.remark or ""), (word, resp.remark)
    return f"NO_PERMISSION: {resp.remark}"


def test_an_account_with_pub_only_sends_but_cannot_pull(mesh: Mesh, reliability) -> None:
    with Producer("acl-pub-p", mesh.namesrv.addr, access_key=PUB_ONLY.access_key,
                  secret_key=PUB_ONLY.secret_key, **FAST) as producer:
        assert producer.send(Message(TOPIC, b"published")).send_status.value == "SEND_OK"
    resp = call(mesh.broker.addr, pull(), PUB_ONLY)
    remark = refused(resp, "PULL_MESSAGE", f"accessKey={PUB_ONLY.access_key}", f"SUB permission on topic {TOPIC}",
                     "it has PUB, from topicPerms")
    reliability.security("pull with a PUB-only account", refused=remark, note="the same account's send succeeded")


def test_no_credentials_are_refused_by_broker_and_namesrv_naming_what(mesh: Mesh, reliability) -> None:
    remark = refused(call(mesh.broker.addr, send()), "SEND_MESSAGE", "no AccessKey")
    reliability.security("send without credentials", refused=remark)
    route = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    remark = refused(call(mesh.namesrv.addr, route), "[namesrv]", "GET_ROUTEINFO_BY_TOPIC", "no AccessKey")
    reliability.security("route lookup without credentials", refused=remark)
    # The SDK's typed error carries the code and the remark.
    with pytest.raises(MQBrokerError) as err:
        with Producer("acl-anon-p", mesh.namesrv.addr) as producer:
            producer.send(Message(TOPIC, b"anonymous"))
    assert err.value.response_code == ResponseCode.NO_PERMISSION
    assert "no AccessKey" in err.value.remark


def test_a_wrong_secret_an_altered_request_and_an_unknown_account_are_refused(mesh: Mesh, reliability) -> None:
    wrong = SessionCredentials(PUB_ONLY.access_key, "not-the-secret")
    remark = refused(call(mesh.broker.addr, send(), wrong), "signature check failed",
                     f"accessKey={PUB_ONLY.access_key}")
    reliability.security("send with a wrong secretKey", refused=remark)
    # Signed for one topic, then pointed at another on the way.
    cmd = send(TOPIC)
    AclSigner(READER)(cmd)
    cmd.ext["topic"] = DENIED_TOPIC
    with RemotingClient(name="acl-test") as client:
        remark = refused(client.invoke_sync(mesh.broker.addr, cmd, 3000), "signature check failed")
    reliability.security("signed request altered after signing", refused=remark)
    remark = refused(call(mesh.broker.addr, send(), SessionCredentials("nobody1", "whatever")), "no account")
    reliability.security("send with an unknown accessKey", refused=remark)


def door_call(addr: str, code: int, ext: dict[str, str], body: bytes = b"",
              credentials: SessionCredentials | None = None) -> RemotingCommand:
    """One request at a TCP door as RocketMQ's clients send it: string ext fields, OnsChannel, and AccessKey and
    Signature (RocketMQ's HMAC-SHA1 of the values, then the body) when ``credentials`` are given."""
    ext = {**ext, "OnsChannel": "ALIYUN"}
    if credentials is not None:
        ext["AccessKey"] = credentials.access_key
        ext["Signature"] = rocketmq_signature(credentials.secret_key, ext, body)
    client = RawClient(addr)
    try:
        return client.call(RemotingCommand(code, 1, 0, None, ext, body))[0]
    finally:
        client.close()


def door_send(topic: str) -> dict[str, str]:
    """SEND_MESSAGE_V2's header, as the C++ and Java clients write it."""
    return {"a": "acl-door-p", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}


def test_the_tcp_doors_check_rocketmq_signatures_with_the_same_accounts(mesh: Mesh, reliability) -> None:
    resp = door_call(mesh.namesrv_door, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, credentials=READER)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    resp = door_call(mesh.broker_door, RequestCode.SEND_MESSAGE_V2, door_send(TOPIC), b"signed", PUB_ONLY)
    assert resp.code == ResponseCode.SUCCESS, resp.remark

    remark = refused(door_call(mesh.broker_door, RequestCode.SEND_MESSAGE_V2, door_send(DENIED_TOPIC), b"x",
                               PUB_ONLY), "SEND_MESSAGE_V2", f"PUB permission on topic {DENIED_TOPIC}")
    reliability.security("TCP door: a RocketMQ client's send to a topic its account may not publish",
                         refused=remark)
    # As RocketMQ's clients send without credentials: an empty AccessKey, a signature with no key.
    anonymous = {**door_send(TOPIC), "AccessKey": ""}
    remark = refused(door_call(mesh.broker_door, RequestCode.SEND_MESSAGE_V2, anonymous, b"x"), "no AccessKey")
    reliability.security("TCP door: a RocketMQ client without credentials", refused=remark)
    wrong = SessionCredentials(PUB_ONLY.access_key, "not-the-secret")
    remark = refused(door_call(mesh.broker_door, RequestCode.SEND_MESSAGE_V2, door_send(TOPIC), b"x", wrong),
                     "signature check failed")
    reliability.security("TCP door: a RocketMQ client with a wrong secretKey", refused=remark)
    remark = refused(door_call(mesh.namesrv_door, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, b"",
                               SessionCredentials("nobody1", "whatever")), "[namesrv]", "no account")
    reliability.security("TCP door: a route lookup with an unknown accessKey", refused=remark)


def test_a_real_rocketmq_client_signs_its_way_through_the_doors(mesh: Mesh, tmp_path: Path, reliability) -> None:
    """The C++ client of PyPI rocketmq 0.4.4, given an account's keys, sends at the doors; with a wrong secret
    its sends are refused (its log names the broker's remark)."""
    runs = ClientRuns(require(CPP_044), tmp_path, mesh.namesrv_door, [mesh.broker])
    try:
        send = [{"mode": "sync", "message": {"topic": TOPIC, "body": "signed by a C++ client", "keys": "cpp-acl"}}]
        ok = runs.start("producer", group="acl-cpp-p", sends=send, access_key=PUB_ONLY.access_key,
                        secret_key=PUB_ONLY.secret_key).sent()
        assert [e["status"] for e in ok] == [0]  # SEND_OK
        wrong = runs.start("producer", group="acl-cpp-p", sends=send, access_key=PUB_ONLY.access_key,
                           secret_key="not-the-secret")
        wrong.wait_for("send_failed")
        refusals = wrong.log_lines("signature check failed")
        assert refusals, wrong.report()
    finally:
        runs.stop_all()
    with Admin(mesh.namesrv.addr, access_key=ADMIN.access_key, secret_key=ADMIN.secret_key) as admin:
        assert [m.body for m in admin.query_msg_by_key(TOPIC, "cpp-acl")] == [b"signed by a C++ client"]
    # The client's log line carries the remark, then ",<code>[<function>:<line>]".
    line = refusals[0]
    remark = line[line.index("ACL refused"):].partition(",16[")[0]
    reliability.security("TCP door: the C++ client (rocketmq 0.4.4) with a wrong secretKey",
                         refused=f"NO_PERMISSION: {remark}", note="the same client with the right keys sends")


def test_an_expired_or_replayed_timestamp_is_refused(mesh: Mesh, reliability) -> None:
    five_minutes_ago = lambda: time.time() - 300  # noqa: E731 - a replay of a request captured then
    remark = refused(call(mesh.broker.addr, send(), ADMIN, five_minutes_ago), "replay window", "±60 s")
    reliability.security("request replayed 5 minutes after signing", refused=remark,
                         note="window ±60 s against the server's clock")
    ahead = lambda: time.time() + 120  # noqa: E731
    remark = refused(call(mesh.namesrv.addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}),
                          ADMIN, ahead), "replay window")
    reliability.security("request timestamped 2 minutes ahead", refused=remark)


def test_a_deny_topic_and_group_perms(mesh: Mesh, reliability) -> None:
    remark = refused(call(mesh.broker.addr, pull(DENIED_TOPIC), READER), f"topic {DENIED_TOPIC}", "it has DENY")
    reliability.security("pull of a topic=DENY", refused=remark)
    ok = call(mesh.broker.addr, pull(TOPIC, GROUP), READER)
    assert ok.code != ResponseCode.NO_PERMISSION, ok.remark
    remark = refused(call(mesh.broker.addr, pull(TOPIC, "other-group"), READER), "group other-group",
                     "from defaultGroupPerm")
    reliability.security("pull in a group outside groupPerms", refused=remark, note="defaultGroupPerm DENY")
    # The SDK consumer of the allowed group gets what the publisher sent.
    with Producer("acl-pub-p2", mesh.namesrv.addr, access_key=PUB_ONLY.access_key,
                  secret_key=PUB_ONLY.secret_key, **FAST) as producer:
        producer.send(Message(TOPIC, b"for-the-reader"))
    consumer = PullConsumer(GROUP, mesh.namesrv.addr, access_key=READER.access_key, secret_key=READER.secret_key,
                            consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST)
    consumer.subscribe(TOPIC)
    consumer.start()
    try:
        got: list[bytes] = []
        wait_for(lambda: got.extend(m.body for m in consumer.poll(500)) or b"for-the-reader" in got, 15,
                 "the reader's poll")
    finally:
        consumer.shutdown()


def test_admin_operations_need_the_admin_flag(mesh: Mesh, reliability) -> None:
    create = request(RequestCode.UPDATE_AND_CREATE_TOPIC, CreateTopicRequestHeader("AclNewTopic").to_ext())
    remark = refused(call(mesh.broker.addr, create, PUB_ONLY), "UPDATE_AND_CREATE_TOPIC", "is not admin",
                     f"accessKey={PUB_ONLY.access_key}")
    reliability.security("UPDATE_AND_CREATE_TOPIC by a non-admin account", refused=remark)
    with Admin(mesh.namesrv.addr, access_key=READER.access_key, secret_key=READER.secret_key) as reader:
        with pytest.raises(MQBrokerError) as err:
            reader.create_topic("AclNewTopic")
    assert err.value.response_code == ResponseCode.NO_PERMISSION
    mesh.admin.create_topic("AclNewTopic")
    assert mesh.admin.wait_topic_route("AclNewTopic").queue_datas


def _edit_acl(mesh: Mesh, text: str) -> None:
    # A different size as well as a later mtime: a change within the file system's time granularity counts.
    mesh.acl_file.write_text(text)


def test_white_listed_address_passes_unsigned_and_edits_apply_without_restart(mesh: Mesh, reliability) -> None:
    assert call(mesh.broker.addr, send()).code == ResponseCode.NO_PERMISSION
    _edit_acl(mesh, ACL_YAML.replace("  - 10.250.0.*", "  - 10.250.0.*\n  - 127.0.0.1"))
    try:
        wait_for(lambda: call(mesh.broker.addr, send()).code == ResponseCode.SUCCESS, 10,
                 "unsigned send from a white-listed address")
        wait_for(lambda: call(mesh.namesrv.addr, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
                              ).code == ResponseCode.SUCCESS, 10, "unsigned route lookup from a white-listed address")
    finally:
        _edit_acl(mesh, ACL_YAML)
    resp = wait_for(lambda: (r := call(mesh.broker.addr, send())).code == ResponseCode.NO_PERMISSION and r, 10,
                    "white list taken back")
    reliability.security("unsigned send after the white-list entry was removed (file edited, no restart)",
                         refused=refused(resp, "no AccessKey"))
    # A broken file on reload: logged, and the last good accounts stay.
    _edit_acl(mesh, "accounts: [{accessKey: x}]\n")
    try:
        # The file is looked at on the way of a request (at most every aclReloadIntervalMs).
        wait_for(lambda: call(mesh.broker.addr, pull(TOPIC, GROUP), READER) and
                 "acl_reload_failed_keeping_last_good" in mesh.broker.stderr_text(), 10, "the broken file logged")
        assert call(mesh.broker.addr, pull(TOPIC, GROUP), READER).code != ResponseCode.NO_PERMISSION
        refused(call(mesh.broker.addr, pull(TOPIC, GROUP), PUB_ONLY), "SUB permission")
    finally:
        _edit_acl(mesh, ACL_YAML)


def test_a_bad_acl_file_stops_the_start_with_its_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad_acl.yml"
    bad.write_text("accounts:\n  - accessKey: someone1\n    secretKey: s3cr3t!!\n    topicPerms: [T=WRITE]\n")
    proc = NamesrvProcess(tmp_path / "ns", aclEnable="true", aclFile=str(bad))
    proc.ready = None
    proc.start()
    wait_for(lambda: not proc.alive, 15, "namesrv exits")
    assert proc.returncode != 0
    assert "unknown permission 'WRITE'" in proc.stderr_text() and str(bad) in proc.stderr_text()


def test_system_services_work_under_acl_with_their_own_account(mesh: Mesh) -> None:
    root = mesh.acl_file.parent
    mesh.system.append(SchedulerProcess(root / "scheduler", mesh.namesrv.addr, name="scheduler", credentials=ADMIN,
                                        rebalanceIntervalMs=1000, heartbeatBrokerIntervalMs=1000,
                                        pollNameServerIntervalMs=1000).start(timeout_s=30))
    mesh.system.append(TxnCheckerProcess(root / "txn-checker", mesh.namesrv.addr, name="txn-checker",
                                         credentials=ADMIN, transactionTimeOut=1000, transactionCheckInterval=500,
                                         heartbeatBrokerIntervalMs=1000, pollNameServerIntervalMs=1000,
                                         persistOffsetIntervalMs=500).start(timeout_s=30))
    keys = dict(access_key=ADMIN.access_key, secret_key=ADMIN.secret_key)

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT_MESSAGE

    topic = "AclSystem"
    mesh.admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    mesh.admin.wait_topic_route(topic)
    consumer = PullConsumer("acl-system-c", mesh.namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            **keys, **FAST)
    consumer.subscribe(topic)
    consumer.start()
    try:
        with Producer("acl-delay-p", mesh.namesrv.addr, **keys, **FAST) as producer:
            producer.send(Message(topic, b"delayed", delay_level=1))
        with TransactionProducer("acl-tx-p", mesh.namesrv.addr, Listener(), **keys, **FAST) as tx:
            tx.send_message_in_transaction(Message(topic, b"checked-back"))
            got: set[bytes] = set()
            wait_for(lambda: got.update(m.body for m in consumer.poll(500)) or {b"delayed", b"checked-back"} <= got,
                     30, "the delayed message and the checked-back transaction")
    finally:
        consumer.shutdown()
    for proc in mesh.system:
        assert "acl_refused" not in mesh.broker.stderr_text() or proc.alive
