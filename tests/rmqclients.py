"""Test kit for RocketMQ's own clients against the TCP door: each client in a venv of its own, driven in
subprocesses.

Two clients, both installing a package named ``rocketmq`` (so never in one environment):

- ``CPP_044``: PyPI ``rocketmq`` 0.4.4, a wheel bundling the C++ client 1.x behind ctypes.
- ``CPP_200``: the Apache wrapper ``rocketmq-client-python`` 2.0.0 (an sdist, no library inside), with the
  ``librocketmq.so`` of the C++ client 2.1.0 taken from the sdist of ``rocketmq-python-cvs`` 2.1.0.3 and
  copied into the wrapper's package, where its loader looks first.

``installed(client)`` builds the client's venv under ``.cache/rocketmq-clients/`` (gitignored; the folder
``ROCKETMESH_CACHE_DIR`` names instead, as docker/build-image.sh has it) once: downloads with pip, every file
checked against its pinned sha256, all under a file lock, so that two pytest-xdist workers asking at once
build it once. A machine that cannot reach the package index raises ``ClientUnavailable``; ``require``
turns that into a failure that says so (a client that was not run proves nothing).

``ClientRun`` runs one driver (tests/rocketmq_drivers/) with a JSON job and collects the JSON lines it
reports; each run has its own HOME (where the 0.4.4 library writes its log and its consumers' offset
snapshots) and ROCKETMQ_CLIENT_LOG_DIR (the 2.1.0 library's log), and ``report()`` gives the tail of that
log, which names the broker's remark when a request failed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from procs import ServiceProcess

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ROCKETMESH_CACHE_DIR") or ROOT / ".cache") / "rocketmq-clients"
DRIVERS = Path(__file__).resolve().with_name("rocketmq_drivers")
#: pip's waits when the index does not answer (its configured default is minutes).
PIP_NETWORK = ["--timeout", "20", "--retries", "1"]


class ClientUnavailable(Exception):
    """The client could not be fetched (no package index); the message says what pip said."""


@dataclass(frozen=True)
class Pinned:
    """A distribution file fetched with ``pip download --no-deps``: its requirement, file name and sha256;
    ``sdist``: ask for the source distribution (``--no-binary :all:``)."""

    requirement: str
    filename: str
    sha256: str
    sdist: bool = False


@dataclass(frozen=True)
class Library:
    """A shared library taken out of a pinned sdist and put in the installed package."""

    source: Pinned
    member: str
    sha256: str
    #: Where it goes, relative to the venv's site-packages.
    target: str


@dataclass(frozen=True)
class RocketMQClient:
    """One RocketMQ client: its venv's name, what pip installs, the library added, the driver script."""

    name: str
    install: Pinned
    driver: str
    library: Library | None = None


CPP_044 = RocketMQClient(
    name="rocketmq-0.4.4",
    install=Pinned("rocketmq==0.4.4", "rocketmq-0.4.4-py2.py3-none-manylinux1_x86_64.whl",
                   "19a10219f5074d1050e88cdbdfed3903a374b3f83c0dd2c8773e1e93e33ad02d"),
    driver="cpp_044.py",
)

CPP_200 = RocketMQClient(
    name="rocketmq-client-python-2.0.0",
    install=Pinned("rocketmq-client-python==2.0.0", "rocketmq-client-python-2.0.0.tar.gz",
                   "692324adaa8107eebd0369117043871d90035ddb1562f9999c5681136f16f738", sdist=True),
    driver="cpp_200.py",
    library=Library(
        source=Pinned("rocketmq-python-cvs==2.1.0.3", "rocketmq-python-cvs-2.1.0.3.tar.gz",
                      "99e4ce8008554a74193a3ad94b60f939a4666c48ffabbf4c4417a109daf1419d", sdist=True),
        member="rocketmq-python-cvs-2.1.0.3/rocketmq/librocketmq.so",
        sha256="ed3fce39f2b926637637a2b8b9122799f207b0cdf98dbd9110505bf43170fa30",
        target="rocketmq/librocketmq.so",
    ),
)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(cmd: list[str], timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})


