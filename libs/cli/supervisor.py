"""Process supervision for ``rocketmesh up``: start services as child processes, watch, stop.

Services are started as ``python -P -m rocketmesh.<service>``; nothing here
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

import os
import re
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

from rocketmesh.runtime.python_process import SUPERVISOR_PID_ENV, python_module_argv

_READY = re.compile(r"listening on (\S+)")


class ServiceStartError(RuntimeError):
    """A child did not come up; the message carries the tail of its log."""


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
    """A running service: its process, where this start of it began writing its log, its crashes."""

    spec: ChildSpec
    proc: subprocess.Popen
    #: Size of the log file when this process started: readiness is read from here on.
    log_offset: int = 0
    address: str = ""
    #: Monotonic times of the crashes still inside the restart window.
    crashes: deque = field(default_factory=deque)


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Supervisor:
    """Starts children in order, restarts a crashed one (bounded), stops all in reverse order."""

    def __init__(self, max_restarts: int = 5, on_event: Optional[Callable[[str], None]] = None,
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
        child = Child(spec, *self._spawn(spec))
        child.address = self._wait_ready(child)
        self.children.append(child)
        return child

    def _spawn(self, spec: ChildSpec) -> tuple[subprocess.Popen, int]:
        """Start the process; returns it and the log's size before it wrote anything."""
        os.makedirs(os.path.dirname(spec.log_path), exist_ok=True)
        log = open(spec.log_path, "ab")
        # Every OTEL_* setting reaches every service; each traces under its own name. Each stops by itself
        # should this process be killed before it could stop them (SUPERVISOR_PID_ENV).
        env = {**os.environ, "OTEL_SERVICE_NAME": otel_service_name(spec.module), **spec.env,
               SUPERVISOR_PID_ENV: str(os.getpid())}
        try:
            offset = log.seek(0, os.SEEK_END)
            proc = subprocess.Popen(python_module_argv(spec.module, *spec.args), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
            return proc, offset
        finally:
            log.close()

    def _wait_ready(self, child: Child) -> str:
        spec = child.spec
        deadline = time.monotonic() + spec.ready_timeout_s
        offset = child.log_offset
        pending = b""
        while time.monotonic() < deadline:
            try:
                with open(spec.log_path, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                data = b""
            offset += len(data)
            *lines, pending = (pending + data).split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                m = _READY.search(line)
                if m and not line.lstrip().startswith("{"):
                    return m.group(1)
            if child.proc.poll() is not None:
                raise ServiceStartError(
                    f"{spec.name} exited with {child.proc.returncode} before it was ready; "
                    f"its log ({spec.log_path}) ends:\n{_tail(spec.log_path)}")
            time.sleep(0.05)
        self._terminate(child.proc, 5)
        raise ServiceStartError(f"{spec.name} was not ready within {spec.ready_timeout_s:.0f}s; "
                                f"its log ({spec.log_path}) ends:\n{_tail(spec.log_path)}")

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
                child.proc, child.log_offset = self._spawn(child.spec)
                try:
                    child.address = self._wait_ready(child)
                    self.on_event(f"{child.spec.name} is back on {child.address}")
                except ServiceStartError as exc:
                    self.on_event(str(exc))

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM each child, newest first, waiting for each; SIGKILL what does not stop in time."""
        self._stopping.set()
        for child in reversed(self.children):
            self._terminate(child.proc, timeout_s)

    @staticmethod
    def _terminate(proc: subprocess.Popen, timeout_s: float) -> None:
        if proc.poll() is not None:
            return
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        except ProcessLookupError:
            pass
