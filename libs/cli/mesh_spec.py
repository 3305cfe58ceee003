"""What ``rocketmesh up`` starts, as data: each service's name, kind and arguments.

``rocketmesh up`` runs these as processes; docker-compose.yml runs the same ones as containers
(``rocketmesh <kind> <argv...>``), and tests/unit/test_compose_file.py checks that the compose
file's commands are what :func:`namesrv_commands` and :func:`service_commands` give for its
:class:`MeshSpec`. Change an argument here and the compose file must follow.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from rocketmesh.acl import config as acl_config
from rocketmesh.acl.config import ClientCredentialsConfig

#: Where each service's Prometheus port is, from the broker's (metricsPromExporterPort): RocketMQ's 5557 for it.
METRICS_PORT_OFFSETS = {"namesrv": -1, "broker-a": 0, "scheduler": 1, "txn-checker": 2, "ha": 3, "broker-a-s": 4,
                        "namesrv-2": 5}
#: Replicas (a scheduler or txn-checker on a free port) share one network namespace in the compose file, so
#: each such service has a range of Prometheus ports, past the fixed ones, and a replica takes the first free.
REPLICA_METRICS_OFFSETS = {"scheduler": 13, "txn-checker": 23}
#: How many replicas of each serve metrics (the width of its range).
METRICS_REPLICAS = 10
#: Keys that make a broker what it is in its group: the slave gets its own.
ROLE_KEYS = ("brokerrole", "brokerid")
#: ``--set`` keys that reach the name servers too: the ACL they check requests against.
ACL_SERVER_KEYS = ("aclenable", "aclfile", "aclreloadintervalms")
#: ``--set`` keys ``up`` gives each service itself: passed as they are, they would give master and slave one
#: port; ``--set metricsPromExporterPort=N`` is the broker's port, as ``--metrics-port N`` is (see
#: :func:`metrics_port_in`).
METRICS_KEYS = ("metricspromexporterport",)
#: ``--set`` keys that name the account the services' own requests are signed with. They go on no command
#: line (where ``ps`` shows them): :attr:`MeshSpec.account` carries them into the services' environment.
CREDENTIAL_KEYS = ("accesskey", "secretkey")


def _set_item(item: str) -> str:
    """A ``--set`` item as a service gets it: a relative aclFile is the user's (from the working directory
    ``up`` ran in), not one under each service's config directory, as a service would read it."""
    key, sep, value = item.partition("=")
    if key.strip().lower() == "aclfile" and value.strip():
        return f"{key}={os.path.abspath(value.strip())}"
    return item


def _key(item: str) -> str:
    return item.partition("=")[0].strip().lower()


def _sets_of(spec: MeshSpec, keys: tuple[str, ...]) -> list[str]:
    """``--set`` arguments for the items of ``spec.sets`` whose key is one of ``keys`` (lower-case)."""
    return [a for item in spec.sets if _key(item) in keys for a in ("--set", _set_item(item))]


def _broker_sets(spec: MeshSpec, skip: tuple[str, ...] = ()) -> list[str]:
    """``--set`` arguments for a broker: every item but the account's, the Prometheus port (each service
    gets its own) and ``skip``'s keys."""
    skip = CREDENTIAL_KEYS + METRICS_KEYS + skip
    return [a for item in spec.sets if _key(item) not in skip for a in ("--set", _set_item(item))]


def metrics_port_in(sets: tuple[str, ...] | list[str], default: int) -> int:
    """The broker's Prometheus port for ``up``: the last ``--set metricsPromExporterPort=N`` among ``sets``,
    else ``default`` (``--metrics-port``). The other services' ports are offset from it. Raises ValueError
    for a value that is not a port."""
    port = default
    for item in sets:
        if _key(item) in METRICS_KEYS:
            value = item.partition("=")[2].strip()
            if not value.isdigit() or not 0 < int(value) < 65536:
                raise ValueError(f"--set {item.strip()}: metricsPromExporterPort takes a port number, 1-65535")
            port = int(value)
    return port


def _account_env(account: ClientCredentialsConfig | None) -> dict[str, str]:
    """The environment that gives a service ``account`` (none: no account)."""
    return {} if account is None else acl_config.account_env(account.access_key, account.secret_key)


