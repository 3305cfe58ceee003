"""One service of ours run as a process for a test: started, waited for, looked at, stopped.

:class:`ServiceProcess` is rocketmesh.runtime.launcher put to a test's use (the launcher runs it as
``rocketmesh up`` runs a service: ``python -P -m rocketmesh.<service>``, in a session of its own, told
this process's pid so that it stops by itself should this process die without stopping it). Its
stdout and stderr go to two files in its data folder, and a failure to come up raises
:class:`~rocketmesh.runtime.launcher.ServiceStartError` quoting the last lines of both.

    proc = ServiceProcess("namesrv", python_module_argv("rocketmesh.namesrv", "-p", "0"), data_dir)
    address = proc.start(15.0)          # its ready line's address
    ...
    proc.stop()
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rocketmesh.runtime.launcher import Launched, ServiceStartError, launch, stop_process

__all__ = ["ReadyCheck", "ServiceProcess", "ServiceStartError"]

#: Given the address of the process's ready line ('' when its ready line is not waited for): whether it
#: serves. A real request, typically (see rocketmesh.testing.probes).
ReadyCheck = Callable[[str], bool]


class ServiceProcess:
    """``argv`` run as the process named ``name``, its output in ``data_dir`` (``<name>.stdout``,
    ``<name>.stderr``); ``env`` goes over this process's environment. It may be started again after a stop
    (its output files are appended to)."""

    #: How many last lines of its stdout and stderr a failure quotes.
    tail_lines = 60

    def __init__(self, name: str, argv: Sequence[str], data_dir: Path | str,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.argv = list(argv)
        self.data_dir = Path(data_dir)
        self.env = dict(env or {})
        self.run: Launched | None = None
        self.stdout_path = self.data_dir / f"{name}.stdout"
        self.stderr_path = self.data_dir / f"{name}.stderr"

    # -- life cycle ----------------------------------------------------------------------------------------

    def launch(self) -> ServiceProcess:
        """Start the process; does not wait (see :meth:`wait_ready`)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Unbuffered, so that a process that dies leaves every line it printed; INFO lines unless the
        # environment asks otherwise, so that a failure has something to quote.
        env = {"ROCKETMESH_LOG_LEVEL": os.environ.get("ROCKETMESH_LOG_LEVEL", "INFO"), "PYTHONUNBUFFERED": "1",
               **self.env}
        self.run = launch(self.name, self.argv, str(self.stdout_path), err_path=str(self.stderr_path), env=env,
                          cwd=str(self.data_dir))
        self.run.tail_lines = self.tail_lines
        return self

    def start(self, timeout_s: float = 15.0, check: ReadyCheck | None = None) -> str:
        """:meth:`launch`, then :meth:`wait_ready`; returns the address of its ready line."""
        self.launch()
        return self.wait_ready(timeout_s, check)

    def wait_ready(self, timeout_s: float = 15.0, check: ReadyCheck | None = None, *, ready_line: bool = True) -> str:
        """Until this start printed its ready line (``<name> listening on <host:port>``) and then ``check``
        (given that line's address) holds; returns the address. ``ready_line=False``: ``check('')`` alone.

        ServiceStartError with the tail of its output when the process exits first or ``timeout_s`` passes
        (the process is stopped then)."""
        run = self.run
        if run is None:
            raise RuntimeError(f"{self.name}: launch() first")
        deadline = time.monotonic() + timeout_s
        address = run.wait_ready(timeout_s) if ready_line else ""
        if check is not None:
            run.wait_ready(max(0.0, deadline - time.monotonic()), ready=lambda: check(address))
        return address

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, wait up to ``timeout_s``, then SIGKILL; returns its exit status (None: never started)."""
        if self.run is None:
            return None
        return stop_process(self.run.proc, timeout_s)

    def kill(self) -> None:
        """SIGKILL now (a crash), and reap."""
        if self.alive:
            assert self.run is not None
            self.run.proc.kill()
            self.run.proc.wait(5)

    # -- looking at it -------------------------------------------------------------------------------------

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The process of the last start."""
        return None if self.run is None else self.run.proc

    @property
    def alive(self) -> bool:
        """Whether the process of the last start runs."""
        return self.run is not None and self.run.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """Its exit status; None while it runs or before it started."""
        return None if self.run is None else self.run.proc.poll()

    @property
    def pid(self) -> int | None:
        """The pid of the last start."""
        return None if self.run is None else self.run.proc.pid

    def stdout_text(self, this_run: bool = False) -> str:
        """Everything the process printed, over all its runs; ``this_run``: since the last start only."""
        try:
            with open(self.stdout_path, "rb") as f:
                if this_run and self.run is not None:
                    f.seek(self.run.log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def stderr_text(self) -> str:
        """Everything the process wrote on stderr (its log lines), over all its runs."""
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def output(self, tail_lines: int | None = None) -> str:
        """The last lines of its stdout and stderr, for a failure's message."""
        n = self.tail_lines if tail_lines is None else tail_lines
        out = "\n".join(self.stdout_text().splitlines()[-n:])
        err = "\n".join(self.stderr_text().splitlines()[-n:])
        return (f"--- {self.name} stdout ({self.stdout_path}) ---\n{out}\n"
                f"--- {self.name} stderr ({self.stderr_path}) ---\n{err}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, pid={self.pid}, alive={self.alive})"
