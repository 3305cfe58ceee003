"""Start a service of ours as a child process on free ports, wait until it serves, stop it with a bound.

``rocketmesh up`` (cli/supervisor.py), the tests' service processes and the benches start services this one
way: :func:`launch` runs ``python -P -m rocketmesh.<service> ...``
(:func:`rocketmesh.runtime.python_process.python_module_argv`) in a session of its own, its output
appended to a log file, with this process's pid in its environment (it stops by itself should this process
die without stopping it); :meth:`Launched.wait_ready` waits for the line
``<name> listening on <host:port>`` the service prints once it serves, in what this start of it wrote (a
line an earlier run left in the log never counts), or for a check of the caller's; :func:`stop_process`
sends SIGTERM and, past the bound, SIGKILL. Nothing here imports a service.

:func:`free_port` picks ports from below the kernel's range for outgoing connections: a port taken from
that range (bind to port 0) can be given to any process's next outgoing connection before the service it was
meant for binds it, and a busy machine's many connections make that happen.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rocketmesh.runtime.python_process import SUPERVISOR_PID_ENV

__all__ = ["READY_LINE", "Launched", "PortPicker", "ServiceStartError", "free_port", "launch", "service_port_range",
           "stop_process", "tail"]

#: The line a service prints once it serves; group 1 is its address.
READY_LINE = re.compile(r"listening on (\S+)")


class ServiceStartError(RuntimeError):
    """A child did not come up; the message carries the tail of its log."""


def tail(path: str, lines: int = 20) -> str:
    """The last ``lines`` lines of the file at ``path`` ('' when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max(8192, 256 * lines)))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> int | None:
    """SIGTERM ``proc``, wait up to ``timeout_s``, then SIGKILL; returns its exit status."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        except ProcessLookupError:  # gone between the poll and the signal
            proc.wait(5)
    return proc.returncode


@dataclass
class Launched:
    """One start of a child process: the process, its log and where this start began writing to it."""

    name: str
    proc: subprocess.Popen
    log_path: str
    #: Size of the log when this process started: its ready line is looked for from here on.
    log_offset: int
    #: Where its stderr goes when not into the log; named in failures.
    err_path: str | None = None
    #: How many of the last lines of its log (and stderr) a failure quotes.
    tail_lines: int = 20

    def ready_address(self) -> str | None:
        """The address of the ready line this start printed (a plain line: a JSON log line naming one does not
        count), None before it did."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                data = f.read()
        except OSError:
            return None
        for raw in data.split(b"\n")[:-1]:  # the last piece is an unfinished line, or empty
            line = raw.decode(errors="replace")
            m = READY_LINE.search(line)
            if m and not line.lstrip().startswith("{"):
                return m.group(1)
        return None

    def wait_ready(self, timeout_s: float, ready: Callable[[], bool] | None = None) -> str:
        """Until this start printed its ready line (``ready``: until ``ready()`` holds instead); returns the
        line's address ('' with ``ready``). ServiceStartError with the log's tail when the process exits
        first, or when ``timeout_s`` passes (the process is stopped then)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if ready is None:
                address = self.ready_address()
                if address is not None:
                    return address
            elif ready():
                return ""
            if self.proc.poll() is not None:
                raise ServiceStartError(f"{self.name} exited with {self.proc.returncode} before it was ready; "
                                        f"{self._logs()}")
            if time.monotonic() >= deadline:
                stop_process(self.proc, 5)
                raise ServiceStartError(f"{self.name} was not ready within {timeout_s:g}s; {self._logs()}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """:func:`stop_process` of it."""
        return stop_process(self.proc, timeout_s)

    def _logs(self) -> str:
        text = f"its log ({self.log_path}) ends:\n{tail(self.log_path, self.tail_lines)}"
        if self.err_path:
            text += f"\nits stderr ({self.err_path}) ends:\n{tail(self.err_path, self.tail_lines)}"
        return text


def launch(name: str, argv: Sequence[str], log_path: str, *, err_path: str | None = None,
           env: Mapping[str, str] | None = None, cwd: str | None = None) -> Launched:
    """Start ``argv`` (``python_module_argv("rocketmesh.broker", ...)``, say) in a session of its own: stdout
    appended to ``log_path``, stderr too or to ``err_path``; this process's environment with ``env`` over it
    and :data:`SUPERVISOR_PID_ENV` naming this process. Does not wait: see :meth:`Launched.wait_ready`."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    full_env = {**os.environ, **(env or {}), SUPERVISOR_PID_ENV: str(os.getpid())}
    with open(log_path, "ab") as out, open(err_path or os.devnull, "ab") as err:
        offset = out.seek(0, os.SEEK_END)
        proc = subprocess.Popen(list(argv), stdout=out, stderr=err if err_path else subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=full_env, cwd=cwd, start_new_session=True)
    return Launched(name, proc, log_path, offset, err_path)


def _ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections (32768 where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def service_port_range() -> range:
    """The ports :func:`free_port` picks from: 20000 up to the kernel's range for outgoing connections."""
    return range(20000, max(20001, min(_ephemeral_low(), 32768)))


class PortPicker:
    """``picker()``: a TCP port of ``ports`` free a moment ago, never handed out before by this picker (a port
    picked but not bound yet by its service looks free: only a second pick here could race for it)."""

    def __init__(self, ports: range) -> None:
        self.ports = ports
        self._given: set[int] = set()
        self._rng = random.Random()

    def __call__(self, host: str = "127.0.0.1") -> int:
        for _ in range(200):
            port = self._rng.choice(self.ports)
            if port in self._given:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            self._given.add(port)
            return port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded range: let the kernel pick
            s.bind((host, 0))
            return s.getsockname()[1]


#: A free port for a service this process starts (see :class:`PortPicker`).
free_port = PortPicker(service_port_range())
