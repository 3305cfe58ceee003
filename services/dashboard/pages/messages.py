"""Messages: by topic and time range (paged through every queue, no cap), by key, by id; one message with
its properties, body, trace and retry history; resending it to a group's client."""

from __future__ import annotations

import binascii
import json
import time
import urllib.parse
from typing import Any

from rocketmesh.client import Admin, MQClientError
from rocketmesh.model.message import MessageExt, MessageQueue
from rocketmesh.remoting import ResponseCode

from ..web import Action, Ctx, Done, PageError, View
from .paging import paging

#: Characters of a body shown in a list.
PREVIEW_CHARS = 120


def message_url(topic: str, msg_id: str) -> str:
    """The page of one message."""
    return "/message?" + urllib.parse.urlencode({"topic": topic, "msgId": msg_id})


def message_row(m: MessageExt) -> dict[str, Any]:
    """A message as a list shows it."""
    body = m.body.decode("utf-8", errors="replace")
    return {"msgId": m.unique_key or m.msg_id, "offsetMsgId": m.msg_id, "topic": m.topic, "tags": m.tags or "",
            "keys": m.keys or "", "storeHost": m.store_host, "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "storeTimestamp": m.store_timestamp, "bornTimestamp": m.born_timestamp,
            "reconsumeTimes": m.reconsume_times, "bodySize": len(m.body),
            "preview": body[:PREVIEW_CHARS] + ("…" if len(body) > PREVIEW_CHARS else "")}


def body_views(body: bytes) -> dict[str, Any]:
    """The body as text (when it is UTF-8), pretty JSON (when it is JSON) and hex."""
    out: dict[str, Any] = {"size": len(body), "hex": binascii.hexlify(body, " ", 1).decode()[:65536]}
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        out["text"] = None
        out["json"] = None
        return out
    out["text"] = text
    try:
        out["json"] = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        out["json"] = None
    return out


# -- a topic over a time range -----------------------------------------------------


def _ranges(admin: Admin, topic: str, begin_ms: int, end_ms: int | None) -> list[tuple[MessageQueue, int, int]]:
    """Each queue's offsets [first, end) of the messages stored in [begin_ms, end_ms]."""
    out = []
    for mq, o in admin.topic_status(topic).items():
        lo = o.min_offset if begin_ms <= 0 else max(o.min_offset, admin.search_offset(mq, begin_ms))
        hi = o.max_offset if end_ms is None else min(o.max_offset, admin.search_offset(mq, end_ms + 1))
        if hi > lo:
            out.append((mq, lo, hi))
    return out


