"""The route model the name server, brokers and clients share: RocketMQ's names, bits and JSON."""

from __future__ import annotations

from rocketmesh.model.route import MASTER_ID, BrokerData, Perm, QueueData, TopicConfig, TopicRouteData


def test_permission_bits_are_rocketmqs_permname() -> None:
    assert (Perm.INHERIT, Perm.WRITE, Perm.READ, Perm.PRIORITY) == (1, 2, 4, 8)
    assert Perm.is_readable(6) and Perm.is_writeable(6) and not Perm.is_writeable(4)


def test_topic_config_json_round_trip_and_a_table_keyed_by_name() -> None:
    tc = TopicConfig("Orders", 4, 2, int(Perm.READ), topic_sys_flag=1, order=True)
    assert TopicConfig.from_json(tc.to_json()) == tc
    assert tc.to_json()["topicName"] == "Orders" and tc.to_json()["perm"] == 4
    # A registration's topicConfigTable may leave the name to its key; missing counts are RocketMQ's 16.
    assert TopicConfig.from_json({}, "Keyed") == TopicConfig("Keyed", 16, 16, 6)
    assert not tc.writable and tc.readable


def test_queue_data_write_permission_is_wiped_and_given_back() -> None:
    qd = QueueData.of("broker-a", TopicConfig("T", 8, 8, int(Perm.READ | Perm.WRITE | Perm.INHERIT)))
    wiped = qd.with_write(False)
    assert wiped.perm == 5 and qd.perm == 7  # a new value; the original is untouched
    assert wiped.with_write(True).perm == 7


def test_route_json_round_trip_sorted_by_broker_and_without_a_null_order_conf() -> None:
    route = TopicRouteData.from_json({
        "queueDatas": [QueueData("b", 2, 2).to_json(), QueueData("a", 4, 4).to_json()],
        "brokerDatas": [BrokerData("c", "b", {1: "h:2", 0: "h:1"}).to_json(),
                        BrokerData("c", "a", {0: "h:0"}).to_json()],
    })
    assert [q.broker_name for q in route.queue_datas] == ["a", "b"]
    assert route.broker_data("b").broker_addrs == {0: "h:1", 1: "h:2"}
    assert route.broker_data("b").master_addr == "h:1" and MASTER_ID == 0
    assert "orderTopicConf" not in route.to_json()
    assert TopicRouteData.from_json(route.to_json()) == route


def test_a_copied_broker_data_does_not_follow_the_original() -> None:
    live = BrokerData("c", "a", {0: "h:0"})
    snapshot = live.copy()
    live.broker_addrs[1] = "h:1"
    assert snapshot.broker_addrs == {0: "h:0"}
