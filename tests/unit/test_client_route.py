"""Route data from the name server's JSON, and the producer's publish view of it."""

from __future__ import annotations

import collections

from rocketmesh.client.route import TopicPublishInfo, publish_info
from rocketmesh.model.message import MessageQueue
from rocketmesh.model.route import BrokerData, Perm, QueueData, TopicRouteData

ROUTE_JSON = {
    "queueDatas": [
        {"brokerName": "broker-b", "readQueueNums": 4, "writeQueueNums": 2, "perm": 6, "topicSysFlag": 0},
        {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0},
        {"brokerName": "broker-ro", "readQueueNums": 4, "writeQueueNums": 4, "perm": 4, "topicSysFlag": 0},
        {"brokerName": "broker-nomaster", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0},
    ],
    "brokerDatas": [
        {"cluster": "c1", "brokerName": "broker-b", "brokerAddrs": {"0": "127.0.0.1:10921"}},
        {"cluster": "c1", "brokerName": "broker-a", "brokerAddrs": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10912"}},
        {"cluster": "c1", "brokerName": "broker-ro", "brokerAddrs": {"0": "127.0.0.1:10931"}},
        {"cluster": "c1", "brokerName": "broker-nomaster", "brokerAddrs": {"1": "127.0.0.1:10942"}},
    ],
}


def test_parse_route() -> None:
    route = TopicRouteData.from_json(ROUTE_JSON)
    assert [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b", "broker-nomaster", "broker-ro"]
    a = route.broker_data("broker-a")
    assert a is not None and a.broker_addrs == {0: "127.0.0.1:10911", 1: "127.0.0.1:10912"}
    assert a.master_addr == "127.0.0.1:10911"
    assert route.broker_data("broker-nomaster").master_addr is None  # type: ignore[union-attr]
    assert route.broker_data("broker-nomaster").select_addr() == "127.0.0.1:10942"  # type: ignore[union-attr]
    assert TopicRouteData.from_json(route.to_json()) == route


def test_publish_info_write_queues_of_writable_brokers_with_master_sorted() -> None:
    tp = publish_info(TopicRouteData.from_json(ROUTE_JSON), "T")
    assert list(tp.message_queues) == [
        MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1),
        MessageQueue("T", "broker-a", 2), MessageQueue("T", "broker-a", 3),
        MessageQueue("T", "broker-b", 0), MessageQueue("T", "broker-b", 1),
    ]
    assert tp.ok() and not tp.from_default_topic
    assert tp.write_queue_nums("broker-b") == 2 and tp.write_queue_nums("zzz") == 0
    assert tp.broker_names() == ["broker-a", "broker-b"]


def test_round_robin_visits_every_queue_evenly() -> None:
    tp = publish_info(TopicRouteData.from_json(ROUTE_JSON), "T")
    counts = collections.Counter(tp.select_one() for _ in range(600))
    assert set(counts) == set(tp.message_queues)
    assert set(counts.values()) == {100}


def test_round_robin_is_sequential() -> None:
    mqs = [MessageQueue("T", "b", i) for i in range(5)]
    tp = TopicPublishInfo("T", mqs, start=3)
    assert [tp.select_one().queue_id for _ in range(7)] == [3, 4, 0, 1, 2, 3, 4]


def test_select_avoids_last_failed_broker() -> None:
    tp = publish_info(TopicRouteData.from_json(ROUTE_JSON), "T")
    for _ in range(100):
        assert tp.select_one("broker-a").broker_name == "broker-b"
        assert tp.select_one("broker-b").broker_name == "broker-a"


def test_select_falls_back_to_the_only_broker() -> None:
    tp = TopicPublishInfo("T", [MessageQueue("T", "only", i) for i in range(3)])
    assert {tp.select_one("only").queue_id for _ in range(9)} == {0, 1, 2}


def test_empty_route_is_not_ok() -> None:
    tp = publish_info(TopicRouteData.from_json({"queueDatas": [], "brokerDatas": []}), "T")
    assert not tp.ok()


def test_default_topic_route_caps_queue_nums() -> None:
    route = TopicRouteData(
        (QueueData("b1", 8, 8), QueueData("b2", 2, 2)),
        (BrokerData("c", "b1", {0: "h:1"}), BrokerData("c", "b2", {0: "h:2"})),
    )
    tp = publish_info(route.with_queue_nums_capped(4), "New", from_default_topic=True)
    assert tp.from_default_topic
    assert [(mq.broker_name, mq.queue_id) for mq in tp.message_queues] == [
        ("b1", 0), ("b1", 1), ("b1", 2), ("b1", 3), ("b2", 0), ("b2", 1)
    ]
    assert all(mq.topic == "New" for mq in tp.message_queues)


def test_order_topic_conf_fixes_queues() -> None:
    route = TopicRouteData.from_json({**ROUTE_JSON, "orderTopicConf": "broker-b:3;broker-a:1"})
    tp = publish_info(route, "T")
    assert tp.order_topic
    assert [(mq.broker_name, mq.queue_id) for mq in tp.message_queues] == [
        ("broker-b", 0), ("broker-b", 1), ("broker-b", 2), ("broker-a", 0)
    ]


def test_perm_bits() -> None:
    assert Perm.is_writeable(6) and Perm.is_readable(6)
    assert not Perm.is_writeable(4) and Perm.is_readable(4)
    assert Perm.is_writeable(2) and not Perm.is_readable(2)