def range_page(admin: Admin, topic: str, begin_ms: int, end_ms: int | None, page: int,
               size: int) -> tuple[list[MessageExt], dict[str, Any]]:
    """Page ``page`` of the messages of ``topic`` stored in [begin_ms, end_ms], queue by queue, offset order.
    The pages reach every message: none is left out for a cap."""
    ranges = _ranges(admin, topic, begin_ms, end_ms)
    total = sum(hi - lo for _, lo, hi in ranges)
    pages = max(1, -(-total // size))
    page = min(max(1, page), pages)
    skip, want = (page - 1) * size, size
    found: list[MessageExt] = []
    for mq, lo, hi in ranges:
        if want <= 0:
            break
        if skip >= hi - lo:
            skip -= hi - lo
            continue
        start = lo + skip
        skip = 0
        count = min(want, hi - start)
        found.extend(admin.queue_messages(mq, start, count))
        want -= count
    if end_ms is not None or begin_ms > 0:
        found = [m for m in found if m.store_timestamp >= begin_ms and (end_ms is None or m.store_timestamp <= end_ms)]
    return found, paging(page, pages, total, size)


def load_list(ctx: Ctx) -> dict[str, Any]:
    """Messages of ``topic`` by ``key``, or stored between ``begin`` and ``end`` (default: the last hour), paged;
    ``msgId`` alone shows that message."""
    topic = ctx.arg("topic")
    key = ctx.arg("key")
    msg_id = ctx.arg("msgId")
    out: dict[str, Any] = {"topic": topic, "key": key, "msgId": msg_id, "messages": [], "paging": None,
                           "begin": ctx.arg("begin"), "end": ctx.arg("end")}
    if msg_id:
        m = ctx.admin.query_msg_by_id(msg_id, topic or None)
        out["messages"] = [message_row(m)]
        return out
    if not topic:
        return out
    page = ctx.int_arg("page", 1, 1)
    size = ctx.dash.config.page_size
    if key:
        # Asked for one more than this page needs: any page is reachable, and whether one follows is known.
        # The index answers the newest it holds, so pages run newest first: page n is the same whatever
        # was asked for the pages after it.
        found = ctx.admin.query_msg_by_key(topic, key, page * size + 1)[::-1]
        more = len(found) > page * size
        pages = page + 1 if more else max(1, -(-len(found) // size))
        page = min(page, pages)
        out["messages"] = [message_row(m) for m in found[(page - 1) * size: page * size]]
        out["paging"] = paging(page, pages, -1 if more else len(found), size)
        return out
    now = int(time.time() * 1000)
    begin = ctx.time_arg("begin")
    end = ctx.time_arg("end")
    begin = now - 3_600_000 if begin is None else begin
    if end is not None and end < begin:
        raise PageError("end is before begin")
    msgs, out["paging"] = range_page(ctx.admin, topic, begin, end, page, size)
    out["messages"] = [message_row(m) for m in msgs]
    out["beginMs"], out["endMs"] = begin, end
    return out


def load_message(ctx: Ctx) -> dict[str, Any]:
    """One message: its fields and properties, its body, its msgTrace timeline and its retry history."""
    msg_id = ctx.required("msgId", "the message id")
    topic = ctx.arg("topic") or None
    admin = ctx.admin
    m = admin.query_msg_by_id(msg_id, topic)
    uniq = m.unique_key or m.msg_id
    trace = [{"type": r.type.value, "timestamp": r.timestamp, "group": r.group, "clientHost": r.client_host,
              "costMs": r.cost_ms, "success": r.success, "storeHost": r.store_host, "retryTimes": r.retry_times,
              "status": r.context_code.name if r.type.value == "SubAfter" else r.transaction_state}
             for r in admin.query_msg_trace(uniq)]
    try:
        history = [message_row(c) for c in admin.retry_history(m.msg_id)]
    except MQClientError as exc:
        if exc.response_code != ResponseCode.NO_MESSAGE:
            raise
        history = []
    groups: list[str] = []
    try:
        groups = admin.topic_consumers(m.topic)
    except MQClientError:
        pass
    return {"message": message_row(m), "properties": dict(sorted(m.properties.items())), "body": body_views(m.body),
            "bornHost": m.born_host, "storeHost": m.store_host, "commitLogOffset": m.commitlog_offset,
            "trace": trace, "retryHistory": history, "groups": groups}


def resend_to_group(ctx: Ctx) -> Done:
    """Have a client of a group consume the message now (CONSUME_MESSAGE_DIRECTLY), as RocketMQ's dashboard's
    "resend message"; ``clientId`` picks the client, else the group's first."""
    msg_id = ctx.required("msgId", "the message id")
    group = ctx.required("group", "the consumer group")
    topic = ctx.arg("topic") or None
    client_id = ctx.arg("clientId")
    if not client_id:
        ids = ctx.admin.consumer_ids(group)
        if not ids:
            raise PageError(f"the consumer group {group} has no client online to consume the message", 409)
        client_id = ids[0]
    result = ctx.admin.consume_message_directly(group, client_id, msg_id, topic)
    status = result.consume_result.value if result.consume_result is not None else "no result"
    return Done(f"{client_id} of {group} consumed it: {status}", message_url(topic or "", msg_id),
                {"clientId": client_id, "consumeResult": status, "remark": result.remark})


VIEWS = [View("/messages", "messages.html", load_list), View("/message", "message.html", load_message)]
ACTIONS = [Action("/messages/resend", resend_to_group)]
