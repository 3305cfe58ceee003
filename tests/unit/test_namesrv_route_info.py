"""The name server's tables: a broker whose registration connection closed leaves the routes at once."""

from __future__ import annotations

from rocketmesh.model.route import TopicConfig
from rocketmesh.namesrv.route_info import RouteInfoManager


def register(routes: RouteInfoManager, name: str, addr: str, channel: bytes, broker_id: int = 0) -> None:
    routes.register_broker("c", addr, name, broker_id, "", {"T": TopicConfig("T")}, None, channel=channel)


def test_a_closed_channel_takes_the_brokers_that_registered_over_it() -> None:
    routes = RouteInfoManager()
    register(routes, "broker-a", "10.0.0.1:10911", b"broker-a-conn")
    register(routes, "broker-b", "10.0.0.2:10911", b"broker-b-conn")

    assert routes.on_channel_destroy(b"broker-b-conn") == ["10.0.0.2:10911"]
    route = routes.pick_topic_route_data("T")
    assert route is not None and [bd.broker_name for bd in route.broker_datas] == ["broker-a"]
    assert routes.cluster_info()["clusterAddrTable"] == {"c": ["broker-a"]}
    assert routes.on_channel_destroy(b"broker-b-conn") == []
    assert routes.on_channel_destroy(b"") == []


def test_a_broker_registered_again_over_a_new_connection_stays() -> None:
    routes = RouteInfoManager()
    register(routes, "broker-a", "10.0.0.1:10911", b"before-restart")
    register(routes, "broker-a", "10.0.0.1:10911", b"after-restart")
    assert routes.on_channel_destroy(b"before-restart") == []
    assert routes.pick_topic_route_data("T") is not None


def test_a_registration_says_what_changed_and_a_heartbeat_nothing() -> None:
    routes = RouteInfoManager()
    v1, v2 = {"timestamp": 1, "counter": 1}, {"timestamp": 1, "counter": 2}

    def change(addr: str, broker_id: int = 0, version: dict = v1) -> str | None:
        return routes.register_broker("c", addr, "broker-a", broker_id, "", None, version).change

    assert change("10.0.0.1:10911") == "new"
    assert change("10.0.0.1:10911") is None  # a heartbeat
    assert change("10.0.0.1:10911", version=v2) == "data_version"
    assert change("10.0.0.1:10911", version=v2) is None
    assert change("10.0.0.1:10911", broker_id=1, version=v2) == "role"
    assert change("10.0.0.9:10911", broker_id=1, version=v2) == "address"
