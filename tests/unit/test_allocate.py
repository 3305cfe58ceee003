"""Queue allocation strategies: exact assignments, coverage and disjointness, hash-ring stability."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from rocketmesh.client.consumer.allocate import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateMachineRoomNearby,
    AllocateStrategy,
    java_mq_key,
    md5_hash,
    strategy_by_name,
)
from rocketmesh.model.message import MessageQueue


def queues(n: int, topic: str = "T", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def cids(n: int, prefix: str = "CID-") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def assignment(strategy: AllocateStrategy, mq_all: list[MessageQueue],
               cid_all: list[str]) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate("G", cid, mq_all, cid_all) for cid in cid_all}


def queue_ids(result: dict[str, list[MessageQueue]]) -> list[list[int]]:
    return [[mq.queue_id for mq in mqs] for mqs in result.values()]


def assert_partition(result: dict[str, list[MessageQueue]], mq_all: list[MessageQueue]) -> None:
    allocated = [mq for mqs in result.values() for mq in mqs]
    assert len(allocated) == len(set(allocated)), "a queue went to two clients"
    assert set(allocated) == set(mq_all), "some queue went to no client"


AVG_CASES = [
    (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
    (10, 3, [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]),
    (7, 2, [[0, 1, 2, 3], [4, 5, 6]]),
    (16, 4, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]),
    (6, 6, [[0], [1], [2], [3], [4], [5]]),
    (3, 5, [[0], [1], [2], [], []]),
    (1, 1, [[0]]),
    (5, 1, [[0, 1, 2, 3, 4]]),
    (0, 2, [[], []]),
]

CIRCLE_CASES = [
    (8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
    (10, 4, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]),
    (6, 6, [[0], [1], [2], [3], [4], [5]]),
    (3, 5, [[0], [1], [2], [], []]),
    (5, 1, [[0, 1, 2, 3, 4]]),
    (0, 3, [[], [], []]),
]


@pytest.mark.parametrize(("n_mq", "n_cid", "expected"), AVG_CASES)
def test_averagely_assigns_contiguous_blocks(n_mq: int, n_cid: int, expected: list[list[int]]) -> None:
    assert queue_ids(assignment(AllocateAveragely(), queues(n_mq), cids(n_cid))) == expected


@pytest.mark.parametrize(("n_mq", "n_cid", "expected"), CIRCLE_CASES)
def test_averagely_by_circle_deals_round_robin(n_mq: int, n_cid: int, expected: list[list[int]]) -> None:
    assert queue_ids(assignment(AllocateAveragelyByCircle(), queues(n_mq), cids(n_cid))) == expected


def _java_averagely(index: int, n_mq: int, n_cid: int) -> list[int]:
    """RocketMQ's AllocateMessageQueueAveragely arithmetic, spelled out as its Java does it."""
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if (mod > 0 and index < mod) else index * average + mod
    return [start + i for i in range(min(average, n_mq - start))]


@given(st.integers(1, 200), st.integers(1, 40))
def test_averagely_matches_rocketmq_arithmetic(n_mq: int, n_cid: int) -> None:
    result = assignment(AllocateAveragely(), queues(n_mq), cids(n_cid))
    assert queue_ids(result) == [_java_averagely(i, n_mq, n_cid) for i in range(n_cid)]


def test_result_follows_caller_order_of_mq_all() -> None:
    mqs = sorted(queues(2, broker="broker-b") + queues(2, broker="broker-a"))
    got = AllocateAveragely().allocate("G", "c0", mqs, ["c0", "c1"])
    assert got == [MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)]


# -- argument checks shared by every strategy ----------------------------------------------------

def _all_strategies() -> list[AllocateStrategy]:
    return [
        AllocateAveragely(),
        AllocateAveragelyByCircle(),
        AllocateByConfig(queues(2)),
        AllocateByMachineRoom({"room1"}),
        AllocateMachineRoomNearby(AllocateAveragely(), lambda x: "room1"),
        AllocateConsistentHash(),
    ]


@pytest.mark.parametrize("strategy", _all_strategies(), ids=lambda s: type(s).__name__)
def test_empty_current_cid_is_an_error(strategy: AllocateStrategy) -> None:
    with pytest.raises(ValueError, match="current_cid"):
        strategy.allocate("G", "", queues(4), ["c0"])


