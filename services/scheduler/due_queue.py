"""DueQueue: pending deliveries ordered by due time.

A binary heap on (due ms, arrival sequence): adding and taking a timer cost
O(log n) and nothing walks the pending set on a tick, so 100,000 pending
timers cost no more per tick than ten. Ties keep arrival order, which keeps a
delay level's entries (all due in store order) in queue order.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any


class DueQueue:
    """Items with a due time; not thread-safe (the scheduler guards it with its condition)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due_ms: int, item: Any) -> None:
        heapq.heappush(self._heap, (due_ms, next(self._seq), item))

    def next_due(self) -> int | None:
        """The earliest due time, or None when empty."""
        return self._heap[0][0] if self._heap else None

    def discard(self, predicate: Callable[[Any], bool]) -> list[Any]:
        """Drop every item for which ``predicate`` holds and return them (O(n): for rare events such as a
        queue leaving)."""
        kept: list[tuple[int, int, Any]] = []
        dropped: list[tuple[int, int, Any]] = []
        for e in self._heap:
            (dropped if predicate(e[2]) else kept).append(e)
        self._heap = kept
        heapq.heapify(kept)
        return [e[2] for e in dropped]

    def pop_due(self, now_ms: int, limit: int = 1 << 30) -> list[tuple[int, Any]]:
        """Up to ``limit`` (due, item) pairs due at or before ``now_ms``, earliest first."""
        heap = self._heap
        out: list[tuple[int, Any]] = []
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            due, _, item = heapq.heappop(heap)
            out.append((due, item))
        return out
