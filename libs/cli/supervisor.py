"""Process supervision for ``rocketmesh up``: start services as child processes, watch, stop.

Services are started as ``python -P -m rocketmesh.<service>`` by
rocketmesh.runtime.launcher (as the tests and benches start them); nothing here
imports a service. Each is told this process's pid and stops by itself if its
parent ever is another process (this one was killed outright). Each child's output goes to a log file under the data
directory; a child is ready when it prints its ``listening on`` line, in what
this start of it wrote (a line an earlier run left in the log never counts).

A child that crashes is restarted after a back-off that doubles with each crash
in the last ``restart_window_s``; ``max_restarts`` crashes within that window
stop the mesh (systemd's StartLimitIntervalSec / StartLimitBurst). Crashes
further apart than the window are forgiven, so a long-lived mesh is not
brought down by five crashes over its whole life.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rocketmesh.runtime.launcher import Launched, ServiceStartError, launch, stop_process
from rocketmesh.runtime.python_process import python_module_argv

__all__ = ["Child", "ChildSpec", "ServiceStartError", "Supervisor", "otel_service_name"]


def otel_service_name(module: str) -> str:
    """``rocketmesh-<service>`` for a service's module (``rocketmesh.txn_checker``: rocketmesh-txn-checker)."""
    return "rocketmesh-" + module.rsplit(".", 1)[-1].replace("_", "-")


@dataclass
class ChildSpec:
    """How to run one service."""

    name: str
    module: str
    args: list[str]
    log_path: str
    env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 60.0


@dataclass
class Child:
    """A running service: this start of its process, its address, its crashes."""

    spec: ChildSpec
    run: Launched
    address: str = ""
    #: Monotonic times of the crashes still inside the restart window.
    crashes: deque = field(default_factory=deque)

    @property
    def proc(self) -> subprocess.Popen:
        """The process of this start."""
        return self.run.proc


class Supervisor:
    """Starts children in order, restarts a crashed one (bounded), stops all in reverse order."""

    def __init__(self, max_restarts: int = 5, on_event: Callable[[str], None] | None = None,
                 restart_window_s: float = 300.0, backoff_s: float = 1.0) -> None:
        if max_restarts < 0 or restart_window_s <= 0 or backoff_s < 0:
            raise ValueError("max_restarts and backoff_s must be >= 0, restart_window_s > 0")
        self.children: list[Child] = []
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        #: The n-th crash within the window waits backoff_s * 2**n before the restart (at most 30 s).
        self.backoff_s = backoff_s
        self.on_event = on_event or (lambda line: print(line, flush=True))
        self._stopping = threading.Event()

    def start(self, spec: ChildSpec) -> Child:
        """Start ``spec`` and wait for its ready line; raises ServiceStartError with its log tail."""
        child = Child(spec, self._spawn(spec))
        child.address = child.run.wait_ready(spec.ready_timeout_s)
        self.children.append(child)
        return child

    @staticmethod
    def _spawn(spec: ChildSpec) -> Launched:
        # Every OTEL_* setting reaches every service; each traces under its own name.
        return launch(spec.name, python_module_argv(spec.module, *spec.args), spec.log_path,
                      env={"OTEL_SERVICE_NAME": otel_service_name(spec.module), **spec.env})

    def watch(self, poll_s: float = 0.5) -> None:
        """Until :meth:`stop`: restart a child that died, unless it crashed ``max_restarts`` times
        within ``restart_window_s``, which stops the mesh."""
        while not self._stopping.wait(poll_s):
            for child in self.children:
                code = child.proc.poll()
                if code is None or self._stopping.is_set():
                    continue
                now = time.monotonic()
                while child.crashes and now - child.crashes[0] > self.restart_window_s:
                    child.crashes.popleft()
                if len(child.crashes) >= self.max_restarts:
                    self.on_event(f"{child.spec.name} exited with {code} after {len(child.crashes)} restarts "
                                  f"within {self.restart_window_s:g}s; giving up on the mesh "
                                  f"(see {child.spec.log_path})")
                    self._stopping.set()
                    break
                child.crashes.append(now)
                delay = min(30.0, self.backoff_s * 2.0 ** len(child.crashes))
                self.on_event(f"{child.spec.name} exited with {code}; restarting in {delay:.3g}s "
                              f"(see {child.spec.log_path})")
                if self._stopping.wait(delay):
                    break
                child.run = self._spawn(child.spec)
                try:
                    child.address = child.run.wait_ready(child.spec.ready_timeout_s)
                    self.on_event(f"{child.spec.name} is back on {child.address}")
                except ServiceStartError as exc:
                    self.on_event(str(exc))

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM each child, newest first, waiting for each; SIGKILL what does not stop in time."""
        self._stopping.set()
        for child in reversed(self.children):
            stop_process(child.proc, timeout_s)
