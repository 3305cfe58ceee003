"""The name server's cluster table (GET_BROKER_CLUSTER_INFO), RocketMQ's ClusterInfo."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rocketmesh.model.route import MASTER_ID, BrokerData


@dataclass(frozen=True, slots=True, order=True)
class BrokerInfo:
    """One broker process: its cluster, broker name, id (0 = master) and address."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str

    @property
    def is_master(self) -> bool:
        """True for broker id 0."""
        return self.broker_id == MASTER_ID


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """broker name -> BrokerData, and cluster -> broker names."""

    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ClusterInfo:
        """Parse the name server's GET_BROKER_CLUSTER_INFO body; ValueError when it is not an object."""
        if not isinstance(d, dict):
            raise ValueError("cluster info is not a JSON object")
        brokers = {name: BrokerData.from_json({"brokerName": name, **bd})
                   for name, bd in (d.get("brokerAddrTable") or {}).items()}
        clusters = {c: tuple(sorted(names)) for c, names in (d.get("clusterAddrTable") or {}).items()}
        return cls(brokers, clusters)

    def brokers(self, cluster: str | None = None) -> list[BrokerInfo]:
        """Every broker process (of ``cluster`` when given), sorted by cluster, name, id."""
        names = self.cluster_addr_table.get(cluster, ()) if cluster is not None else self.broker_addr_table.keys()
        out: list[BrokerInfo] = []
        for name in names:
            bd = self.broker_addr_table.get(name)
            if bd is None:
                continue
            cl = bd.cluster or next((c for c, ns in self.cluster_addr_table.items() if name in ns), "")
            out.extend(BrokerInfo(cl, name, bid, addr) for bid, addr in bd.broker_addrs.items())
        return sorted(out)

    def master_addrs(self, cluster: str | None = None) -> list[str]:
        """The master address of every broker name (of ``cluster`` when given)."""
        return [b.addr for b in self.brokers(cluster) if b.is_master]

    def all_addrs(self) -> list[str]:
        """Every broker process's address, masters and slaves."""
        return [b.addr for b in self.brokers()]

    def broker_at(self, addr: str) -> str | None:
        """The (ZeroMQ) address of the broker that serves ``addr``: its own, or its TCP door's, which is what
        an offset message id names when the broker opens a door. None when no broker is there."""
        for bd in self.broker_addr_table.values():
            found = bd.mesh_addr_of(addr)
            if found is not None:
                return found
        return None

    def cluster_names(self) -> list[str]:
        """The cluster names, sorted."""
        return sorted(self.cluster_addr_table)
