"""Overview: name servers, brokers and their roles, topics and groups counted, in/out rates over the last
minutes, and the groups furthest behind."""

from __future__ import annotations

from typing import Any

from ..collector import BrokerSample, Snapshot
from ..web import Ctx, View


def broker_row(b: BrokerSample) -> dict[str, Any]:
    """A broker as the overview and the cluster page list it."""
    info = b.info
    return {"cluster": b.cluster, "brokerName": b.broker_name, "brokerId": b.broker_id, "addr": b.addr,
            "role": b.role, "inTps": b.in_tps, "outTps": b.out_tps, "error": b.error,
            "version": info.get("brokerVersionDesc", "")}


def group_count(snap: Snapshot) -> int:
    """The groups the brokers know: with a config, with progress, or both."""
    return len(snap.groups)


def load(ctx: Ctx) -> dict[str, Any]:
    """The overview from the collector's last round (no request of its own)."""
    snap = ctx.dash.collector.snapshot
    times, ins, outs = ctx.dash.collector.history.rates()
    top = sorted(snap.groups.values(), key=lambda g: (-g.lag, g.group))[:10]
    return {
        "asOf": snap.at_ms,
        "namesrvs": [{"addr": a, "status": s} for a, s in snap.namesrvs.items()],
        "brokers": [broker_row(b) for b in snap.brokers],
        "topicCounts": snap.topic_counts,
        "topicTotal": sum(snap.topic_counts.values()),
        "groupCount": group_count(snap),
        "inTps": snap.in_tps,
        "outTps": snap.out_tps,
        "rates": {"times": times, "in": ins, "out": outs},
        "topLag": [{"group": g.group, "lag": g.lag, "tps": g.tps, "topics": g.topics} for g in top if g.lag > 0],
        "errors": list(snap.errors),
    }


VIEWS = [View("/", "overview.html", load)]
