"""DueQueue: earliest first, arrival order among equal due times, discard by predicate."""

from rocketmesh.scheduler.due_queue import DueQueue


def test_pops_only_due_items_earliest_first_ties_in_arrival_order() -> None:
    q = DueQueue()
    for due, name in [(30, "c"), (10, "a1"), (20, "b"), (10, "a2"), (50, "e")]:
        q.push(due, name)
    assert q.next_due() == 10
    assert q.pop_due(20) == [(10, "a1"), (10, "a2"), (20, "b")]
    assert q.pop_due(29) == []
    assert len(q) == 2 and q.next_due() == 30
    assert q.pop_due(100, limit=1) == [(30, "c")]


def test_discard_removes_matching_items_and_keeps_order() -> None:
    q = DueQueue()
    for i in range(100):
        q.push(1000 - i, i)
    assert sorted(q.discard(lambda item: item % 2 == 0)) == list(range(0, 100, 2))
    popped = q.pop_due(10_000)
    assert [item for _, item in popped] == sorted((i for i in range(100) if i % 2), reverse=True)
    assert q.next_due() is None
