"""Requests awaiting their response, with deadlines.

Owned by one I/O thread. Entries are found by ``opaque``; a heap of
``(deadline, opaque)`` lets the periodic scan find expired ones without
walking the whole table. Heap slots of requests already answered are skipped
when they surface, and the heap is rebuilt when such slots pile up.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass

from rocketmesh.remoting.protocol.command import RemotingCommand
from rocketmesh.runtime.log import get_logger

_log = get_logger("remoting", component="pending")


@dataclass(slots=True, eq=False)
class PendingRequest:
    """One request in flight: where it went, when it gives up, whom to tell."""

    opaque: int
    peer: object
    timeout_ms: int
    deadline: float
    #: Told the outcome (a Future, or a CallbackSink); None for oneway requests.
    future: Future[RemotingCommand] | CallbackSink | None
    #: False while the request sits in a send backlog (no connection yet).
    sent: bool = False


class CallbackSink:
    """Stands where a Future would, for callers that want ``fn(response, error)`` and no Future.

    ``fn`` runs on the I/O thread, exactly once: it must be short and never block. An exception
    it raises is logged, as a Future's done-callback's would be, and goes no further.
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[RemotingCommand | None, BaseException | None], None]) -> None:
        self.fn: Callable[[RemotingCommand | None, BaseException | None], None] | None = fn

    def set_result(self, result: RemotingCommand) -> None:
        self._call(result, None)

    def set_exception(self, error: BaseException) -> None:
        self._call(None, error)

    def _call(self, result: RemotingCommand | None, error: BaseException | None) -> None:
        fn, self.fn = self.fn, None
        if fn is None:
            return
        try:
            fn(result, error)
        except Exception:  # noqa: BLE001 - the I/O loop must go on
            _log.exception("response_callback_failed")


def settle(future: Future[RemotingCommand] | CallbackSink | None, result: RemotingCommand | None,
           error: BaseException | None) -> None:
    """Complete ``future`` with ``result``, or ``error`` when there is one, unless the caller already
    cancelled it (None: a oneway request, nobody to tell)."""
    if future is None:
        return
    try:
        if error is not None:
            future.set_exception(error)
        elif result is not None:
            future.set_result(result)
        else:
            future.set_exception(ValueError("settled with neither a response nor an error"))
    except InvalidStateError:
        pass


class PendingTable:
    """opaque -> PendingRequest, plus the deadline heap."""

    __slots__ = ("_by_opaque", "_heap")

    def __init__(self) -> None:
        self._by_opaque: dict[int, PendingRequest] = {}
        self._heap: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self._by_opaque)

    def add(self, entry: PendingRequest) -> None:
        """Track ``entry`` until it is popped or expires."""
        self._by_opaque[entry.opaque] = entry
        heapq.heappush(self._heap, (entry.deadline, entry.opaque))

    def pop(self, opaque: int) -> PendingRequest | None:
        """Remove and return the entry for ``opaque`` (None when unknown or already expired)."""
        return self._by_opaque.pop(opaque, None)

    def get(self, opaque: int) -> PendingRequest | None:
        """The entry for ``opaque`` without removing it."""
        return self._by_opaque.get(opaque)

    def __contains__(self, opaque: int) -> bool:
        return opaque in self._by_opaque

    def next_deadline(self) -> float | None:
        """The earliest deadline still in the heap (may belong to an answered request)."""
        return self._heap[0][0] if self._heap else None

    def expire(self, now: float, on_expired: Callable[[PendingRequest], None]) -> None:
        """Remove every entry whose deadline is ``<= now`` and call ``on_expired`` on it."""
        heap = self._heap
        by_opaque = self._by_opaque
        while heap and heap[0][0] <= now:
            _, opaque = heapq.heappop(heap)
            entry = by_opaque.get(opaque)
            if entry is not None and entry.deadline <= now:
                del by_opaque[opaque]
                on_expired(entry)
        if len(heap) > 4 * len(by_opaque) + 1024:
            self._heap = [(e.deadline, e.opaque) for e in by_opaque.values()]
            heapq.heapify(self._heap)

    def pop_where(self, predicate: Callable[[PendingRequest], bool]) -> list[PendingRequest]:
        """Remove and return the entries ``predicate`` holds for (a walk over all: for rare events only)."""
        taken = [e for e in self._by_opaque.values() if predicate(e)]
        for entry in taken:
            del self._by_opaque[entry.opaque]
        return taken

    def drain(self) -> list[PendingRequest]:
        """Remove and return every entry (on shutdown)."""
        entries = list(self._by_opaque.values())
        self._by_opaque.clear()
        self._heap.clear()
        return entries
