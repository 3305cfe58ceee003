"""``rocketmesh health``: each kind of service, asked over its own protocol, is healthy (exit 0, one line);
a port where nothing listens, or a service of another kind, is unhealthy (exit 1, what was wrong)."""

from __future__ import annotations

from collections.abc import Callable

from procs import SchedulerProcess, TxnCheckerProcess, free_port, run_cli


def test_each_running_service_is_healthy_over_its_own_protocol(
        namesrv, broker, start_scheduler: Callable[..., SchedulerProcess],
        start_txn_checker: Callable[..., TxnCheckerProcess]) -> None:
    scheduler = start_scheduler(namesrv.addr)
    checker = start_txn_checker(namesrv.addr)
    for service, addr, says in (("namesrv", namesrv.addr, "broker group(s) registered"),
                                ("broker", broker.addr, "commitlog at"),
                                ("scheduler", scheduler.addr, "delivered"),
                                ("txn-checker", checker.addr, "checked")):
        out = run_cli("health", service, addr)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"healthy: {service} at {addr}: ") and says in out.stdout, out.stdout


def test_nothing_listening_or_another_kind_of_service_is_unhealthy(namesrv, broker) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    out = run_cli("health", "broker", nobody, "--timeout-ms", "500")
    assert out.returncode == 1
    assert out.stderr.startswith(f"unhealthy: broker at {nobody} did not answer within 500 ms")
    out = run_cli("health", "broker", namesrv.addr)
    assert out.returncode == 1
    assert f"{namesrv.addr} answers, but it is not a broker" in out.stderr
    out = run_cli("health", "scheduler", broker.addr)
    assert out.returncode == 1
    assert f"{broker.addr} answers, but it is not a scheduler" in out.stderr


def test_without_an_address_it_asks_where_the_service_said_it_serves(
        tmp_path, namesrv, start_scheduler: Callable[..., SchedulerProcess]) -> None:
    """In a container (ROCKETMESH_ADDRESS_FILE set by the image) a replica on a free port is found."""
    scheduler = start_scheduler(namesrv.addr)
    port = scheduler.addr.rsplit(":", 1)[1]
    addr_file = tmp_path / "rocketmesh.addr"
    addr_file.write_text(f"0.0.0.0:{port}\n")  # as a service listening on all interfaces writes it
    out = run_cli("health", "scheduler", env={"ROCKETMESH_ADDRESS_FILE": str(addr_file)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"healthy: scheduler at 127.0.0.1:{port}: ")
    addr_file.unlink()  # no file: the port rocketmesh up gives it
    out = run_cli("health", "scheduler", "--timeout-ms", "300", env={"ROCKETMESH_ADDRESS_FILE": str(addr_file)})
    assert "scheduler at 127.0.0.1:10950" in out.stdout + out.stderr
