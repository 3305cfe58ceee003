"""Real service processes for black-box tests.

``ServiceProcess`` runs ``python -m rocketmesh.<service> <args>`` with its own
data folder, sends its stdout/stderr to files there, waits until it answers
(a real request, or a line on stdout), and stops it with SIGTERM then
SIGKILL. It is rocketmesh.testing's ServiceProcess (the one the test kit's
LocalMesh runs), on rocketmesh.runtime.launcher as ``rocketmesh up``; the
command lines, ports and readiness probes are the test kit's too. Here it
adds what only these tests need: a ready check given at construction, the
ACL account a process signs with, ``kill()`` for crash tests, and ``netns``:
the process run in a network namespace (a simulated host of
tests/faults/netkit.py, its services on that host's ``host`` address).
Failures are AssertionErrors carrying the process's output.

    proc = ServiceProcess("namesrv", ["-p", str(port)], data_dir, ready=remoting_probe(addr))
    proc.start()
    ...
    proc.stop()
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from rocketmesh.acl import SessionCredentials
from rocketmesh.acl.config import account_env
from rocketmesh.remoting import RemotingClient, RequestCode, request
from rocketmesh.runtime.launcher import ServiceStartError, stop_process
from rocketmesh.runtime.python_process import python_module_argv
from rocketmesh.testing import process as kit
from rocketmesh.testing.commands import (
    FAST_CHECKER,
    FAST_SCHEDULER,
    TEST_STORE_CONFIG,
    broker_args,
    namesrv_args,
    system_service_args,
)
from rocketmesh.testing.ports import free_port
from rocketmesh.testing.probes import answers, broker_registered, probe_client

__all__ = ["FAST_BROKER", "FAST_CHECKER", "FAST_SCHEDULER", "TEST_STORE_CONFIG", "BrokerProcess", "DashboardProcess",
           "HaProcess",
           "NamesrvProcess", "SchedulerProcess", "ServiceProcess", "SystemServiceProcess", "TxnCheckerProcess",
           "child_pids", "cli_command", "cpu_seconds", "free_port", "freeze", "launched_output", "netns_exec",
           "probe_client", "read_until_up", "remoting_probe", "run_cli", "stdout_line", "stop_process", "thaw",
           "wait_for"]

#: Ready check: returns True once the process serves.
ReadyCheck = Callable[["ServiceProcess"], bool]


def wait_for(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "condition",
             interval_s: float = 0.05) -> object:
    """Poll ``predicate`` until it returns something true (returned), or fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        time.sleep(interval_s)


def freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped (the signal lands asynchronously)."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")

    wait_for(stopped, 5.0, what=f"process {pid} stopped")


def thaw(pid: int) -> None:
    """SIGCONT ``pid`` (the other half of ``freeze``)."""
    os.kill(pid, signal.SIGCONT)


def child_pids(pid: int) -> list[int]:
    """The live children of ``pid`` (the services ``rocketmesh up`` started, say).

    Threads come and go while ``/proc/<pid>/task`` is read (a ZeroMQ or pool
    thread may end between the listing and the open); one that is gone has no
    children to report, so it is skipped.
    """
    out: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            continue
    return out


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time ``pid`` has used so far, its children not included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cli_command() -> list[str]:
    """The ``rocketmesh`` console script a user runs (installed beside this Python), or, where the
    install put none, the same entry point run the way the script runs it (without the working
    directory on the import path)."""
    script = Path(sys.executable).with_name("rocketmesh")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-P", "-c", "import sys; from rocketmesh.cli import main; sys.exit(main())"]


