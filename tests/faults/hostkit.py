"""Deployments across simulated hosts (netkit.py): name servers, broker groups, the system services.

    net = make_net("ns1", "ns2", "a", "b", "a-slave", "b-slave", "sys", "client2")
    mesh = start_mesh(net, start_on, FIVE_HOSTS)
    mesh.namesrv                 # "10.77.x.1:port;10.77.x.2:port", what a client is given
    mesh.groups["broker-a"].master.addr

Every broker registers every ``registerNameServerPeriod`` (1 s here, not 30 s, so routes converge within
a test), each slave has its ha service on the slave's own host (cut from the master, it is cut from both),
and the ha service retries quickly, so a heal is followed within a second or two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson
from netkit import Net

from procs import (
    FAST_CHECKER,
    FAST_SCHEDULER,
    BrokerProcess,
    HaProcess,
    NamesrvProcess,
    SchedulerProcess,
    ServiceProcess,
    TxnCheckerProcess,
    wait_for,
)
from rocketmesh import Admin
from rocketmesh.remoting import RemotingClient, RequestCode, request
from rocketmesh.testing.probes import broker_registered

StartOn = Callable[..., ServiceProcess]

#: A slave whose ha service has not asked for this long counts as gone (haHousekeepingInterval).
HOUSEKEEPING_MS = 2000
#: How long a SYNC_MASTER send waits for its slave (syncFlushTimeout).
SYNC_FLUSH_TIMEOUT_MS = 1000
#: Settings every broker of a deployment gets.
BROKER_DEFAULTS: dict[str, object] = dict(registerNameServerPeriod=1000, syncFlushTimeout=SYNC_FLUSH_TIMEOUT_MS,
                                          haHousekeepingInterval=HOUSEKEEPING_MS)

#: The five-host layout: a name server on each master's host (RocketMQ's 2m-2s deployment), each slave
#: with its ha service on a host of its own, the scheduler and the txn-checker on a fifth.
FIVE_HOSTS: dict[str, object] = {
    "namesrv": ("a", "b"),
    "groups": {"broker-a": ("a", "a-slave"), "broker-b": ("b", "b-slave")},
    "system": "sys",
}


@dataclass
class BrokerGroup:
    """One broker group across hosts: master, slave and the slave's ha service."""

    name: str
    master: BrokerProcess
    slave: BrokerProcess
    ha: HaProcess


@dataclass
class Mesh:
    """What :func:`start_mesh` started."""

    namesrvs: list[NamesrvProcess]
    groups: dict[str, BrokerGroup]
    system: list[ServiceProcess] = field(default_factory=list)

    @property
    def namesrv(self) -> str:
        """The name server list a client is given."""
        return ";".join(n.addr for n in self.namesrvs)

    def brokers(self) -> list[BrokerProcess]:
        return [b for g in self.groups.values() for b in (g.master, g.slave)]


def runtime(client: RemotingClient, broker: BrokerProcess) -> dict:
    """The broker's GET_BROKER_RUNTIME_INFO table."""
    resp = client.invoke_sync(broker.addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 3000)
    return orjson.loads(resp.body)["table"]


def start_namesrvs(net: Net, start_on: StartOn, hosts: Sequence[str]) -> list[NamesrvProcess]:
    """A name server on each of ``hosts``, started side by side."""
    namesrvs = [start_on(net[h], NamesrvProcess, name=f"namesrv-{h}", launch=True) for h in hosts]
    for n in namesrvs:
        n.wait_ready(30)
    return namesrvs  # type: ignore[return-value]


def start_mesh(net: Net, start_on: StartOn, layout: Mapping[str, object], *, role: str = "SYNC_MASTER",
               topics: Mapping[str, int] | None = None, **broker_config: object) -> Mesh:
    """Start ``layout`` ({"namesrv": hosts, "groups": {name: (master host, slave host)}, "system": host or
    None}) in ``net``: name servers first, then every broker (masters ``role``, with ``broker_config`` on top
    of :data:`BROKER_DEFAULTS`), then each slave's ha service, then the scheduler and the txn-checker. Returns
    once every broker is registered with every name server, each master sees its slave, and ``topics`` (name
    -> queues per broker, default {"HostsTopic": 2}) are routed."""
    namesrvs = start_namesrvs(net, start_on, layout["namesrv"])  # type: ignore[arg-type]
    addrs = ";".join(n.addr for n in namesrvs)
    config = {**BROKER_DEFAULTS, **broker_config}
    pairs: dict[str, tuple[BrokerProcess, BrokerProcess]] = {}
    for name, (master_host, slave_host) in layout["groups"].items():  # type: ignore[attr-defined]
        master = start_on(net[master_host], BrokerProcess, addrs, name=name, launch=True, brokerRole=role, **config)
        slave = start_on(net[slave_host], BrokerProcess, addrs, name=name, launch=True, brokerId=1,
                         brokerRole="SLAVE", slaveSyncIntervalMills=500, **config)
        pairs[name] = (master, slave)  # type: ignore[assignment]
    for master, slave in pairs.values():
        master.wait_ready(30)
        slave.wait_ready(30)
    for n in namesrvs:
        for master, slave in pairs.values():
            for b in (master, slave):
                wait_for(lambda n=n, b=b: broker_registered(n.addr, b.broker_name, b.addr), 15,
                         what=f"{b.broker_name} {b.addr} registered with {n.addr}")
    groups: dict[str, BrokerGroup] = {}
    with RemotingClient(name="hostkit") as client:
        for name, (master, slave) in pairs.items():
            slave_host = layout["groups"][name][1]  # type: ignore[index]
            # Back to the master within a second of a heal: short request timeouts and retry backoff.
            ha = start_on(net[slave_host], HaProcess, addrs, name=f"ha-{name}", brokerName=name,
                          requestTimeoutMillis=1000, retryMaxDelayMillis=500)
            wait_for(lambda m=master: any(s["connected"] for s in runtime(client, m)["haSlaves"]), 15,
                     what=f"{name}'s master seeing its slave connected")
            groups[name] = BrokerGroup(name, master, slave, ha)  # type: ignore[arg-type]
    mesh = Mesh(namesrvs, groups)
    system_host = layout.get("system")
    if system_host:
        mesh.system.append(start_on(net[system_host], SchedulerProcess, addrs, name="scheduler0", **FAST_SCHEDULER))
        mesh.system.append(start_on(net[system_host], TxnCheckerProcess, addrs, name="txn-checker0", **FAST_CHECKER))
    with Admin(addrs) as admin:
        for topic, queues in (topics if topics is not None else {"HostsTopic": 2}).items():
            admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
            admin.wait_topic_route(topic)
    return mesh
