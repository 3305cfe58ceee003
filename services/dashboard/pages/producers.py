"""Producers: the online clients of a producer group (GET_PRODUCER_CONNECTION_LIST)."""

from __future__ import annotations

from typing import Any

from rocketmesh.client import MQBrokerError

from ..web import Ctx, View


def load(ctx: Ctx) -> dict[str, Any]:
    """The clients of producer group ``group`` that heartbeat a broker."""
    group = ctx.arg("group")
    out: dict[str, Any] = {"group": group, "connections": [], "note": ""}
    if not group:
        return out
    try:
        conn = ctx.admin.producer_connection(group)
    except MQBrokerError as exc:
        out["note"] = f"no online producer of {group}: {exc.remark or exc}"
        return out
    out["connections"] = [{"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language,
                           "version": c.version} for c in conn.connections]
    return out


VIEWS = [View("/producers", "producers.html", load)]
