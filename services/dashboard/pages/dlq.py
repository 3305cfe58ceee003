"""Dead letters: a group's dead-letter queue ``%DLQ%<group>``, paged; resend one, a selection or all to the
original topic; export as JSON lines."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

import orjson

from rocketmesh.client import MQBrokerError
from rocketmesh.client.admin.dead_letters import DeadLetters, original_topic
from rocketmesh.model.topics import dlq_topic
from rocketmesh.remoting import ResponseCode

from ..web import Action, Ctx, Done, Download, PageError, View
from .messages import message_row, range_page


def dlq_url(group: str) -> str:
    """The dead-letter page of ``group``."""
    return "/dlq?" + urllib.parse.urlencode({"group": group})


def load(ctx: Ctx) -> dict[str, Any]:
    """``group``'s dead letters, a page at a time, oldest first per queue."""
    group = ctx.arg("group")
    out: dict[str, Any] = {"group": group, "topic": dlq_topic(group) if group else "", "messages": [],
                           "paging": None}
    if not group:
        return out
    try:
        msgs, out["paging"] = range_page(ctx.admin, dlq_topic(group), 0, None, ctx.int_arg("page", 1, 1),
                                         ctx.dash.config.page_size)
    except MQBrokerError as exc:
        if exc.response_code != ResponseCode.TOPIC_NOT_EXIST:
            raise
        return out  # the group never dead-lettered a message
    out["messages"] = [dict(message_row(m), originalTopic=original_topic(m)) for m in msgs]
    return out


def resend(ctx: Ctx) -> Done:
    """Resend the chosen dead letters (``msgId``, repeatable) or, with ``all=1``, every one of ``group``'s."""
    group = ctx.required("group", "the consumer group")
    ids = ctx.args("msgId")
    every = ctx.arg("all") in ("1", "on", "true")
    if not ids and not every:
        raise PageError("choose the dead letters to resend (msgId=..., repeatable) or all=1")
    results = []
    if every:
        results = ctx.admin.resend_dlq(group)
    else:
        for msg_id in ids:
            results.extend(ctx.admin.resend_dlq(group, msg_id))
    rows = [{"msgId": r.letter.msg_id, "originalTopic": r.letter.original_topic, "ok": r.error is None,
             "error": r.error, "newMsgId": r.sent.msg_id if r.sent is not None else None} for r in results]
    failed = sum(1 for r in rows if not r["ok"])
    message = f"resent {len(rows) - failed} of {len(rows)} dead letters of {group}"
    return Done(message + (f"; {failed} failed" if failed else ""), dlq_url(group), {"results": rows})


def export(ctx: Ctx) -> Download:
    """Every dead letter of ``group`` as JSON lines (fields of the list, the original topic, the body as text)."""
    group = ctx.required("group", "the consumer group")
    letters = DeadLetters(ctx.admin).iter_dead_letters(group)

    def lines() -> Iterator[bytes]:
        for letter in letters:
            m = letter.message
            row = dict(message_row(m), originalTopic=letter.original_topic, properties=m.properties,
                       body=m.body.decode("utf-8", errors="replace"))
            row.pop("preview", None)
            yield orjson.dumps(row) + b"\n"
    return Download(lines(), "application/x-ndjson", f"dlq-{group}.jsonl")


VIEWS = [View("/dlq", "dlq.html", load)]
ACTIONS = [Action("/dlq/resend", resend)]
DOWNLOADS = {"/dlq/export": export}
