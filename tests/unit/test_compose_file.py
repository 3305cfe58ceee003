"""docker-compose.yml starts what ``rocketmesh up`` starts: the same commands and keys, checked by parsing it."""

from __future__ import annotations

from pathlib import Path

import yaml

from rocketmesh.cli.mesh_spec import MeshSpec, namesrv_commands, service_commands
from rocketmesh.server.metrics import PortRange

ROOT = Path(__file__).resolve().parents[2]
#: The spec the compose file is written for: `rocketmesh up --host 0.0.0.0 --data-dir /data --ha
#: --broker-config /etc/rocketmesh/broker.conf`, with a second name server and the scheduler and
#: txn-checker on free ports (replicas); the dashboard on its default port, 8082.
SPEC = MeshSpec(data_dir="/data", host="0.0.0.0", namesrv_ports=(9876, 9877), scheduler_port=0, txn_checker_port=0,
                ha=True, broker_config="/etc/rocketmesh/broker.conf")
NAMESRV = "127.0.0.1:9876;127.0.0.1:9877"
#: Services of the compose file that are not mesh services (the network holder, the spark profile).
NOT_MESH = {"mesh", "spark", "spark-orders"}


def _load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def _expected() -> dict[str, list[str]]:
    cmds = [*namesrv_commands(SPEC), *service_commands(SPEC, NAMESRV)]
    return {c.name: [c.kind, *c.argv] for c in cmds}


def test_each_service_runs_the_command_up_runs():
    services = _load("docker-compose.yml")["services"]
    mesh = {name: svc for name, svc in services.items() if name not in NOT_MESH}
    expected = _expected()
    assert set(mesh) == set(expected)
    for name, svc in mesh.items():
        assert svc["command"] == expected[name], name
        assert "entrypoint" not in svc, f"{name}: the image's entrypoint (rocketmesh) runs it"


def test_health_checks_ask_each_service_over_its_protocol_and_dependencies_wait_for_them():
    services = _load("docker-compose.yml")["services"]
    for name, svc in services.items():
        if name in NOT_MESH:
            continue
        kind = svc["command"][0]
        if kind == "dashboard":  # HTTP: its /healthz, asked with the image's Python (no curl there)
            test = svc["healthcheck"]["test"]
            assert test[:3] == ["CMD", "python3", "-c"] and "urllib.request.urlopen(" in test[3], test
            assert f"http://127.0.0.1:{SPEC.dashboard_port}/healthz" in test[3], test
        else:
            assert svc["healthcheck"]["test"] == ["CMD", "rocketmesh", "health", kind], name
        assert svc["init"] is True and svc["restart"] == "unless-stopped", name
        deps = svc["depends_on"]
        if isinstance(deps, dict):
            assert all(d["condition"] == "service_healthy" for d in deps.values()), name


def test_scaled_services_have_no_fixed_names_or_ports():
    services = _load("docker-compose.yml")["services"]
    for name in ("scheduler", "txn-checker"):
        svc = services[name]
        assert "container_name" not in svc and "ports" not in svc
        assert svc["command"][svc["command"].index("--listen-port") + 1] == "0"
        assert not any(a.startswith("instanceName=") for a in svc["command"]), "replicas name themselves apart"


def test_ports_are_published_on_loopback_only_and_match_the_commands():
    services = _load("docker-compose.yml")["services"]
    published = set()
    for spec in services["mesh"]["ports"]:
        host, hport, cport = spec.split(":")
        assert host == "127.0.0.1" and hport == cport, spec
        lo, _, hi = hport.partition("-")
        published.update(range(int(lo), int(hi or lo) + 1))
    assert all("ports" not in svc for name, svc in services.items() if name != "mesh")
    served = set(SPEC.namesrv_ports) | {SPEC.broker_port, SPEC.slave_port, SPEC.dashboard_port}
    metrics = {name: metrics_ports(svc["command"]) for name, svc in services.items()
               if name not in NOT_MESH and svc["command"][0] != "dashboard"}  # the dashboard serves no /metrics
    for ports in metrics.values():
        served.update(ports)
    assert served <= published
    # One network namespace: no two services may try the same metrics port; replicas get a range each.
    assert sum(len(p) for p in metrics.values()) == len(set().union(*metrics.values()))
    assert len(metrics["scheduler"]) >= 3 and len(metrics["txn-checker"]) >= 2


def metrics_ports(command: list[str]) -> range:
    """The ports a service's ``--set metricsPromExporterPort=...`` lets it take."""
    (value,) = [a.partition("=")[2] for a in command if a.startswith("metricsPromExporterPort=")]
    return PortRange(value).ports


