"""ServiceThread: a named daemon loop that can be woken early and stopped with a bound."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod

from rocketmesh.runtime.log import get_logger

log = get_logger("rocketmesh", component="service_thread")


class ServiceThread(ABC):
    """Runs ``run_once`` every ``interval_s`` (or sooner when woken) until stopped.

    An exception in ``run_once`` is logged and the loop goes on: a background
    service never dies of one bad turn.
    """

    def __init__(self, name: str, interval_s: float) -> None:
        self.name = name
        self.interval_s = interval_s
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @abstractmethod
    def run_once(self) -> None:
        """One turn of the loop."""

    def on_stop(self) -> None:  # noqa: B027 (an optional hook: most loops have no last work)
        """Last work after the loop ends (a final flush, say)."""

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - logged, loop continues
                log.exception("service_thread_error", thread=self.name)
            self._wake.wait(self.interval_s)
            self._wake.clear()
        try:
            self.on_stop()
        except Exception:  # noqa: BLE001
            log.exception("service_thread_stop_error", thread=self.name)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
