"""Transactions: a topic's half messages whose outcome is still open."""

from __future__ import annotations

from typing import Any

from ..web import Ctx, View
from .paging import page_of

#: Most open half messages asked of each master.
MAX_PENDING = 10_000


def load(ctx: Ctx) -> dict[str, Any]:
    """The open half messages of ``topic``, oldest first, a page at a time."""
    topic = ctx.arg("topic")
    out: dict[str, Any] = {"topic": topic, "pending": [], "paging": None}
    if not topic:
        return out
    pending = ctx.admin.pending_half_messages(topic, MAX_PENDING)
    items, out["paging"] = page_of(pending, ctx.int_arg("page", 1, 1), ctx.dash.config.page_size)
    out["pending"] = [{"transactionId": p.transaction_id, "topic": p.topic, "brokerName": p.broker_name,
                       "queueId": p.queue_id, "producerGroup": p.producer_group, "checkTimes": p.check_times,
                       "bornTimestamp": p.born_timestamp, "storeTimestamp": p.store_timestamp,
                       "offsetMsgId": p.offset_msg_id, "keys": p.keys, "tags": p.tags} for p in items]
    return out


VIEWS = [View("/transactions", "transactions.html", load)]
