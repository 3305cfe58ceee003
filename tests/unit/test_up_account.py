"""The account ``rocketmesh up`` gives its broker and system services: where it comes from, and that it
travels in their environment, never on a command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketmesh.acl.config import ACCESS_KEY_ENV, SECRET_KEY_ENV
from rocketmesh.cli.mesh_spec import MeshSpec, namesrv_commands, service_commands
from rocketmesh.cli.security import up_account


def test_keys_given_with_set_reach_the_services_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (ACCESS_KEY_ENV, SECRET_KEY_ENV):
        monkeypatch.delenv(var, raising=False)
    sets = ("aclEnable=true", "accessKey=rocketmq2", "secretKey=12345678")
    spec = MeshSpec(data_dir="/d", ha=True, sets=sets, account=up_account(sets, None))
    cmds = [*namesrv_commands(spec), *service_commands(spec, "127.0.0.1:9876")]
    assert all("secretKey=12345678" not in c.argv and "accessKey=rocketmq2" not in c.argv for c in cmds)
    signing = {c.name for c in cmds if c.env == {ACCESS_KEY_ENV: "rocketmq2", SECRET_KEY_ENV: "12345678"}}
    assert signing == {"broker-a", "broker-a-s", "ha", "scheduler", "txn-checker", "dashboard"}


def test_with_acl_on_and_no_keys_the_files_admin_account_is_taken(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (ACCESS_KEY_ENV, SECRET_KEY_ENV):
        monkeypatch.delenv(var, raising=False)
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - {accessKey: orders-app, secretKey: orders-secret}\n"
                   "  - {accessKey: rocketmq2, secretKey: '12345678', admin: true}\n")
    account = up_account(["aclEnable=true", f"aclFile={acl}"], None)
    assert account is not None and (account.access_key, account.secret_key) == ("rocketmq2", "12345678")
    assert up_account([f"aclFile={acl}"], None) is None  # ACL off: nothing signs
    with pytest.raises(ValueError, match="aclFile=PATH"):
        up_account(["aclEnable=true"], None)
    acl.write_text("accounts:\n  - {accessKey: orders-app, secretKey: orders-secret}\n")
    with pytest.raises(ValueError, match="admin: true"):
        up_account(["aclEnable=true", f"aclFile={acl}"], None)
    monkeypatch.setenv(SECRET_KEY_ENV, "12345678")  # the secret kept off up's own command line
    with pytest.raises(ValueError, match="accessKey and secretKey go together"):
        up_account(["aclEnable=true", f"aclFile={acl}"], None)
    account = up_account(["aclEnable=true", "accessKey=rocketmq2"], None)
    assert account is not None and account.secret_key == "12345678"


def test_a_prometheus_port_given_with_set_is_the_brokers_and_each_service_keeps_its_own() -> None:
    """``up --ha --set metricsPromExporterPort=N``: the master serves on N, the slave and the other services
    on their offsets from it (never two on one port), as with ``--metrics-port N``."""
    from rocketmesh.cli.mesh_spec import metrics_port_in

    sets = ("brokerRole=SYNC_MASTER", "metricsPromExporterPort=6557")
    spec = MeshSpec(data_dir="/d", ha=True, sets=sets, metrics_port=metrics_port_in(sets, 5557))
    cmds = [*namesrv_commands(spec), *service_commands(spec, "127.0.0.1:9876")]
    ports = {}
    for c in cmds:
        if c.kind == "dashboard":  # a web console: it serves no /metrics
            assert not any(a.startswith("metricsPromExporterPort=") for a in c.argv), c.argv
            continue
        given = [a.split("=", 1)[1] for a in c.argv if a.startswith("metricsPromExporterPort=")]
        assert len(given) == 1, (c.name, c.argv)  # one, and it is up's
        ports[c.name] = given[0]
    assert ports["broker-a"] == "6557"
    assert len(set(ports.values())) == len(ports)
    assert ports == {name: spec.metrics_port_of(name) for name in ports}  # what up prints
    assert metrics_port_in((), 5557) == 5557
    with pytest.raises(ValueError, match="port number"):
        metrics_port_in(("metricsPromExporterPort=http",), 5557)
