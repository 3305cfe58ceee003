"""Admin against real name server and broker processes (black box)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from procs import BrokerProcess, wait_for
from rocketmesh import Admin, Message, MQBrokerError, MQClientError, Producer
from rocketmesh.client import BrokerInfo, ResponseCode
from rocketmesh.model.message import MessageQueue

StartBroker = Callable[..., BrokerProcess]


@pytest.fixture
def admin(namesrv) -> Iterator[Admin]:
    with Admin(namesrv.addr) as a:
        yield a


def test_cluster_list(start_broker: StartBroker, namesrv, admin: Admin) -> None:
    a = start_broker(namesrv.addr, "broker-a")
    b = start_broker(namesrv.addr, "broker-b", cluster="OtherCluster")
    assert admin.cluster_list() == [
        BrokerInfo("DefaultCluster", "broker-a", 0, a.addr),
        BrokerInfo("OtherCluster", "broker-b", 0, b.addr),
    ]
    assert admin.cluster_list("OtherCluster") == [BrokerInfo("OtherCluster", "broker-b", 0, b.addr)]
    info = admin.cluster_info()
    assert info.cluster_names() == ["DefaultCluster", "OtherCluster"]
    assert info.master_addrs() == [a.addr, b.addr]


def test_create_route_status_delete(start_broker: StartBroker, namesrv, admin: Admin) -> None:
    a = start_broker(namesrv.addr, "broker-a")
    b = start_broker(namesrv.addr, "broker-b")
    written = admin.create_topic("AdminT", read_queue_nums=3, write_queue_nums=2)
    assert sorted(written) == sorted([a.addr, b.addr])
    # The brokers re-register with the name server right after the change; the list follows shortly.
    wait_for(lambda: "AdminT" in admin.topic_list(), 5, "AdminT in the name server's topic list")
    route = wait_for(lambda: len(admin.wait_topic_route("AdminT").queue_datas) == 2 and admin.topic_route("AdminT"))
    assert {(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas} == {
        ("broker-a", 3, 2, 6), ("broker-b", 3, 2, 6)}
    assert {bd.broker_name: bd.master_addr for bd in route.broker_datas} == {"broker-a": a.addr, "broker-b": b.addr}
    config = admin.topic_config_table(a.addr)["AdminT"]
    assert config["readQueueNums"] == 3 and config["writeQueueNums"] == 2
    status = admin.topic_status("AdminT")
    assert list(status) == [MessageQueue("AdminT", n, q) for n in ("broker-a", "broker-b") for q in range(2)]
    assert all(off.min_offset == 0 and off.max_offset == 0 for off in status.values())

    admin.delete_topic("AdminT")
    with pytest.raises(MQBrokerError) as ei:
        admin.topic_route("AdminT")
    assert ei.value.response_code == ResponseCode.TOPIC_NOT_EXIST
    assert "AdminT" not in admin.topic_config_table(a.addr)
    assert "AdminT" not in admin.topic_list()


def test_create_on_one_broker_or_one_cluster(start_broker: StartBroker, namesrv, admin: Admin) -> None:
    a = start_broker(namesrv.addr, "broker-a")
    b = start_broker(namesrv.addr, "broker-b", cluster="OtherCluster")
    assert admin.create_topic("OneT", 2, 2, broker_addr=b.addr) == [b.addr]
    assert "OneT" in admin.topic_config_table(b.addr) and "OneT" not in admin.topic_config_table(a.addr)
    assert admin.create_topic("ClusterT", 2, 2, cluster="DefaultCluster") == [a.addr]
    assert "ClusterT" not in admin.topic_config_table(b.addr)
    with pytest.raises(MQClientError, match="no cluster named"):
        admin.create_topic("X", cluster="NoSuchCluster")
    with pytest.raises(MQClientError):
        admin.create_topic("bad topic name")
    with pytest.raises(MQClientError):
        admin.create_topic("TBW102")


def test_topic_status_and_offsets(start_broker: StartBroker, admin: Admin, namesrv) -> None:
    start_broker(namesrv.addr)
    admin.create_topic("OffT", 2, 2)
    admin.wait_topic_route("OffT")
    mq0 = MessageQueue("OffT", "broker-a", 0)
    before = int(time.time() * 1000) - 1
    with Producer("off-producer", namesrv.addr) as p:
        first = p.send(Message("OffT", b"0"), queue=mq0)
        time.sleep(0.05)
        middle_ms = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(1, 5):
            p.send(Message("OffT", str(i).encode()), queue=mq0)
    after = int(time.time() * 1000) + 1
    wait_for(lambda: admin.max_offset(mq0) == 5, what="5 messages in the consume queue")  # built asynchronously
    status = admin.topic_status("OffT")
    assert status[mq0].min_offset == 0 and status[mq0].max_offset == 5 and status[mq0].count == 5
    assert before <= status[mq0].last_update_timestamp <= after
    assert status[MessageQueue("OffT", "broker-a", 1)].max_offset == 0
    assert admin.max_offset(mq0) == 5 and admin.min_offset(mq0) == 0
    stored_first = admin.view_message(first.offset_msg_id)
    assert admin.earliest_msg_store_time(mq0) == stored_first.store_timestamp
    assert admin.search_offset(mq0, before) == 0
    assert admin.search_offset(mq0, middle_ms) == 1


def test_broker_runtime_info(start_broker: StartBroker, namesrv, admin: Admin) -> None:
    a = start_broker(namesrv.addr)
    info = admin.broker_runtime_info(a.addr)
    assert isinstance(info, dict) and info
    assert info.get("brokerName", "broker-a") == "broker-a"


def test_query_by_key_merges_brokers(start_broker: StartBroker, admin: Admin, namesrv) -> None:
    start_broker(namesrv.addr, "broker-a")
    start_broker(namesrv.addr, "broker-b")
    admin.create_topic("KeyT", 2, 2)
    wait_for(lambda: len(admin.wait_topic_route("KeyT").queue_datas) == 2, what="route on both brokers")
    with Producer("key-producer", namesrv.addr) as p:
        ra = p.send(Message("KeyT", b"on a", keys="shared-key"), queue=MessageQueue("KeyT", "broker-a", 0))
        rb = p.send(Message("KeyT", b"on b", keys="shared-key"), queue=MessageQueue("KeyT", "broker-b", 1))
        p.send(Message("KeyT", b"other", keys="other-key"), queue=MessageQueue("KeyT", "broker-b", 0))
    found = wait_for(lambda: len(admin.query_msg_by_key("KeyT", "shared-key")) == 2 and
                     admin.query_msg_by_key("KeyT", "shared-key"), what="both messages indexed")
    assert [m.body for m in found] == [b"on a", b"on b"]
    assert {m.msg_id for m in found} == {ra.offset_msg_id, rb.offset_msg_id}
    assert admin.query_msg_by_key("KeyT", "shared-key", end_ms=found[0].store_timestamp - 1) == []
    assert wait_for(lambda: admin.query_msg_by_unique_key("KeyT", rb.msg_id)).body == b"on b"


def test_message_lookups_that_find_nothing(start_broker: StartBroker, namesrv, admin: Admin) -> None:
    a = start_broker(namesrv.addr)
    admin.create_topic("EmptyT", 1, 1)
    admin.wait_topic_route("EmptyT")
    with pytest.raises(MQClientError) as ei:
        admin.query_msg_by_unique_key("EmptyT", "0" * 32)
    assert ei.value.response_code == ResponseCode.NO_MESSAGE
    host, port = a.addr.split(":")
    bogus = "7F000001" + f"{int(port):08X}" + f"{10**9:016X}"
    with pytest.raises(MQBrokerError):
        admin.view_message(bogus)
    with pytest.raises(MQClientError):
        admin.query_msg_by_id("not-an-id")
    with pytest.raises(MQBrokerError) as ei:
        admin.topic_status("NoSuchTopic")
    assert ei.value.response_code == ResponseCode.TOPIC_NOT_EXIST