def _fetch(pinned: Pinned) -> Path:
    """The pinned file in the download cache, fetched with pip when missing; its sha256 checked either way."""
    downloads = CACHE / "downloads"
    path = downloads / pinned.filename
    if not path.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", str(downloads), *PIP_NETWORK,
               *(["--no-binary", ":all:"] if pinned.sdist else ["--only-binary", ":all:"]), pinned.requirement]
        out = _run(cmd)
        if out.returncode != 0 or not path.exists():
            last = (out.stderr.strip().splitlines() or [f"pip exited {out.returncode}"])[-1]
            raise ClientUnavailable(f"pip download {pinned.requirement} failed (is the package index reachable?): "
                                    f"{last}")
    digest = sha256_of(path)
    if digest != pinned.sha256:
        path.unlink()
        raise AssertionError(f"{pinned.filename} has sha256 {digest}, pinned {pinned.sha256}: not the file "
                             "these tests were written against (deleted from the cache)")
    return path


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _build(client: RocketMQClient, venv: Path) -> None:
    dist = _fetch(client.install)
    library = _fetch(client.library.source) if client.library else None
    shutil.rmtree(venv, ignore_errors=True)
    # No pip of its own (bootstrapping one takes seconds): this Python's pip installs into it.
    out = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert out.returncode == 0, f"python -m venv {venv} failed:\n{out.stderr}"
    # An sdist is built in pip's isolated build environment, whose setuptools come from the index.
    out = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                *PIP_NETWORK, str(dist)])
    if out.returncode != 0:
        raise ClientUnavailable(f"pip install {dist.name} failed: "
                                f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
    if client.library and library:
        target = _site_packages(venv) / client.library.target
        with tarfile.open(library) as tar:
            member = tar.extractfile(client.library.member)
            assert member is not None, f"{client.library.member} is not a file in {library.name}"
            target.write_bytes(member.read())
        digest = sha256_of(target)
        assert digest == client.library.sha256, (
            f"{client.library.member} of {library.name} has sha256 {digest}, pinned {client.library.sha256}")
    out = _run([str(venv / "bin" / "python"), "-c", "import rocketmq.client"])
    assert out.returncode == 0, f"{client.name}: import rocketmq.client fails:\n{out.stderr[-2000:]}"


@contextlib.contextmanager
def _cache_lock() -> Iterator[None]:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass(frozen=True)
class InstalledClient:
    """A client's venv, ready: its Python and its driver script."""

    client: RocketMQClient
    python: Path

    @property
    def driver(self) -> Path:
        return DRIVERS / self.client.driver


def installed(client: RocketMQClient) -> InstalledClient:
    """The client's venv, built on first use (see the module docstring); ClientUnavailable without an index."""
    venv = CACHE / client.name
    stamp = venv / "rocketmesh-pins.json"
    # A venv is bound to the Python it was made from: another Python (or a new pin) builds it again.
    pins = json.dumps([sys.version, sys.base_prefix, client.install.sha256,
                       client.library.sha256 if client.library else None])
    with _cache_lock():
        if not (stamp.exists() and stamp.read_text() == pins):
            _build(client, venv)
            stamp.write_text(pins)  # last: a venv whose build was cut short is built again
    return InstalledClient(client, venv / "bin" / "python")


def require(client: RocketMQClient) -> InstalledClient:
    """``installed(client)``, or the test failed in one line when the index cannot be reached (a client that
    was not run proves nothing)."""
    try:
        return installed(client)
    except ClientUnavailable as exc:
        pytest.fail(f"{client.name} cannot be fetched ({exc}): the RocketMQ client tests must run; give this "
                    "machine the package index")


class ClientRun:
    """One driver process of ``client`` running ``job`` (a dict; ``timeout_s`` is added: the driver ends itself
    past it); ``events`` holds what it reported so far. Start with ``start()``, end with ``stop()``."""

    def __init__(self, client: InstalledClient, job: dict[str, Any], workdir: Path, name: str,
                 timeout_s: float = 60.0) -> None:
        self.client = client
        self.name = name
        self.job = {"timeout_s": timeout_s, **job}
        self.workdir = workdir / name
        self.home = self.workdir / "home"
        self.log_dir = self.workdir / "log"
        self.events: list[dict[str, Any]] = []
        self.noise: list[str] = []
        self._cond = threading.Condition()
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> ClientRun:
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
               "ROCKETMQ_CLIENT_LOG_DIR": str(self.log_dir), "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
        with open(self.workdir / "stderr", "w") as stderr:
            self.proc = subprocess.Popen([str(self.client.python), str(self.client.driver)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                         env=env, cwd=self.workdir)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.job) + "\n")
        self.proc.stdin.flush()
        self._reader = threading.Thread(target=self._read, name=f"read-{self.name}", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            with self._cond:
                if isinstance(event, dict) and "event" in event:
                    self.events.append(event)
                else:
                    self.noise.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    # -- what it reported ---------------------------------------------------------

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind so far (``msg``, ``sent``, ``send_failed``, ``checked`` ...)."""
        with self._cond:
            return [e for e in self.events if e["event"] == kind]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.of("msg")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait(self, predicate: Callable[[ClientRun], object], timeout_s: float, what: str) -> None:
        """Until ``predicate(self)`` holds; AssertionError with the client's log tail when the time is up, the
        process ended, or it reported an error first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if predicate(self):
                    return
                ended = self.proc is None or self.proc.poll() is not None
                errors = [e for e in self.events if e["event"] in ("error", "timeout")]
                left = deadline - time.monotonic()
                if ended or errors or left <= 0:
                    why = "it exited" if ended else "it reported an error" if errors else f"{timeout_s} s passed"
                    raise AssertionError(f"{self.name}: {what}: not met ({why})\n{self.report()}")
                self._cond.wait(min(left, 0.2))

    def wait_for(self, kind: str, count: int = 1, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """Until ``count`` events of ``kind`` came; returns them."""
        self.wait(lambda run: len(run.of(kind)) >= count, timeout_s, f"{count} {kind} event(s)")
        return self.of(kind)

    def wait_started(self, timeout_s: float = 30.0) -> ClientRun:
        self.wait_for("started", 1, timeout_s)
        return self

    def sent(self, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """After ``done``: the sends' results in order; AssertionError naming each send that failed."""
        self.wait_for("done", 1, timeout_s)
        failed = self.of("send_failed")
        assert not failed, f"{self.name}: sends failed: {failed}\n{self.report()}"
        return self.of("sent")

    def _logs(self) -> list[Path]:
        """The C++ library's log files (0.4.4: under $HOME/logs/rocketmq-cpp; 2.1.0: ROCKETMQ_CLIENT_LOG_DIR)."""
        logs = [*self.home.glob("logs/rocketmq-cpp/*.log*"), *self.log_dir.glob("*")]
        return sorted((p for p in logs if p.is_file()), key=lambda p: p.stat().st_mtime)

    def log_lines(self, text: str) -> list[str]:
        """The lines of the library's log that hold ``text``."""
        return [line for log in self._logs() for line in log.read_text(errors="replace").splitlines()
                if text in line]

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the library's log."""
        out = []
        for log in self._logs():
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log} (last {len(tail)} lines) ---\n" + "\n".join(tail))
        return "\n".join(out) or f"(no client log under {self.workdir})"

    def report(self) -> str:
        """The run's events of note, its stderr and the tail of its library's log, for a failure message."""
        with self._cond:
            notable = [e for e in self.events if e["event"] not in ("msg", "sent")]
            noise = self.noise[-20:]
        stderr = (self.workdir / "stderr").read_text(errors="replace").splitlines()[-30:]
        return (f"--- {self.name}: {self.client.client.name}, exit {self.proc.poll() if self.proc else None}; "
                f"{len(self.messages)} msg, {len(self.of('sent'))} sent; other events: {notable}\n"
                + ("--- stdout, not JSON ---\n" + "\n".join(noise) + "\n" if noise else "")
                + "--- stderr ---\n" + "\n".join(stderr) + "\n" + self.log_tail())

    # -- ending it ------------------------------------------------------------------

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """Ask it to stop (it shuts its client down, bounded, and exits); killed if it does not end in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self._reader is not None:
            self._reader.join(5)
        return self.proc.returncode


class ClientRuns:
    """The runs a test started (``start(...)`` makes and starts one, its name server ``namesrv``);
    ``stop_all()`` at its end prints the report of each and the output of the ``services`` (the broker's
    side of a refused request), which pytest shows when the test failed."""

    def __init__(self, client: InstalledClient, workdir: Path, namesrv: str,
                 services: Sequence[ServiceProcess] = ()) -> None:
        self.client = client
        self.workdir = workdir
        self.namesrv = namesrv
        self.services = list(services)
        self.runs: list[ClientRun] = []

    def start(self, role: str, name: str | None = None, timeout_s: float = 60.0, **job: Any) -> ClientRun:
        run = ClientRun(self.client, {"role": role, "namesrv": self.namesrv, **job}, self.workdir,
                        name or f"{role}{len(self.runs)}", timeout_s)
        self.runs.append(run)
        return run.start()

    def stop_all(self) -> None:
        for run in self.runs:
            run.stop()
        for run in self.runs:
            print(run.report())
        for service in self.services:
            print(service.output(40))
