"""Master/slave replication through the ha service, over the wire, with real processes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from procs import BrokerProcess, wait_for
from rocketmesh import Admin, Message, MQBrokerError, Producer
from rocketmesh.model.codec import decode_records
from rocketmesh.remoting import RemotingClient, RequestCode, ResponseCode, request
from rocketmesh.remoting.headers import PullMessageRequestHeader, to_ext

TOPIC = "HaTopic"


def commitlog_digest(broker: BrokerProcess, upto: int) -> str:
    """SHA-256 of a broker's commitlog bytes below ``upto``."""
    h = hashlib.sha256()
    left = upto
    for path in sorted((broker.store_dir / "commitlog").iterdir()):
        if left <= 0:
            break
        data = path.read_bytes()[:left]
        h.update(data)
        left -= len(data)
    return h.hexdigest()


def runtime(client: RemotingClient, broker: BrokerProcess) -> dict:
    import orjson

    resp = client.invoke_sync(broker.addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 3000)
    return orjson.loads(resp.body)["table"]


def pull_all(client: RemotingClient, broker: BrokerProcess, topic: str, queue_id: int) -> list[str]:
    got: list[str] = []
    offset = 0
    while True:
        header = PullMessageRequestHeader("ha-test", topic, queue_id, offset, 64, 0, subscription="*")
        resp = client.invoke_sync(broker.addr, request(RequestCode.PULL_MESSAGE, to_ext(header)), 3000)
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
    with Admin(namesrv.addr) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        admin.wait_topic_route(TOPIC)
    with Producer("ha-producer", namesrv.addr) as p:
        sent = [f"m{i}" for i in range(300)]
        for i in range(0, 300, 30):
            p.send_batch([Message(TOPIC, b) for b in sent[i:i + 30]])
    end = runtime(remoting_client, master)["commitLogMaxOffset"]
    wait_for(lambda: runtime(remoting_client, slave)["commitLogMaxOffset"] == end, 15,
             what="the slave's commitlog at the master's end")
    assert commitlog_digest(slave, end) == commitlog_digest(master, end)
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