def run_cli(*args: str, timeout: float = 60, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``rocketmesh args`` to the end (bounded by ``timeout``); text output captured."""
    return subprocess.run([*cli_command(), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=None if env is None else {**os.environ, **env}, stdin=subprocess.DEVNULL)


def read_until_up(up: subprocess.Popen) -> str:
    """What a ``rocketmesh up`` started with its output on a text pipe printed up to "Stop with Ctrl-C" (it
    serves from there); AssertionError with that output if it exits first."""
    lines: list[str] = []
    while not lines or "Stop with Ctrl-C" not in lines[-1]:
        line = up.stdout.readline()
        assert line, "rocketmesh up exited early:\n" + "".join(lines)
        lines.append(line)
    return "".join(lines)


def netns_exec(netns: str | None) -> list[str]:
    """What runs a command in the network namespace ``netns`` (``ip netns exec NAME``; it execs the command,
    so the pid started is the command's own); nothing for None or '' (this process's namespace)."""
    return ["ip", "netns", "exec", netns] if netns else []


def remoting_probe(addr: str, code: int = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER) -> ReadyCheck:
    """Ready when a request with ``code`` to ``addr`` gets any response (even an error code: NO_PERMISSION
    from a server checking ACL says it serves as well); signed with the process's ``credentials``."""
    return lambda proc: answers(addr, code, proc.credentials)


def stdout_line(pattern: str) -> ReadyCheck:
    """Ready when a line of the process's stdout matches the regex ``pattern``."""
    rx = re.compile(pattern)

    def check(proc: ServiceProcess) -> bool:
        return any(rx.search(line) for line in proc.stdout_text(this_run=True).splitlines())

    return check


#: Each launch of a ServiceProcess in this test process, in order: what a failed test's report quotes.
LAUNCHED: list[weakref.ref[ServiceProcess]] = []


def launched_output(since: int, tail_lines: int = 40) -> str:
    """The last lines of each service process launched since the ``since``-th launch (see LAUNCHED), once each."""
    procs: list[ServiceProcess] = []
    for ref in LAUNCHED[since:]:
        proc = ref()
        if proc is not None and proc not in procs:
            procs.append(proc)
    return "\n".join(proc.output(tail_lines) for proc in procs)


class ServiceProcess(kit.ServiceProcess):
    """One service run as ``python -P -m rocketmesh.<module> <args>`` (as ``rocketmesh up`` runs it), or as
    ``command`` followed by ``args`` (the console script, say). ``credentials``: the ACL account it signs its
    own requests with, handed over in its environment as ``rocketmesh up`` does; the tests' probes of it sign
    with it too. ``netns``: run in that network namespace (``ip netns exec NAME`` before the command)."""

    def __init__(
        self,
        module: str,
        args: Sequence[str],
        data_dir: Path,
        ready: ReadyCheck | None = None,
        env: dict[str, str] | None = None,
        name: str | None = None,
        command: Sequence[str] | None = None,
        credentials: SessionCredentials | None = None,
        netns: str | None = None,
    ) -> None:
        self.module = module
        self.netns = netns
        self.command = [*netns_exec(netns),
                        *(command if command is not None else python_module_argv(f"rocketmesh.{module}"))]
        self.args = list(args)
        self.ready = ready
        self.credentials = credentials
        super().__init__(name or module, [*self.command, *self.args], data_dir,
                         {**(env or {}),
                          **(account_env(credentials.access_key, credentials.secret_key) if credentials else {})})

    def launch(self) -> ServiceProcess:
        self.argv = [*self.command, *self.args]  # a test may have changed them for a restart
        super().launch()
        LAUNCHED.append(weakref.ref(self))
        return self

    def start(self, timeout_s: float = 15.0) -> ServiceProcess:  # type: ignore[override]
        """Start the process and wait until ``ready`` says so (AssertionError with its output if not)."""
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = 15.0) -> None:  # type: ignore[override]
        """Poll ``ready`` until it holds (None: at once), the process dies, or the deadline passes (then it is
        stopped); AssertionError with its output if not."""
        assert self.run is not None, "start() first"
        if self.ready is None:
            if not self.alive:
                raise AssertionError(f"{self.name} exited with {self.returncode} before it was ready\n{self.output()}")
            return
        ready = self.ready
        try:
            super().wait_ready(timeout_s, lambda _address: ready(self), ready_line=False)
        except ServiceStartError as exc:
            raise AssertionError(str(exc)) from None


def _door(config: dict[str, object], door: bool) -> str | None:
    """With ``door``: a free port for the TCP door of RocketMQ's own clients (remotingListenPort, put in
    ``config``), as ``host:port``."""
    if not door:
        return None
    port = config.setdefault("remotingListenPort", free_port())
    return f"127.0.0.1:{port}"


class NamesrvProcess(ServiceProcess):
    """A name server on a free loopback port (or on ``host`` in network namespace ``netns``); ``addr`` is its
    ``host:port``; ``env`` adds to its environment (the CurveZMQ key file, say); ``door``: it opens the TCP
    door too, at ``door_addr`` (the name server address of a RocketMQ client)."""

    def __init__(self, data_dir: Path, port: int | None = None, name: str = "namesrv",
                 env: dict[str, str] | None = None, door: bool = False, host: str = "127.0.0.1",
                 netns: str | None = None, **config: object) -> None:
        self.port = port or free_port()
        self.addr = f"{host}:{self.port}"
        self.door_addr = _door(config, door)
        args = namesrv_args(self.port, str(Path(data_dir) / "kvConfig.json"), config, host)
        super().__init__("namesrv", args, data_dir, ready=remoting_probe(self.addr), env=env, name=name,
                         netns=netns)


