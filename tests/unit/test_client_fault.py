"""Latency fault tolerance: RocketMQ's tables and queue choice around benched brokers."""

from __future__ import annotations

import pytest

from rocketmesh.client import route as client_route
from rocketmesh.client.fault import (
    ISOLATION_LATENCY_MS,
    LATENCY_MAX_MS,
    NOT_AVAILABLE_DURATION_MS,
    LatencyFaultTolerance,
    MQFaultStrategy,
    compute_not_available_duration,
)
from rocketmesh.model.route import BrokerData, QueueData, TopicRouteData


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def publish_info(*brokers: str, queues: int = 4):
    route = TopicRouteData(
        tuple(QueueData(b, queues, queues) for b in brokers),
        tuple(BrokerData("c", b, {0: f"127.0.0.1:{10000 + i}"}) for i, b in enumerate(brokers)),
    )
    return client_route.publish_info(route, "T")


def test_tables_are_rocketmqs() -> None:
    assert LATENCY_MAX_MS == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert NOT_AVAILABLE_DURATION_MS == (0, 0, 30000, 60000, 120000, 180000, 600000)


@pytest.mark.parametrize(
    "latency, duration",
    [(0, 0), (49, 0), (50, 0), (99, 0), (100, 0), (549, 0), (550, 30000), (999, 30000), (1000, 60000),
     (1999, 60000), (2000, 120000), (3000, 180000), (14999, 180000), (15000, 600000),
     (ISOLATION_LATENCY_MS, 600000)],
)
def test_not_available_duration(latency: int, duration: int) -> None:
    assert compute_not_available_duration(latency) == duration


def test_fault_item_expires() -> None:
    clock = FakeClock()
    lft = LatencyFaultTolerance(clock)
    assert lft.is_available("a")
    lft.update_fault_item("a", 600, 30000)
    assert not lft.is_available("a")
    assert lft.is_available("b")
    clock.now += 29999
    assert not lft.is_available("a")
    clock.now += 1
    assert lft.is_available("a")
    lft.remove("a")
    assert "a" not in lft and len(lft) == 0


def test_pick_one_at_least_prefers_low_latency() -> None:
    clock = FakeClock()
    lft = LatencyFaultTolerance(clock)
    assert lft.pick_one_at_least() is None
    lft.update_fault_item("slow", 3000, 3000)
    assert lft.pick_one_at_least() == "slow"
    lft.update_fault_item("fast", 1000, 3000)
    # Two items: the better half is one item, the lower latency.
    for _ in range(5):
        assert lft.pick_one_at_least() == "fast"
    # An available item beats any benched one.
    lft.update_fault_item("back", 20000, 0)
    lft.update_fault_item("other", 5000, 5000)
    picks = {lft.pick_one_at_least() for _ in range(10)}
    assert picks <= {"back", "fast"}


def test_disabled_strategy_ignores_latency_but_avoids_last_broker() -> None:
    clock = FakeClock()
    strategy = MQFaultStrategy(False, clock=clock)
    tp = publish_info("a", "b")
    strategy.update_fault_item("a", 5000, True)
    assert len(strategy.latency) == 0
    for _ in range(20):
        assert strategy.select_one_message_queue(tp, "a").broker_name == "b"
        assert strategy.select_one_message_queue(tp, "b").broker_name == "a"


def test_enabled_strategy_avoids_isolated_broker_until_it_recovers() -> None:
    clock = FakeClock()
    strategy = MQFaultStrategy(True, clock=clock)
    tp = publish_info("a", "b")
    strategy.update_fault_item("a", 10, True)  # a failed: benched 600 s
    assert {strategy.select_one_message_queue(tp).broker_name for _ in range(50)} == {"b"}
    clock.now += 600_000
    assert {strategy.select_one_message_queue(tp).broker_name for _ in range(50)} == {"a", "b"}