def test_brokers_are_configured_by_rocketmq_keys_and_keep_their_stores_in_named_volumes():
    doc = _load("docker-compose.yml")
    services = doc["services"]
    for name in ("broker-a", "broker-a-s"):
        env = services[name]["environment"]
        for key in ("brokerClusterName", "flushDiskType", "mappedFileSizeCommitLog", "fileReservedTime"):
            assert key in env, (name, key)
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" in env and env["OTEL_EXPORTER_OTLP_ENDPOINT"] is None  # passed through
        vols = services[name]["volumes"]
        assert f"{name}-store:/data" in vols and f"{name}-store" in doc["volumes"]
        assert "./docker/broker.conf:/etc/rocketmesh/broker.conf:ro" in vols
    assert services["broker-a"]["environment"]["brokerRole"].endswith("ASYNC_MASTER}")
    assert services["spark"]["profiles"] == ["spark"]


def test_the_broker_b_override_is_broker_a_s_group_by_another_name():
    """docker-compose.broker-b.yml: broker-a, broker-a-s and ha as broker-b, broker-b-s and ha-b, with their
    own ports, stores and metrics ports, published on loopback and apart from the base file's."""
    base = _load("docker-compose.yml")
    over = _load("docker-compose.broker-b.yml")
    swaps = {
        "broker-b": ("broker-a", {"10911": "10931", "10915": "10935", "/data/broker-a/store": "/data/broker-b/store",
                                  "metricsPromExporterPort=5557": "metricsPromExporterPort=5563"}),
        "broker-b-s": ("broker-a-s", {"10921": "10941", "10925": "10945",
                                      "/data/broker-a-s/store": "/data/broker-b-s/store",
                                      "metricsPromExporterPort=5561": "metricsPromExporterPort=5564"}),
        "ha-b": ("ha", {"10970": "10971", "instanceName=ha": "instanceName=ha-b", "brokerName=broker-a":
                        "brokerName=broker-b", "metricsPromExporterPort=5560": "metricsPromExporterPort=5565"}),
    }
    for name, (twin, swap) in swaps.items():
        a, b = base["services"][twin], over["services"][name]
        swap = {"broker-a": "broker-b", **swap}
        assert b["command"] == [swap.get(x, x) for x in a["command"]], name
        assert b["healthcheck"]["test"] == a["healthcheck"]["test"] and b["network_mode"] == "service:mesh", name
        assert b["init"] is True and b["restart"] == "unless-stopped", name
        renamed = {"broker-a": "broker-b", "broker-a-s": "broker-b-s"}
        assert set(b["depends_on"]) == {renamed.get(d, d) for d in a["depends_on"]}, name
        if "volumes" in a:
            assert b["volumes"] == [v.replace(twin, name) for v in a["volumes"]], name
            assert f"{name}-store" in over["volumes"]
            for key in ("brokerClusterName", "flushDiskType", "mappedFileSizeCommitLog", "fileReservedTime"):
                assert key in b["environment"], (name, key)
        # The shell's OTEL_* and log level reach broker-b's services as they reach broker-a's.
        assert set(b["environment"]) == set(a["environment"]), name


def test_adding_broker_b_to_a_running_mesh_leaves_mesh_as_it_is():
    """The override must not change `mesh` (a recreated mesh strands every running service in the old
    network namespace): docker-compose.yml publishes broker-b's ports already, each port once, and lists
    mesh's ports in ascending order, the order compose v1 sorts them into when it merges files (another
    order gives mesh another config hash with the override than without, and `up -d` recreates it)."""
    base = _load("docker-compose.yml")
    over = _load("docker-compose.broker-b.yml")
    assert "mesh" not in over["services"]
    ports = base["services"]["mesh"]["ports"]
    assert {"127.0.0.1:10931:10931", "127.0.0.1:10941:10941", "127.0.0.1:5563-5565:5563-5565"} <= set(ports)
    published: list[int] = []
    for spec in ports:
        host, hport, _ = spec.split(":")
        lo, _, hi = hport.partition("-")
        new = list(range(int(lo), int(hi or lo) + 1))
        assert host == "127.0.0.1" and not set(new) & set(published), spec  # loopback, and no port twice
        published += new
    assert published == sorted(published)
    served: set[int] = set()
    for _name, svc in over["services"].items():
        cmd = svc["command"]
        if cmd[0] == "broker":  # the brokers' ports (the ha service's status port is not published, as ha's)
            served.add(int(cmd[cmd.index("--listen-port") + 1]))
        served.update(metrics_ports(cmd))
    assert served <= set(published)