@dataclass(frozen=True)
class MeshSpec:
    """The knobs of ``rocketmesh up`` (its flags) that shape the services' command lines."""

    data_dir: str
    host: str = "127.0.0.1"
    namesrv_ports: tuple[int, ...] = (9876,)
    broker_port: int = 10911
    #: 0: a free port, and no fixed instanceName, so that any number of replicas can run side by side.
    scheduler_port: int = 10950
    txn_checker_port: int = 10960
    ha: bool = False
    slave_port: int = 10921
    ha_port: int = 10970
    #: The TCP doors for RocketMQ's own clients (remotingListenPort): the name server's, the broker's and,
    #: with ``ha``, the slave's; None opens none.
    namesrv_remoting_port: int | None = 9866
    broker_remoting_port: int | None = 10915
    slave_remoting_port: int | None = 10925
    #: The broker's Prometheus port, the others' are offset from it; None: no Prometheus endpoints.
    metrics_port: int | None = 5557
    broker_config: str | None = None
    #: ``--set KEY=VALUE`` items for the brokers (the slave takes all but its role keys; accessKey and
    #: secretKey are left to ``account``).
    sets: tuple[str, ...] = ()
    #: The account the brokers (REGISTER_BROKER), the system services and the dashboard sign with, given in
    #: their environment; None: they send unsigned requests.
    account: ClientCredentialsConfig | None = field(default=None, repr=False)
    #: The dashboard's HTTP port (0: a free one); None: no dashboard.
    dashboard_port: int | None = 8082
    #: The brokers check ACL (aclEnable, from --set, the broker config or the environment): the dashboard
    #: then asks every operator to sign in with an account.
    acl_enable: bool = False

    def metrics_ports(self) -> dict[str, int]:
        base = self.metrics_port if self.metrics_port is not None else 0
        return {name: base + offset for name, offset in METRICS_PORT_OFFSETS.items()}

    def metrics_port_of(self, name: str) -> str:
        """``name``'s metricsPromExporterPort: its port, or for replicas (a system service on a free
        status port) a range, ``5570-5579`` for the scheduler by default."""
        port = {"scheduler": self.scheduler_port, "txn-checker": self.txn_checker_port}.get(name)
        if port == 0:
            low = (self.metrics_port or 0) + REPLICA_METRICS_OFFSETS[name]
            return f"{low}-{low + METRICS_REPLICAS - 1}"
        return str(self.metrics_ports()[name])


@dataclass(frozen=True)
class ServiceCommand:
    """One service: ``name`` (namesrv, broker-a, ...), ``kind`` (``rocketmesh <kind>``), its arguments, and
    what its environment adds (the account's keys)."""

    name: str
    kind: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict, repr=False)


def _metrics(spec: MeshSpec, name: str) -> list[str]:
    if spec.metrics_port is None:
        return []
    return ["--set", "metricsExporterType=PROM", "--set", f"metricsPromExporterPort={spec.metrics_port_of(name)}"]


def namesrv_name(index: int) -> str:
    """``namesrv``, ``namesrv-2``, ... for the name servers in the order of ``namesrv_ports``."""
    return "namesrv" if index == 0 else f"namesrv-{index + 1}"


def namesrv_commands(spec: MeshSpec) -> list[ServiceCommand]:
    """The name servers, started first."""
    out = []
    for i, port in enumerate(spec.namesrv_ports):
        name = namesrv_name(i)
        door = spec.namesrv_remoting_port
        out.append(ServiceCommand(name, "namesrv", (
            "-p", str(port), "--listen-address", spec.host,
            *_door(None if door is None else door + i),
            "--kv-config-path", os.path.join(spec.data_dir, name, "kvConfig.json"), *_metrics(spec, name),
            *_sets_of(spec, ACL_SERVER_KEYS))))
    return out


def _door(port: int | None) -> tuple[str, ...]:
    return ("--remoting-listen-port", str(port)) if port is not None else ()


def _system(spec: MeshSpec, name: str, namesrv: str, port: int, *extra: str) -> ServiceCommand:
    # A replica on a fixed port is the only one; replicas on free ports name themselves apart.
    named = ["--set", f"instanceName={name}"] if port else []
    return ServiceCommand(name, name, (
        "-n", namesrv, "--listen-port", str(port), "--set", f"listenAddress={spec.host}", *named, *extra,
        *_metrics(spec, name)), _account_env(spec.account))


def service_commands(spec: MeshSpec, namesrv: str) -> list[ServiceCommand]:
    """Everything after the name servers, in start order, given the name server list ``namesrv``."""
    conf = ["-c", spec.broker_config] if spec.broker_config else []
    out = [ServiceCommand("broker-a", "broker", (
        "-n", namesrv, "--listen-port", str(spec.broker_port), *_door(spec.broker_remoting_port),
        "--store-dir", os.path.join(spec.data_dir, "broker-a", "store"), "--broker-name", "broker-a",
        "--set", f"listenAddress={spec.host}", *_metrics(spec, "broker-a"), *conf, *_broker_sets(spec)),
        _account_env(spec.account))]
    if spec.ha:
        out.append(ServiceCommand("broker-a-s", "broker", (
            "-n", namesrv, "--listen-port", str(spec.slave_port), *_door(spec.slave_remoting_port),
            "--store-dir", os.path.join(spec.data_dir, "broker-a-s", "store"), "--broker-name", "broker-a",
            "--set", f"listenAddress={spec.host}", "--set", "brokerId=1", "--set", "brokerRole=SLAVE",
            *_metrics(spec, "broker-a-s"), *conf, *_broker_sets(spec, ROLE_KEYS)), _account_env(spec.account)))
        out.append(_system(spec, "ha", namesrv, spec.ha_port, "--set", "brokerName=broker-a"))
    out.append(_system(spec, "scheduler", namesrv, spec.scheduler_port))
    out.append(_system(spec, "txn-checker", namesrv, spec.txn_checker_port))
    if spec.dashboard_port is not None:
        out.append(dashboard_command(spec, namesrv))
    return out


def dashboard_command(spec: MeshSpec, namesrv: str) -> ServiceCommand:
    """The web console, a client of the mesh started last: it serves on ``spec.host`` like the others; with ACL
    on it asks operators to sign in, and it samples the mesh as ``spec.account`` (its own account)."""
    acl = ("--set", "aclEnable=true") if spec.acl_enable else ()
    return ServiceCommand("dashboard", "dashboard", (
        "-n", namesrv, "--listen-address", spec.host, "--listen-port", str(spec.dashboard_port), *acl),
        _account_env(spec.account))