def test_a_failed_broker_reached_again_by_a_heartbeat_is_no_longer_benched() -> None:
    """A broker paused past the send timeout and resumed gets sends again once a heartbeat reaches it, not
    ten minutes later; a slow answer's bench is not lifted that way, nor an error answer's, nor a failure
    after the heartbeat."""
    clock = FakeClock()
    strategy = MQFaultStrategy(True, clock=clock)
    tp = publish_info("a", "b")
    strategy.unreachable.mark_reached("a")  # a heartbeat before the failure does not count
    clock.now += 1
    strategy.update_fault_item("a", 1000, True, reachable=False)
    assert {strategy.select_one_message_queue(tp).broker_name for _ in range(50)} == {"b"}
    clock.now += 1000
    strategy.unreachable.mark_reached("a")
    assert {strategy.select_one_message_queue(tp).broker_name for _ in range(50)} == {"a", "b"}
    strategy.update_fault_item("b", 600, False)  # slow, not failed: benched 30 s whatever heartbeats say
    clock.now += 1
    strategy.unreachable.mark_reached("b")
    assert {strategy.select_one_message_queue(tp).broker_name for _ in range(50)} == {"a"}


def test_enabled_strategy_small_latency_does_not_bench() -> None:
    clock = FakeClock()
    strategy = MQFaultStrategy(True, clock=clock)
    tp = publish_info("a", "b")
    strategy.update_fault_item("a", 99, False)
    strategy.update_fault_item("b", 549, False)
    assert {strategy.select_one_message_queue(tp).broker_name for _ in range(50)} == {"a", "b"}
    strategy.update_fault_item("b", 550, False)
    assert {strategy.select_one_message_queue(tp).broker_name for _ in range(50)} == {"a"}


def test_enabled_strategy_all_benched_picks_least_bad() -> None:
    clock = FakeClock()
    strategy = MQFaultStrategy(True, clock=clock)
    tp = publish_info("a", "b", queues=3)
    strategy.update_fault_item("a", 1000, False)  # 60 s
    strategy.update_fault_item("b", 3000, False)  # 180 s
    for _ in range(20):
        mq = strategy.select_one_message_queue(tp)
        assert mq.broker_name == "a" and 0 <= mq.queue_id < 3 and mq.topic == "T"


def test_unreachable_brokers_are_skipped_even_when_disabled() -> None:
    clock = FakeClock()
    strategy = MQFaultStrategy(False, clock=clock)
    tp = publish_info("a", "b", "c")
    strategy.mark_unreachable("b", 30000)
    assert "b" not in {strategy.select_one_message_queue(tp).broker_name for _ in range(60)}
    # With a last failure on "a" too, only "c" is left.
    assert {strategy.select_one_message_queue(tp, "a").broker_name for _ in range(30)} == {"c"}
    clock.now += 30000
    assert "b" in {strategy.select_one_message_queue(tp).broker_name for _ in range(60)}


def test_every_broker_unreachable_still_yields_a_queue() -> None:
    strategy = MQFaultStrategy(False, clock=FakeClock())
    tp = publish_info("a", "b")
    strategy.mark_unreachable("a")
    strategy.mark_unreachable("b")
    assert strategy.select_one_message_queue(tp).broker_name in {"a", "b"}
    assert strategy.select_one_message_queue(tp, "a").broker_name == "b"


def test_a_broker_that_answered_a_send_with_an_error_stays_benched_when_heartbeats_reach_it() -> None:
    """It answers heartbeats as well as it answered the send: only a broker that was out of reach is let back."""
    clock = FakeClock()
    strategy = MQFaultStrategy(True, clock=clock)
    tp = publish_info("a", "b")
    strategy.update_fault_item("a", 10, True)  # SYSTEM_ERROR from a: benched 600 s
    clock.now += 1000
    strategy.unreachable.mark_reached("a")
    assert {strategy.select_one_message_queue(tp).broker_name for _ in range(50)} == {"b"}
