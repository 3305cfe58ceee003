"""The push consumer's pool of consume threads: the thread that went idle last takes the next task, up to
its size run at once, a failing task costs nothing, and stop drops what waits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rocketmesh.client.consumer.consume_service import _Workers


def _pool(size: int) -> _Workers:
    workers = _Workers("test", size)
    workers.start()
    return workers


class _Held:
    """Tasks that each say they started, then wait for ``gate`` before they record their name in ``ran``."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)
        self.ran: list[str] = []

    def task(self, name: str) -> Callable[[], None]:
        def run() -> None:
            self.started.release()
            self.gate.wait(5)
            self.ran.append(name)
        return run

    def all_started(self, n: int) -> bool:
        return all(self.started.acquire(timeout=5) for _ in range(n))


def test_one_task_at_a_time_runs_on_the_thread_that_went_idle_last() -> None:
    workers = _pool(8)
    try:
        seen: list[str] = []
        for _ in range(50):
            done = threading.Event()
            workers.submit(lambda done=done: (seen.append(threading.current_thread().name), done.set()))
            assert done.wait(5)
            time.sleep(0.002)  # the thread is idle again before the next task comes
        # A FIFO of waiters would have taken all eight in turn; the warm thread keeps the light load.
        assert len(set(seen)) <= 2, sorted(set(seen))
    finally:
        workers.stop(5)


def test_as_many_tasks_as_threads_run_at_once_and_the_rest_wait_for_a_thread() -> None:
    workers = _pool(4)
    held = _Held()
    try:
        workers.submit_many([held.task(str(i)) for i in range(4)])
        assert held.all_started(4), "all four threads run at once"
        late = [threading.Event() for _ in range(3)]
        for ev in late:
            workers.submit(ev.set)
        assert workers.backlog() == 3
        assert not any(ev.is_set() for ev in late)
        held.gate.set()
        assert all(ev.wait(5) for ev in late)
        deadline = time.monotonic() + 5
        while len(held.ran) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(held.ran) == ["0", "1", "2", "3"]
        assert workers.backlog() == 0
    finally:
        workers.stop(5)


def test_a_task_that_raises_leaves_its_thread_serving() -> None:
    workers = _pool(1)
    try:
        def fails() -> None:
            raise RuntimeError("listener bug")

        workers.submit(fails)
        done = threading.Event()
        workers.submit(done.set)
        assert done.wait(5)
    finally:
        workers.stop(5)


def test_stop_lets_the_running_task_finish_drops_the_queued_and_ends_every_thread() -> None:
    workers = _pool(2)
    held = _Held()
    workers.submit(held.task("a"))
    workers.submit(held.task("b"))
    assert held.all_started(2)
    workers.submit(lambda: held.ran.append("queued"))
    stopper = threading.Thread(target=workers.stop, args=(5,))
    stopper.start()
    time.sleep(0.05)
    held.gate.set()
    stopper.join(10)
    assert sorted(held.ran) == ["a", "b"]
    assert not any(t.is_alive() for t in workers._threads)
    workers.submit(lambda: held.ran.append("after stop"))
    time.sleep(0.05)
    assert sorted(held.ran) == ["a", "b"]


def test_stop_ends_idle_threads_at_once() -> None:
    workers = _pool(6)
    time.sleep(0.05)  # every thread idle
    start = time.monotonic()
    workers.stop(5)
    assert time.monotonic() - start < 2
    assert not any(t.is_alive() for t in workers._threads)
