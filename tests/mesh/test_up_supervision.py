"""``rocketmesh up`` as an operator sees it: "mesh is up" means the mesh answers, readiness is this
run's, and crashes are counted in a window (systemd's StartLimitIntervalSec), not over the mesh's life."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from procs import cli_command, free_port, run_cli, wait_for
from rocketmesh.cli.supervisor import ChildSpec, ServiceStartError, Supervisor

TESTS = str(Path(__file__).resolve().parents[1])  # where crashy_service.py is


def crashy(log: Path, seconds: float, *extra: str) -> ChildSpec:
    return ChildSpec("crashy", "crashy_service", [str(seconds), *extra], str(log), env={"PYTHONPATH": TESTS},
                     ready_timeout_s=10)


def watch_in_thread(sup: Supervisor) -> threading.Thread:
    t = threading.Thread(target=sup.watch, kwargs={"poll_s": 0.05}, daemon=True)
    t.start()
    return t


def test_crashes_in_quick_succession_stop_the_mesh(tmp_path: Path) -> None:
    events: list[str] = []
    sup = Supervisor(max_restarts=2, restart_window_s=60, backoff_s=0.05, on_event=events.append)
    sup.start(crashy(tmp_path / "crashy.log", 0.2))
    watcher = watch_in_thread(sup)
    watcher.join(30)
    try:
        assert not watcher.is_alive(), events
        assert sum("restarting in" in e for e in events) == 2, events
        assert "giving up on the mesh" in events[-1], events
    finally:
        sup.stop()


def test_crashes_further_apart_than_the_window_are_forgiven(tmp_path: Path) -> None:
    events: list[str] = []
    sup = Supervisor(max_restarts=1, restart_window_s=0.5, backoff_s=0.05, on_event=events.append)
    sup.start(crashy(tmp_path / "crashy.log", 1.0))  # each run lasts longer than the window
    watcher = watch_in_thread(sup)
    try:
        wait_for(lambda: sum("is back on" in e for e in events) >= 3, 30, "three restarts")
        assert not any("giving up" in e for e in events), events
        # Each crash is the first in its window: the back-off starts again from its first step.
        assert all("restarting in 0.1s" in e for e in events if "restarting in" in e), events
    finally:
        sup.stop()
        watcher.join(10)


def test_a_ready_line_left_by_an_earlier_run_does_not_count(tmp_path: Path) -> None:
    log = tmp_path / "crashy.log"
    log.write_text("crashy listening on 127.0.0.1:1\n")  # an earlier run's
    sup = Supervisor()
    with pytest.raises(ServiceStartError, match="exited with 1 before it was ready"):
        sup.start(crashy(log, 0.5, "--never-ready"))
    sup.stop()


class Mesh:
    """``rocketmesh up`` on a data dir, as a process; ``lines`` is what it printed up to "Stop with Ctrl-C"."""

    def __init__(self, data: Path, *extra: str) -> None:
        self.namesrv = f"127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [*cli_command(), "up", "--data-dir", str(data), "--namesrv-port", self.namesrv.rsplit(":", 1)[1],
             "--no-remoting", "--broker-port", str(free_port()), "--scheduler-port", str(free_port()),
             "--txn-checker-port", str(free_port()), "--no-metrics", "--no-dashboard",
             "--set", "mappedFileSizeCommitLog=4194304",
             "--set", "maxHashSlotNum=10000", "--set", "maxIndexNum=40000", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        for line in self.proc.stdout:
            self.lines.append(line)
            if "Stop with Ctrl-C" in line:
                break

    @property
    def up(self) -> bool:
        return any("mesh is up" in line for line in self.lines)

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


def test_up_on_an_existing_data_dir_answers_as_soon_as_it_says_so(tmp_path: Path) -> None:
    data = tmp_path / "mesh"
    first = Mesh(data)
    try:
        assert first.up, "".join(first.lines)
        sent = run_cli("produce", "-n", first.namesrv, "-t", "KeptTopic", "-c", "4")
        assert sent.returncode == 0, sent.stderr
        consumed = run_cli("consume", "-n", first.namesrv, "-t", "KeptTopic", "-g", "kept-group", "-c", "4",
                           "--timeout", "30")
        assert consumed.returncode == 0 and consumed.stdout.count("Receive New Messages") == 4, consumed.stderr
    finally:
        assert first.stop()[0] == 0

    again = Mesh(data)
    try:
        assert again.up, "".join(again.lines)
        # At once: no second of TOPIC_NOT_EXIST or "no master broker registered" after "mesh is up".
        status = run_cli("admin", "topic-status", "-n", again.namesrv, "-t", "KeptTopic")
        assert status.returncode == 0, status.stderr
        assert sum(int(m) for m in re.findall(r"broker-a\s+\d+\s+0\s+(\d+)", status.stdout)) == 4, status.stdout
        progress = run_cli("admin", "consumer-progress", "-n", again.namesrv, "-g", "kept-group")
        assert progress.returncode == 0, progress.stderr
        assert "Diff Total: 0" in progress.stdout, progress.stdout
    finally:
        assert again.stop()[0] == 0

    # The logs now hold two runs' ready lines; a broker that cannot start is still reported as such.
    broken = Mesh(data, "--set", "flushDiskType=BOGUS")
    code, err = broken.stop()
    assert not broken.up, "".join(broken.lines)
    assert code == 1
    assert "broker-a exited with 2 before it was ready" in err and "flushDiskType" in err, err
