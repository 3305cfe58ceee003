"""Test kit for the asyncio API: run a test's coroutine on a fresh loop that fails on what the loop would only
log, and await a condition on the loop."""

from __future__ import annotations

import asyncio
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
