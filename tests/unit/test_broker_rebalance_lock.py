"""Queue locks for orderly consumers: grant, renew, refuse, expire, release."""

from __future__ import annotations

import threading

import pytest

from rocketmesh.broker.client.rebalance_lock import RebalanceLockManager
from rocketmesh.model.message import MessageQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms / 1000


Q = [MessageQueue("T", "broker-a", i) for i in range(4)]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def locks(clock: FakeClock) -> RebalanceLockManager:
    return RebalanceLockManager(lock_max_live_ms=60_000, clock=clock)


def test_free_queues_are_granted(locks: RebalanceLockManager) -> None:
    assert locks.try_lock_batch("G", Q[:2], "c1") == set(Q[:2])
    assert locks.is_locked("G", Q[0], "c1")
    assert not locks.is_locked("G", Q[0], "c2")
    assert locks.locked_by("G", Q[1]) == "c1"
    assert locks.locked_by("G", Q[2]) is None
    assert locks.locked_queues("G", "c1") == set(Q[:2])


def test_queues_held_by_another_client_are_refused(locks: RebalanceLockManager) -> None:
    locks.try_lock_batch("G", Q[:2], "c1")
    assert locks.try_lock_batch("G", Q, "c2") == set(Q[2:])
    assert locks.locked_by("G", Q[0]) == "c1"
    assert locks.locked_by("G", Q[3]) == "c2"


def test_groups_are_independent(locks: RebalanceLockManager) -> None:
    locks.try_lock_batch("G1", Q, "c1")
    assert locks.try_lock_batch("G2", Q, "c2") == set(Q)
    assert locks.locked_by("G1", Q[0]) == "c1"


def test_locks_expire_after_max_live_time(locks: RebalanceLockManager, clock: FakeClock) -> None:
    locks.try_lock_batch("G", Q[:1], "c1")
    clock.advance_ms(60_000)
    assert locks.locked_by("G", Q[0]) == "c1"  # expired only once *more* than 60 s passed
    clock.advance_ms(1)
    assert locks.locked_by("G", Q[0]) is None
    assert not locks.is_locked("G", Q[0], "c1")
    assert locks.try_lock_batch("G", Q[:1], "c2") == {Q[0]}
    assert locks.locked_by("G", Q[0]) == "c2"


def test_locking_again_renews(locks: RebalanceLockManager, clock: FakeClock) -> None:
    locks.try_lock_batch("G", Q[:1], "c1")
    clock.advance_ms(40_000)
    assert locks.try_lock_batch("G", Q[:1], "c1") == {Q[0]}
    clock.advance_ms(40_000)
    assert locks.locked_by("G", Q[0]) == "c1"
    assert locks.try_lock_batch("G", Q[:1], "c2") == set()


def test_queries_do_not_renew(locks: RebalanceLockManager, clock: FakeClock) -> None:
    locks.try_lock_batch("G", Q[:1], "c1")
    clock.advance_ms(50_000)
    assert locks.is_locked("G", Q[0], "c1")
    clock.advance_ms(20_000)
    assert not locks.is_locked("G", Q[0], "c1")


def test_holder_can_relock_its_expired_lock(locks: RebalanceLockManager, clock: FakeClock) -> None:
    locks.try_lock_batch("G", Q[:1], "c1")
    clock.advance_ms(120_000)
    assert locks.try_lock_batch("G", Q[:1], "c1") == {Q[0]}
    assert locks.is_locked("G", Q[0], "c1")


def test_unlock_batch_only_releases_own_locks(locks: RebalanceLockManager) -> None:
    locks.try_lock_batch("G", Q[:2], "c1")
    locks.try_lock_batch("G", Q[2:], "c2")
    locks.unlock_batch("G", Q, "c1")
    assert locks.locked_by("G", Q[0]) is None
    assert locks.locked_by("G", Q[1]) is None
    assert locks.locked_by("G", Q[2]) == "c2"
    assert locks.locked_by("G", Q[3]) == "c2"
    locks.unlock_batch("nogroup", Q, "c1")  # nothing to do, no error


def test_unlock_all_releases_everything_a_client_holds(locks: RebalanceLockManager) -> None:
    locks.try_lock_batch("G", Q[:3], "c1")
    locks.try_lock_batch("G", Q[3:], "c2")
    locks.try_lock_batch("G2", Q, "c1")
    assert locks.unlock_all("G", "c1") == 3
    assert locks.locked_queues("G", "c1") == set()
    assert locks.locked_by("G", Q[3]) == "c2"
    assert locks.locked_queues("G2", "c1") == set(Q)
    assert locks.try_lock_batch("G", Q, "c3") == set(Q[:3])
    assert locks.unlock_all("G", "gone") == 0
    assert locks.unlock_all("nogroup", "c1") == 0


def test_empty_client_id_is_an_error(locks: RebalanceLockManager) -> None:
    with pytest.raises(ValueError):
        locks.try_lock_batch("G", Q, "")


def test_default_max_live_time_is_rocketmq_s() -> None:
    assert RebalanceLockManager().lock_max_live_s == 60.0


def test_concurrent_clients_never_share_a_queue(locks: RebalanceLockManager) -> None:
    queues = [MessageQueue("T", "b", i) for i in range(64)]
    won: dict[str, set[MessageQueue]] = {}
    barrier = threading.Barrier(8)

    def grab(cid: str) -> None:
        barrier.wait()
        won[cid] = locks.try_lock_batch("G", queues, cid)

    threads = [threading.Thread(target=grab, args=(f"c{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    granted = [mq for mqs in won.values() for mq in mqs]
    assert len(granted) == len(set(granted)) == len(queues)