@pytest.mark.parametrize("strategy", _all_strategies(), ids=lambda s: type(s).__name__)
def test_cid_missing_from_group_gets_nothing(strategy: AllocateStrategy) -> None:
    assert strategy.allocate("G", "stranger", queues(4, broker="room1@b"), ["c0", "c1"]) == []
    assert strategy.allocate("G", "stranger", queues(4, broker="room1@b"), []) == []


@pytest.mark.parametrize("strategy", _all_strategies(), ids=lambda s: type(s).__name__)
def test_no_queues_gives_nothing(strategy: AllocateStrategy) -> None:
    assert strategy.allocate("G", "c0", [], ["c0", "c1"]) == []


def test_names() -> None:
    assert AllocateAveragely.name == "AVG"
    assert AllocateAveragelyByCircle.name == "AVG_BY_CIRCLE"
    assert AllocateByConfig([]).name == "CONFIG"
    assert AllocateByMachineRoom(set()).name == "MACHINE_ROOM"
    assert AllocateConsistentHash().name == "CONSISTENT_HASH"
    nearby = AllocateMachineRoomNearby(AllocateAveragelyByCircle(), lambda x: "r")
    assert nearby.name == "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"


# -- strategy_by_name --------------------------------------------------------------------------------

def test_strategy_by_name_builds_the_simple_strategies() -> None:
    assert isinstance(strategy_by_name("AVG"), AllocateAveragely)
    assert isinstance(strategy_by_name("AVG_BY_CIRCLE"), AllocateAveragelyByCircle)
    ring = strategy_by_name("CONSISTENT_HASH", virtual_node_count=3)
    assert isinstance(ring, AllocateConsistentHash)
    assert ring.virtual_node_count == 3


def test_strategy_by_name_rejects_unknown_names_listing_valid_ones() -> None:
    with pytest.raises(ValueError, match="AVG, AVG_BY_CIRCLE, CONSISTENT_HASH"):
        strategy_by_name("ROUND_ROBIN")


# -- config ------------------------------------------------------------------------------------------

def test_by_config_returns_its_queues_whatever_the_group() -> None:
    mine = [MessageQueue("T", "b", 3), MessageQueue("T", "b", 1)]
    strategy = AllocateByConfig(mine)
    got = strategy.allocate("G", "c1", queues(8), ["c0", "c1"])
    assert got == mine
    got.append(MessageQueue("T", "b", 9))
    assert strategy.allocate("G", "c0", queues(8), ["c0", "c1"]) == mine


# -- machine room ------------------------------------------------------------------------------------

def test_by_machine_room_spreads_only_queues_of_the_rooms() -> None:
    # RocketMQ's own test case: queues 0-4 in room1, 5-9 in room2, consumers for room1 only.
    mqs = [MessageQueue("topic", "room1@broker-a" if i < 5 else "room2@broker-b", i) for i in range(10)]
    result = assignment(AllocateByMachineRoom({"room1"}), mqs, ["CID_PREFIX0", "CID_PREFIX1"])
    assert queue_ids(result) == [[0, 1, 4], [2, 3]]


def test_by_machine_room_ignores_broker_names_without_a_room() -> None:
    mqs = [MessageQueue("T", "broker-a", 0), MessageQueue("T", "room1@", 1), MessageQueue("T", "a@b@c", 2),
           MessageQueue("T", "room1@broker-b", 3)]
    result = assignment(AllocateByMachineRoom({"room1"}), mqs, ["c0", "c1"])
    assert queue_ids(result) == [[3], []]


