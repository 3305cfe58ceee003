"""``rocketmesh <service>`` is ``python -m rocketmesh.<service>``: the same options, loopback by default,
and no folder in the working directory can stand in for the installed package."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from procs import (
    NamesrvProcess,
    ServiceProcess,
    TxnCheckerProcess,
    cli_command,
    free_port,
    remoting_probe,
    run_cli,
    stdout_line,
)


def test_the_readme_txn_checker_command_runs_with_its_options(tmp_path: Path, namesrv, broker) -> None:
    # rocketmesh txn-checker -n ... --listen-port P --set transactionCheckMax=5 (and instanceName, listenAddress)
    checker = TxnCheckerProcess(tmp_path / "checker", namesrv.addr, command=[*cli_command(), "txn-checker"],
                                transactionCheckMax=5)
    checker.start(timeout_s=30)
    try:
        assert f"listening on {checker.addr}" in checker.stdout_text()
        assert checker.status()["transactionCheckMax"] == 5
    finally:
        assert checker.stop() == 0, checker.output()


def test_a_standalone_name_server_listens_on_loopback_only(tmp_path: Path) -> None:
    port = free_port()
    ns = ServiceProcess("namesrv", ["-p", str(port), "--kv-config-path", str(tmp_path / "kv.json")], tmp_path,
                        ready=remoting_probe(f"127.0.0.1:{port}"), command=[*cli_command(), "namesrv"])
    ns.start(timeout_s=30)
    try:
        assert f"namesrv listening on 127.0.0.1:{port}" in ns.stdout_text()
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        assert ns.stop() == 0, ns.output()


def test_a_standalone_broker_listens_on_loopback_only(tmp_path: Path, namesrv: NamesrvProcess) -> None:
    port = free_port()
    broker = ServiceProcess("broker", ["-n", namesrv.addr, "--listen-port", str(port),
                                       "--store-dir", str(tmp_path / "store")],
                            tmp_path, ready=stdout_line("listening on"), command=[*cli_command(), "broker"])
    broker.start(timeout_s=30)
    try:
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        assert broker.stop() == 0, broker.output()


def test_a_standalone_scheduler_serves_its_status_on_loopback_only(tmp_path: Path, namesrv, broker) -> None:
    port = free_port()
    scheduler = ServiceProcess("scheduler", ["-n", namesrv.addr, "--listen-port", str(port)], tmp_path,
                               ready=stdout_line("listening on"), command=[*cli_command(), "scheduler"])
    scheduler.start(timeout_s=30)
    try:
        assert listening_addresses(port) == {"127.0.0.1"}
    finally:
        assert scheduler.stop() == 0, scheduler.output()


def listening_addresses(port: int) -> set[str]:
    """The local IPv4 addresses with a TCP socket listening on ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr_hex, port_hex = local.split(":")
        if state == "0A" and int(port_hex, 16) == port:
            found.add(".".join(str(int(addr_hex[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def test_bad_options_of_a_service_are_the_services_own_error(tmp_path: Path) -> None:
    result = run_cli("broker", "--no-such-option", timeout=30)
    assert result.returncode == 2
    assert "usage: rocketmesh broker" in result.stderr and "--no-such-option" in result.stderr


def test_up_runs_from_a_folder_holding_a_folder_named_rocketmesh(tmp_path: Path) -> None:
    # The parent of a clone named rocketmesh: without care, ./rocketmesh shadows the installed package.
    (tmp_path / "rocketmesh" / "libs").mkdir(parents=True)
    (tmp_path / "rocketmesh" / "README.md").write_text("a clone\n")
    assert run_cli("namesrv", "--help", cwd=tmp_path, timeout=30).returncode == 0
    ports = [str(free_port()) for _ in range(4)]
    up = subprocess.Popen([*cli_command(), "up", "--no-remoting", "--data-dir", "data", "--namesrv-port", ports[0],
                           "--broker-port", ports[1], "--scheduler-port", ports[2], "--txn-checker-port", ports[3],
                           "--no-metrics", "--no-dashboard",
                           "--set", "mappedFileSizeCommitLog=4194304", "--set", "maxHashSlotNum=10000",
                           "--set", "maxIndexNum=40000"],
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in up.stdout:
            lines.append(line)
            if "Stop with Ctrl-C" in line:
                break
        assert "mesh is up" in "".join(lines), "".join(lines) + log_tails(tmp_path / "data" / "logs")
    finally:
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)
    assert up.returncode == 0, rest
    assert "cannot import" not in log_tails(tmp_path / "data" / "logs")


def log_tails(logs: Path) -> str:
    return "".join(f"\n--- {p.name} ---\n" + p.read_text(errors="replace")[-2000:] for p in sorted(logs.glob("*.log")))
