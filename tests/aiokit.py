"""Test kit for the asyncio API: run a test's coroutine on a fresh loop that fails on what the loop would only
log, await a condition on the loop, and measure how long the loop is held (Ticker)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` on a fresh loop that records what the loop would only log (a task's exception never
    retrieved, a callback that raised): the run fails when there is any."""
    problems: list[dict[str, Any]] = []

    async def main() -> Any:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: problems.append(ctx))
        return await coro

    result = asyncio.run(main())
    assert not problems, problems
    return result


async def until(check: Callable[[], object], timeout_s: float, what: str) -> None:
    """Await ``check()`` becoming true (polled on the loop), or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s} s")
        await asyncio.sleep(0.05)


class Ticker:
    """A task on the running loop that sleeps ``interval_s`` at a time, recording per tick how long the loop's
    thread ran code in between (its CPU time, less the interpreter's garbage collections on that thread) and
    how late it woke (which also counts the time the machine gave to other threads and processes).

        async with Ticker() as ticker:
            ...                                   # the work under test, on the same loop
        assert ticker.held_max < 0.020, ticker.describe()
    """

    def __init__(self, interval_s: float = 0.002) -> None:
        self.interval_s = interval_s
        #: (held, late) of each tick, in seconds.
        self.ticks: list[tuple[float, float]] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.get_ident()
        self._gc_total = 0.0
        self._gc_since = 0.0
        #: The longest garbage collection on the loop's thread (s).
        self.gc_longest = 0.0

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._gc_since = time.thread_time()
        else:
            spent = time.thread_time() - self._gc_since
            self._gc_total += spent
            self.gc_longest = max(self.gc_longest, spent)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            before, cpu, gc_before = loop.time(), time.thread_time(), self._gc_total
            await asyncio.sleep(self.interval_s)
            held = time.thread_time() - cpu - (self._gc_total - gc_before)
            self.ticks.append((held, loop.time() - before - self.interval_s))

    async def __aenter__(self) -> Ticker:
        self._thread = threading.get_ident()
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        try:
            if self._task is not None:
                await self._task
        finally:
            gc.callbacks.remove(self._on_gc)

    @property
    def held_max(self) -> float:
        """The most the loop's thread ran between two ticks (s)."""
        return max(held for held, _ in self.ticks)

    def describe(self) -> str:
        held, late = max(self.ticks)
        return (f"{len(self.ticks)} ticks; the loop's thread ran up to {held * 1000:.1f} ms between two "
                f"({late * 1000:.1f} ms late then); latest wake-up {max(t[1] for t in self.ticks) * 1000:.1f} ms")