class _DashResolver:
    """Room is the part before the first '-': brokers "IDC1-broker", clients "IDC1-CID-0"."""

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split("-")[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split("-")[0]


def _room_queues(rooms: list[str], per_room: int) -> list[MessageQueue]:
    return sorted(MessageQueue("T", f"{room}-broker", i) for room in rooms for i in range(per_room))


def _room_cids(rooms: list[str], per_room: int) -> list[str]:
    return sorted(f"{room}-CID-{i}" for room in rooms for i in range(per_room))


def test_nearby_keeps_consumers_in_their_own_room() -> None:
    mq_all = _room_queues(["IDC1", "IDC2", "IDC3"], 8)
    cid_all = _room_cids(["IDC1", "IDC2", "IDC3"], 3)
    strategy = AllocateMachineRoomNearby(AllocateAveragely(), _DashResolver())
    result = assignment(strategy, mq_all, cid_all)
    assert_partition(result, mq_all)
    for cid, mqs in result.items():
        assert mqs, cid
        assert all(mq.broker_name.split("-")[0] == cid.split("-")[0] for mq in mqs)
    # Within a room the inner strategy decides: 8 queues over 3 clients by AVG.
    idc1 = [result[c] for c in cid_all if c.startswith("IDC1")]
    assert [[mq.queue_id for mq in mqs] for mqs in idc1] == [[0, 1, 2], [3, 4, 5], [6, 7]]


def test_nearby_shares_rooms_without_consumers_among_everyone() -> None:
    mq_all = _room_queues(["IDC1", "IDC2", "IDC3"], 6)
    cid_all = _room_cids(["IDC1", "IDC2"], 2)  # nobody runs in IDC3
    inner = AllocateAveragely()
    strategy = AllocateMachineRoomNearby(inner, _DashResolver())
    result = assignment(strategy, mq_all, cid_all)
    assert_partition(result, mq_all)
    idc3 = [mq for mq in mq_all if mq.broker_name.startswith("IDC3")]
    for cid, mqs in result.items():
        own_room = cid.split("-")[0]
        local = [mq for mq in mqs if mq.broker_name.startswith(own_room)]
        orphan = [mq for mq in mqs if mq.broker_name.startswith("IDC3")]
        assert len(local) + len(orphan) == len(mqs)
        assert orphan == inner.allocate("G", cid, idc3, cid_all)


def test_nearby_accepts_one_function_as_resolver() -> None:
    def room(x: MessageQueue | str) -> str:
        return (x.broker_name if isinstance(x, MessageQueue) else x).split("-")[0]

    mq_all = _room_queues(["A", "B"], 4)
    cid_all = _room_cids(["A", "B"], 2)
    result = assignment(AllocateMachineRoomNearby(AllocateAveragelyByCircle(), room), mq_all, cid_all)
    assert_partition(result, mq_all)
    assert all(mq.broker_name.startswith(cid[0]) for cid, mqs in result.items() for mq in mqs)


def test_nearby_rejects_an_empty_machine_room() -> None:
    strategy = AllocateMachineRoomNearby(AllocateAveragely(), lambda x: "" if isinstance(x, MessageQueue) else "A")
    with pytest.raises(ValueError, match="machine room is empty"):
        strategy.allocate("G", "A-c0", queues(2), ["A-c0"])


# -- consistent hash ---------------------------------------------------------------------------------

def test_md5_hash_is_first_four_digest_bytes_unsigned() -> None:
    # MD5("") = d41d8cd9...
    assert md5_hash("") == 0xD41D8CD9
    assert 0 <= md5_hash("CID-0-3") < 2**32


def test_java_mq_key() -> None:
    assert java_mq_key(MessageQueue("T", "broker-a", 3)) == "MessageQueue [topic=T, brokerName=broker-a, queueId=3]"


# Owners per queue id, computed by running RocketMQ's ConsistentHashRouter (Java, MD5 hash) over
# clients "CID-<i>" and queues of topic "topic_test" on "broker-a".
JAVA_RING_CASES = [
    (16, 4, 10, "3 0 1 0 0 0 1 3 2 0 3 3 1 3 0 1"),
    (16, 3, 10, "1 0 1 0 0 0 1 1 2 0 1 2 1 1 0 1"),
    (12, 5, 3, "3 0 1 2 0 0 1 1 3 3 1 0"),
]


@pytest.mark.parametrize(("n_mq", "n_cid", "vnodes", "owners"), JAVA_RING_CASES)
def test_consistent_hash_matches_rocketmq(n_mq: int, n_cid: int, vnodes: int, owners: str) -> None:
    mq_all = queues(n_mq, topic="topic_test")
    result = assignment(AllocateConsistentHash(vnodes), mq_all, cids(n_cid))
    got = {mq.queue_id: int(cid.split("-")[1]) for cid, mqs in result.items() for mq in mqs}
    assert [got[i] for i in range(n_mq)] == [int(o) for o in owners.split()]


def test_consistent_hash_with_no_virtual_nodes_assigns_nothing() -> None:
    assert AllocateConsistentHash(0).allocate("G", "c0", queues(4), ["c0"]) == []


def test_consistent_hash_rejects_negative_virtual_nodes() -> None:
    with pytest.raises(ValueError):
        AllocateConsistentHash(-1)


def test_consistent_hash_takes_a_custom_hash() -> None:
    # Every key hashes to 0: one ring point, the last client written there wins (as TreeMap.put).
    strategy = AllocateConsistentHash(2, hash_fn=lambda key: 0)
    result = assignment(strategy, queues(5), ["a", "b"])
    assert queue_ids(result) == [[], [0, 1, 2, 3, 4]]


def _owners(strategy: AllocateStrategy, mq_all: list[MessageQueue], cid_all: list[str]) -> dict[MessageQueue, str]:
    return {mq: cid for cid, mqs in assignment(strategy, mq_all, cid_all).items() for mq in mqs}


@given(st.integers(1, 64), st.integers(2, 10), st.data())
def test_consistent_hash_removing_a_client_moves_only_its_queues(n_mq: int, n_cid: int, data: st.DataObject) -> None:
    strategy = AllocateConsistentHash()
    mq_all, cid_all = queues(n_mq), cids(n_cid)
    gone = data.draw(st.sampled_from(cid_all))
    before = _owners(strategy, mq_all, cid_all)
    after = _owners(strategy, mq_all, [c for c in cid_all if c != gone])
    assert set(after) == set(mq_all)
    for mq, owner in before.items():
        if owner != gone:
            assert after[mq] == owner


@given(st.integers(1, 64), st.integers(1, 9))
def test_consistent_hash_adding_a_client_moves_queues_only_to_it(n_mq: int, n_cid: int) -> None:
    strategy = AllocateConsistentHash()
    mq_all, cid_all = queues(n_mq), cids(n_cid)
    before = _owners(strategy, mq_all, cid_all)
    after = _owners(strategy, mq_all, sorted(cid_all + ["CID-NEW"]))
    for mq, owner in after.items():
        if owner != "CID-NEW":
            assert before[mq] == owner


# -- every client together gets every queue, once ------------------------------------------------

ROOMS = ["room1", "room2", "room3"]


@st.composite
def group_and_queues(draw: st.DrawFn) -> tuple[list[MessageQueue], list[str]]:
    n_mq = draw(st.integers(0, 64))
    n_brokers = draw(st.integers(1, 4))
    n_cid = draw(st.integers(1, 10))
    brokers = [f"{draw(st.sampled_from(ROOMS))}@broker-{b}" for b in range(n_brokers)]
    mq_all = sorted({MessageQueue("T", brokers[i % n_brokers], i // n_brokers) for i in range(n_mq)})
    cid_all = sorted({f"{draw(st.sampled_from(ROOMS))}@10.0.0.{i}@{i}" for i in range(n_cid)})
    return mq_all, cid_all


def _room(x: MessageQueue | str) -> str:
    return (x.broker_name if isinstance(x, MessageQueue) else x).split("@")[0]


PARTITIONING = [
    AllocateAveragely(),
    AllocateAveragelyByCircle(),
    AllocateConsistentHash(),
    AllocateConsistentHash(3),
    AllocateByMachineRoom(set(ROOMS)),
    AllocateMachineRoomNearby(AllocateAveragely(), _room),
    AllocateMachineRoomNearby(AllocateAveragelyByCircle(), _room),
    AllocateMachineRoomNearby(AllocateConsistentHash(), _room),
]


@pytest.mark.parametrize("strategy", PARTITIONING, ids=repr)
@settings(max_examples=150)
@given(case=group_and_queues())
def test_allocations_cover_every_queue_exactly_once(strategy: AllocateStrategy,
                                                    case: tuple[list[MessageQueue], list[str]]) -> None:
    mq_all, cid_all = case
    assert_partition(assignment(strategy, mq_all, cid_all), mq_all)


@settings(max_examples=150)
@given(case=group_and_queues())
def test_nearby_clients_stay_home_while_their_room_has_consumers(case: tuple[list[MessageQueue], list[str]]) -> None:
    mq_all, cid_all = case
    result = assignment(AllocateMachineRoomNearby(AllocateAveragely(), _room), mq_all, cid_all)
    rooms_with_consumers = {_room(c) for c in cid_all}
    for cid, mqs in result.items():
        for mq in mqs:
            if _room(mq) in rooms_with_consumers:
                assert _room(mq) == _room(cid)
