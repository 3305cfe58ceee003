"""Cluster: each broker group, master and slaves, with where each commitlog ends, how far each slave is
behind, disk use, in/out rates, and each broker's config (read-only)."""

from __future__ import annotations

from typing import Any

from ..collector import BrokerSample
from ..web import Ctx, PageError, View
from .overview import broker_row


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _row(b: BrokerSample, master: BrokerSample | None) -> dict[str, Any]:
    info = b.info
    row = broker_row(b)
    end = _int(info.get("commitLogMaxOffset"))
    row.update({
        "commitLogMinOffset": _int(info.get("commitLogMinOffset")),
        "commitLogMaxOffset": end,
        "diskRatio": info.get("commitLogDiskRatio", ""),
        "flushDiskType": info.get("flushDiskType", ""),
        "runtime": info.get("runtime", ""),
        "producerCount": info.get("producerCount", ""),
        "consumerCount": info.get("consumerCount", ""),
    })
    if b.broker_id == 0:
        slaves = info.get("haSlaves") or []
        row["replicationLagBytes"] = max((_int(s.get("lagBytes")) for s in slaves), default=None)
    elif master is not None and not master.error:
        # What the slave still lacks: where its master's commitlog ends less where its own does.
        row["replicationLagBytes"] = max(0, _int(master.info.get("commitLogMaxOffset")) - end)
    else:
        row["replicationLagBytes"] = None
    return row


def load(ctx: Ctx) -> dict[str, Any]:
    """Broker groups from the collector's last round, masters first."""
    snap = ctx.dash.collector.snapshot
    groups: dict[tuple[str, str], list[BrokerSample]] = {}
    for b in snap.brokers:
        groups.setdefault((b.cluster, b.broker_name), []).append(b)
    out = []
    for (cluster, name), members in sorted(groups.items()):
        members.sort(key=lambda b: b.broker_id)
        master = members[0] if members[0].broker_id == 0 else None
        out.append({"cluster": cluster, "brokerName": name, "brokers": [_row(b, master) for b in members]})
    return {"asOf": snap.at_ms, "brokerGroups": out}


def load_config(ctx: Ctx) -> dict[str, Any]:
    """One broker's config (GET_BROKER_CONFIG), read-only."""
    addr = ctx.required("addr", "the broker's address")
    known = {b.addr for b in ctx.dash.collector.snapshot.brokers}
    if known and addr not in known:
        raise PageError(f"no broker at {addr} is registered with the name servers", 404)
    config = ctx.admin.broker_config(addr)
    return {"addr": addr, "config": dict(sorted(config.items()))}


VIEWS = [View("/cluster", "cluster.html", load), View("/cluster/config", "broker_config.html", load_config)]
