"""Where the threaded core meets the event loop.

Answers complete on the remoting I/O thread; an asyncio future must be completed on its loop's thread.
``LoopInbox`` carries completions across: other threads append to a deque and wake the loop at most
once per drain (``call_soon_threadsafe`` writes to the loop's self-pipe), so a burst of answers costs
one wake-up, not one each. ``run_on_loop`` goes the other way: a core thread (a consume or a check
thread) runs a coroutine on the application's loop and waits for its outcome, bounded.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import heapq
import inspect
import itertools
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class LoopInbox:
    """Completes asyncio futures of one loop from any thread, waking the loop once per burst."""

    __slots__ = ("_loop", "_items", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[tuple[asyncio.Future[Any], Any, BaseException | None]] = collections.deque()
        self._scheduled = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop whose futures this inbox completes."""
        return self._loop

    def future(self) -> tuple[asyncio.Future[Any], Callable[[Any, BaseException | None], None]]:
        """A new future of the loop and ``done(result, error)``, callable once from any thread, that completes
        it (unless the future was cancelled meanwhile)."""
        fut = self._loop.create_future()
        return fut, lambda result, error: self.put(fut, result, error)

    def put(self, fut: asyncio.Future[Any], result: object, error: BaseException | None) -> None:
        """Complete ``fut`` with ``error``, or else ``result``, on the loop's thread (any thread)."""
        self._items.append((fut, result, error))
        if not self._scheduled:
            self._scheduled = True
            try:
                self._loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: nobody is left to wait
                self._items.clear()

    def _drain(self) -> None:
        # Clear the flag before popping: a put that lands after the last pop then schedules a drain itself.
        self._scheduled = False
        popleft = self._items.popleft
        while True:
            try:
                fut, result, error = popleft()
            except IndexError:
                return
            if fut.done():  # cancelled by its awaiter
                continue
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)


class Deadlines:
    """Fails futures of one loop that outlive their deadline, with one timer for all of them: cheaper than a
    ``call_later`` each when thousands wait at once (a timer handle is compared in Python, a tuple in C).

    ``add(fut, timeout_s, make_error)``: unless ``fut`` is done by then, it fails with ``make_error()``
    about ``timeout_s`` later (at most ``tick_s`` late). Loop thread only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, tick_s: float = 0.05) -> None:
        self._loop = loop
        self._tick_s = tick_s
        self._heap: list[tuple[float, int, asyncio.Future[Any], Callable[[], BaseException]]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, fut: asyncio.Future[Any], timeout_s: float, make_error: Callable[[], BaseException]) -> None:
        heapq.heappush(self._heap, (self._loop.time() + timeout_s, next(self._seq), fut, make_error))
        if self._timer is None:
            self._timer = self._loop.call_later(max(timeout_s, self._tick_s), self._sweep)

    def _sweep(self) -> None:
        self._timer = None
        heap = self._heap
        now = self._loop.time()
        while heap and (heap[0][0] <= now or heap[0][2].done()):
            _, _, fut, make_error = heapq.heappop(heap)
            if not fut.done():
                fut.set_exception(make_error())
        if heap:
            self._timer = self._loop.call_later(max(heap[0][0] - now, self._tick_s), self._sweep)


async def start_in_thread(start: Callable[[], object], undo: Callable[[], object]) -> None:
    """``start()`` in a worker thread, awaited. When the awaiting task is cancelled meanwhile, the thread
    cannot be stopped: ``undo()`` runs once ``start()`` has ended (in a worker thread, not awaited), so a
    cancelled start leaves nothing registered or running. A ``start()`` that raises is not undone (it cleans
    up after itself)."""
    lock = threading.Lock()
    state = {"started": False, "abandoned": False}

    def run() -> None:
        start()
        with lock:
            state["started"] = True
            abandoned = state["abandoned"]
        if abandoned:
            undo()

    try:
        await asyncio.to_thread(run)
    except asyncio.CancelledError:
        with lock:
            state["abandoned"] = True
            started = state["started"]
        if started:  # it ended just before the cancellation: undo it here
            asyncio.get_running_loop().run_in_executor(None, undo)
        raise


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine: an ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(type(fn).__call__))


async def resolve(value: T | Awaitable[T]) -> T:
    """``value``, awaited first when it is awaitable (a listener may be ``def`` or ``async def``)."""
    if inspect.isawaitable(value):
        return await value
    return value


def run_on_loop(loop: asyncio.AbstractEventLoop, call: Callable[[], T | Awaitable[T]], timeout_s: float) -> T:
    """From a thread that is not ``loop``'s: run ``call()`` on ``loop`` (awaiting what it returns when that is
    awaitable) and wait for its outcome, at most ``timeout_s``. Raises what it raised, TimeoutError (the
    coroutine is cancelled) or RuntimeError when the loop is closed."""

    async def run() -> T:
        return await resolve(call())

    fut = asyncio.run_coroutine_threadsafe(run(), loop)
    try:
        return fut.result(timeout_s)
    except concurrent.futures.TimeoutError:
        fut.cancel()
        raise TimeoutError(f"the coroutine did not finish within {timeout_s:g} s") from None