#: Broker settings under which a client that left (its connection closed or silent) is let go within seconds.
FAST_BROKER = dict(channelExpiredTimeout=3000, clientScanInterval=500)


class BrokerProcess(ServiceProcess):
    """A broker on a free loopback port (or on ``host`` in network namespace ``netns``, its brokerIP1),
    registered with ``namesrv`` ("host:port;host:port"); ``env`` adds to its environment; ``door``: it opens
    the TCP door too, at ``door_addr``."""

    def __init__(self, data_dir: Path, namesrv: str, port: int | None = None, name: str = "broker-a",
                 cluster: str = "DefaultCluster", env: dict[str, str] | None = None,
                 credentials: SessionCredentials | None = None, door: bool = False, host: str = "127.0.0.1",
                 netns: str | None = None, **config: object) -> None:
        self.port = port or free_port()
        self.addr = f"{host}:{self.port}"
        self.door_addr = _door(config, door)
        self.broker_name = name
        self.namesrv_addr = namesrv.split(";")[0]
        self.store_dir = Path(data_dir) / "store"
        args = broker_args(namesrv, self.port, str(self.store_dir), name, cluster, config, host)
        super().__init__("broker", args, data_dir, ready=stdout_line(r"listening on"), env=env, name=name,
                         credentials=credentials, netns=netns)

    def commitlog_digest(self, upto: int) -> str:
        """SHA-256 of this broker's commitlog bytes below ``upto`` (read from its files: a master's and its
        slave's compare equal once the slave holds the master's bytes, with no gap and nothing twice)."""
        h = hashlib.sha256()
        left = upto
        for path in sorted((self.store_dir / "commitlog").iterdir()):
            if left <= 0:
                break
            data = path.read_bytes()[:left]
            h.update(data)
            left -= len(data)
        return h.hexdigest()

    def wait_registered(self, timeout_s: float = 10.0) -> None:
        """Until the (first) name server lists this broker in its cluster table (asked with the broker's
        account: a name server checking ACL answers no one else)."""
        deadline = time.monotonic() + timeout_s
        while not broker_registered(self.namesrv_addr, self.broker_name, self.addr, self.credentials):
            if time.monotonic() >= deadline:
                raise AssertionError(f"{self.broker_name} not registered within {timeout_s} s\n{self.output()}")
            time.sleep(0.05)


class SystemServiceProcess(ServiceProcess):
    """A replica of a system-group service (scheduler, txn-checker) serving the brokers known to ``namesrv``;
    ``addr`` is its status port (on loopback, or on ``host`` in network namespace ``netns``)."""

    module = ""

    def __init__(self, data_dir: Path, namesrv: str, port: int | None = None, name: str = "",
                 command: Sequence[str] | None = None, env: dict[str, str] | None = None,
                 credentials: SessionCredentials | None = None, host: str = "127.0.0.1", netns: str | None = None,
                 **config: object) -> None:
        self.port = port or free_port()
        self.addr = f"{host}:{self.port}"
        name = name or self.module
        args = system_service_args(namesrv, self.port, name, config, host)
        super().__init__(self.module, args, data_dir, ready=stdout_line(r"listening on"), env=env, name=name,
                         command=command, credentials=credentials, netns=netns)

    def status(self, timeout_ms: int = 3000) -> dict:
        """Its GET_CONSUMER_RUNNING_INFO answer: owned queues and what it did."""
        import orjson

        with RemotingClient(name="probe") as client:
            resp = client.invoke_sync(self.addr, request(RequestCode.GET_CONSUMER_RUNNING_INFO), timeout_ms)
        return orjson.loads(resp.body)


class SchedulerProcess(SystemServiceProcess):
    """A scheduler replica (delay levels, timers)."""

    module = "scheduler"


class TxnCheckerProcess(SystemServiceProcess):
    """A txn-checker replica (half-message check-back)."""

    module = "txn_checker"


class HaProcess(SystemServiceProcess):
    """The ha service of one slave (replication from its master); ``status()`` says where it stands."""

    module = "ha"


class DashboardProcess(ServiceProcess):
    """The web console on a free loopback port, a client of ``namesrv``; ``url`` is where it serves."""

    def __init__(self, data_dir: Path, namesrv: str, port: int | None = None, name: str = "dashboard",
                 env: dict[str, str] | None = None, credentials: SessionCredentials | None = None,
                 **config: object) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["-n", namesrv, "--listen-port", str(self.port),
                *(a for k, v in config.items() for a in ("--set", f"{k}={v}"))]
        super().__init__("dashboard", args, data_dir, ready=stdout_line(r"dashboard listening on"), env=env,
                         name=name, credentials=credentials)
