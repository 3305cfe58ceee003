"""The broker's client tables: a client whose connection closed leaves them, and its consumer group hears."""

from __future__ import annotations

from typing import Any

from rocketmesh.broker.client.manager import ClientManager


def heartbeat(client_id: str, producer_group: str = "", consumer_group: str = "") -> dict[str, Any]:
    """A HEARTBEAT body as the SDK sends it."""
    return {
        "clientID": client_id,
        "producerDataSet": [{"groupName": producer_group}] if producer_group else [],
        "consumerDataSet": [{"groupName": consumer_group, "subscriptionDataSet": [{"topic": "T", "subString": "*"}]}]
        if consumer_group else [],
    }


def test_a_closed_channel_takes_its_producers_and_consumers_and_the_group_hears() -> None:
    clients = ClientManager(120_000)
    told: list[str] = []
    clients.on_consumer_ids_changed = told.append
    clients.heartbeat(heartbeat("10.0.0.1@1", "PG", "CG"), b"conn-1", "conn-1@10.0.0.1")
    clients.heartbeat(heartbeat("10.0.0.2@2", consumer_group="CG"), b"conn-2", "conn-2@10.0.0.2")
    told.clear()

    assert clients.channel_closed(b"conn-1") == 2
    assert clients.consumer_ids("CG") == ["10.0.0.2@2"]
    assert clients.producer_channels("PG") == []
    assert told == ["CG"]

    assert clients.channel_closed(b"conn-1") == 0  # already gone
    assert clients.channel_closed(b"stranger") == 0
    assert told == ["CG"]


def test_a_client_that_came_back_over_another_connection_stays() -> None:
    clients = ClientManager(120_000)
    clients.heartbeat(heartbeat("10.0.0.1@1", consumer_group="CG"), b"old-conn", "old")
    clients.heartbeat(heartbeat("10.0.0.1@1", consumer_group="CG"), b"new-conn", "new")
    assert clients.channel_closed(b"old-conn") == 0
    assert clients.consumer_ids("CG") == ["10.0.0.1@1"]


def test_a_consumer_that_left_frees_its_orderly_queue_locks_before_its_group_hears() -> None:
    from rocketmesh.broker.client.rebalance_lock import RebalanceLockManager
    from rocketmesh.model.message import MessageQueue

    clients = ClientManager(120_000)
    locks = RebalanceLockManager(60_000)
    clients.on_consumer_left = locks.unlock_all
    queues = [MessageQueue("T", "broker-a", q) for q in range(4)]
    for cid, conn in (("A", b"conn-a"), ("B", b"conn-b"), ("C", b"conn-c")):
        clients.heartbeat(heartbeat(cid, consumer_group="CG"), conn, conn.decode())
    # What B gets when it rebalances on the news that the group changed.
    seen_when_told: list[set] = []
    clients.on_consumer_ids_changed = lambda group: seen_when_told.append(locks.try_lock_batch(group, queues, "B"))
    assert locks.try_lock_batch("CG", queues[:2], "A") == set(queues[:2])
    assert locks.try_lock_batch("CG", queues[2:3], "C") == {queues[2]}

    assert clients.channel_closed(b"conn-a") == 1  # A is gone: its two queues are B's to lock at once
    assert seen_when_told == [{queues[0], queues[1], queues[3]}]
    assert locks.locked_by("CG", queues[2]) == "C"  # a member still there keeps its lock

    clients.unregister("C", None, "CG")  # unregistering frees them too
    assert seen_when_told[-1] == set(queues)
