"""Consumer groups: the list by lag or rate; one group's queues, clients, config and lag over time; offsets
reset by time."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

from rocketmesh.client import MQClientError, MQError
from rocketmesh.model.topics import RETRY_GROUP_TOPIC_PREFIX
from rocketmesh.remoting import ResponseCode

from ..collector import group_lag, queue_lag
from ..kinds import is_system_group
from ..web import Action, Ctx, Done, PageError, View
from .paging import page_of

SORTS = ("lag", "tps", "group")
T = TypeVar("T")


def group_url(group: str) -> str:
    """The page of one group."""
    return "/group?" + urllib.parse.urlencode({"group": group})


def load_list(ctx: Ctx) -> dict[str, Any]:
    """The groups of the collector's last round, sorted by ``sort`` (lag, tps, group), filtered by ``q``;
    the mesh's own groups only with ``system=1``."""
    snap = ctx.dash.collector.snapshot
    sort = ctx.arg("sort", "lag")
    if sort not in SORTS:
        raise PageError(f"sort must be one of {', '.join(SORTS)}, got {sort!r}")
    q = ctx.arg("q").lower()
    system = ctx.arg("system") in ("1", "on", "true")
    rows = [g for g in snap.groups.values() if q in g.group.lower() and (system or not is_system_group(g.group))]
    if sort == "group":
        rows.sort(key=lambda g: g.group)
    elif sort == "tps":
        rows.sort(key=lambda g: (-g.tps, g.group))
    else:
        rows.sort(key=lambda g: (-g.lag, g.group))
    items, paging = page_of(rows, ctx.int_arg("page", 1, 1), ctx.dash.config.page_size)
    return {"asOf": snap.at_ms, "sort": sort, "q": ctx.arg("q"), "system": system, "paging": paging,
            "groups": [{"group": g.group, "lag": g.lag, "tps": g.tps, "topics": g.topics} for g in items]}


def _holders(ctx: Ctx, group: str, client_ids: list[str]
             ) -> tuple[dict[tuple[str, str, int], str], list[str], bool | None]:
    """Which client holds each queue, from each client's running info; the clients that did not say; and
    whether the group consumes orderly (None: no client said)."""
    held: dict[tuple[str, str, int], str] = {}
    silent: list[str] = []
    orderly: bool | None = None
    for cid in client_ids:
        try:
            info = ctx.admin.consumer_running_info(group, cid)
        except MQError as exc:
            silent.append(f"{cid}: {exc}")
            continue
        orderly = bool(orderly) or info.orderly
        for mq in info.mq_table:
            held[(mq.topic, mq.broker_name, mq.queue_id)] = cid
    return held, silent, orderly


def _unless_offline(ask: Callable[[], T]) -> T | None:
    """What ``ask`` returns, or None when the group has no client online nor progress stored."""
    try:
        return ask()
    except MQClientError as exc:
        if exc.response_code != ResponseCode.CONSUMER_NOT_ONLINE:
            raise
        return None


def load_group(ctx: Ctx) -> dict[str, Any]:
    """One group, asked live: per queue broker offset, consumer offset, lag and the client holding it; its
    clients and subscriptions; its config; its lag over the last minutes."""
    group = ctx.required("group", "the consumer group")
    stats = _unless_offline(lambda: ctx.admin.consume_stats(group))
    conn = _unless_offline(lambda: ctx.admin.consumer_connection(group))
    clients = [c.client_id for c in conn.connections] if conn else []
    held, silent, orderly = _holders(ctx, group, clients)
    queues = []
    if stats is not None:
        for mq, w in stats.offset_table.items():
            queues.append({"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id,
                           "brokerOffset": w.broker_offset, "consumerOffset": w.consumer_offset, "lag": queue_lag(w),
                           "lastTimestamp": w.last_timestamp,
                           "client": held.get((mq.topic, mq.broker_name, mq.queue_id), "")})
    sample = ctx.dash.collector.snapshot.groups.get(group)
    times, lags = ctx.dash.collector.history.lag(group)
    # The group's own topics first, its retry topic last: the reset form picks the first.
    topics = sorted({str(q["topic"]) for q in queues} | set(conn.subscriptions if conn else ()),
                    key=lambda t: (t.startswith(RETRY_GROUP_TOPIC_PREFIX), t))
    return {
        "group": group, "lag": group_lag(stats) if stats else 0, "tps": stats.consume_tps if stats else 0.0,
        "orderly": orderly,
        "queues": queues, "topics": topics,
        "connections": [{"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language,
                         "version": c.version, "lastUpdateTimestamp": c.last_update_timestamp}
                        for c in (conn.connections if conn else [])],
        "subscriptions": conn.subscriptions if conn else {},
        "consumeType": conn.consume_type if conn else None, "messageModel": conn.message_model if conn else None,
        "consumeFromWhere": conn.consume_from_where if conn else None,
        "config": sample.config if sample else {}, "silentClients": silent,
        "lagHistory": {"times": times, "lag": lags},
    }


def reset_offset(ctx: Ctx) -> Done:
    """Move the group's offsets in a topic to the first message stored at or after a time (-1: the end)."""
    group = ctx.required("group", "the consumer group")
    topic = ctx.required("topic", "the topic whose offsets to reset")
    when = ctx.time_arg("timestamp")
    if when is None:
        raise PageError("the time to reset to is missing: give timestamp=epoch ms, YYYY-MM-DDTHH:MM (UTC) or -1")
    offsets = ctx.admin.reset_offset_by_time(group, topic, when)
    moved = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off} for mq, off in offsets.items()]
    return Done(f"the offsets of {group} in {topic} were reset ({len(moved)} queues)", group_url(group),
                {"offsets": moved})


VIEWS = [View("/groups", "groups.html", load_list), View("/group", "group.html", load_group)]
ACTIONS = [Action("/groups/reset-offset", reset_offset)]
