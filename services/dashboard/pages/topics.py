"""Topics: the list by kind and name; one topic's queues, route, consumers and config; create, update,
delete, and a test message."""

from __future__ import annotations

import urllib.parse
from typing import Any

from rocketmesh.client import Message, MQBrokerError
from rocketmesh.model.route import Perm
from rocketmesh.remoting import ResponseCode

from ..kinds import TopicKind, topic_kind
from ..web import Action, Ctx, Done, PageError, View
from .paging import page_of

#: The perm choices of the topic form (RocketMQ's PermName bits).
PERMS = {"6": "read and write (6)", "4": "read only (4)", "2": "write only (2)", "0": "none (0)"}


def topic_url(topic: str) -> str:
    """The page of one topic."""
    return "/topic?" + urllib.parse.urlencode({"topic": topic})


def load_list(ctx: Ctx) -> dict[str, Any]:
    """Every topic the name servers know, filtered by kind (``kind``) and name (``q``), a page at a time."""
    kind = ctx.arg("kind", "all")
    kinds = {k.value for k in TopicKind}
    if kind != "all" and kind not in kinds:
        raise PageError(f"kind must be all or one of {', '.join(sorted(kinds))}, got {kind!r}")
    q = ctx.arg("q").lower()
    rows = [{"topic": t, "kind": topic_kind(t).value} for t in ctx.admin.topic_list()]
    shown = [r for r in rows if (kind == "all" or r["kind"] == kind) and q in r["topic"].lower()]
    items, paging = page_of(shown, ctx.int_arg("page", 1, 1), ctx.dash.config.page_size)
    return {"topics": items, "paging": paging, "kind": kind, "q": ctx.arg("q"), "kinds": ["all", *sorted(kinds)],
            "perms": PERMS}


def load_topic(ctx: Ctx) -> dict[str, Any]:
    """One topic: per-queue offsets and last store time, its route, its consumers and its config."""
    topic = ctx.required("topic", "the topic")
    admin = ctx.admin
    route = admin.topic_route(topic)
    status = admin.topic_status(topic)
    queues = [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "minOffset": o.min_offset,
               "maxOffset": o.max_offset, "messages": o.count, "lastUpdateTimestamp": o.last_update_timestamp}
              for mq, o in status.items()]
    config: dict[str, Any] = {}
    for bd in route.broker_datas:
        if bd.master_addr:
            config = admin.topic_config_table(bd.master_addr).get(topic) or {}
            break
    return {
        "topic": topic, "kind": topic_kind(topic).value, "queues": queues,
        "messages": sum(q["messages"] for q in queues),
        "route": {"brokers": [{"brokerName": bd.broker_name, "cluster": bd.cluster,
                               "addrs": {str(k): v for k, v in sorted(bd.broker_addrs.items())}}
                              for bd in route.broker_datas],
                  "queues": [{"brokerName": qd.broker_name, "readQueueNums": qd.read_queue_nums,
                              "writeQueueNums": qd.write_queue_nums, "perm": qd.perm, "permText": _perm_text(qd.perm),
                              "topicSysFlag": qd.topic_sys_flag} for qd in route.queue_datas]},
        "consumers": admin.topic_consumers(topic),
        "config": config, "perms": PERMS,
    }


def _perm_text(perm: int) -> str:
    names = [n for bit, n in ((Perm.READ, "read"), (Perm.WRITE, "write"), (Perm.INHERIT, "inherit")) if perm & bit]
    return ", ".join(names) or "none"


def create_or_update(ctx: Ctx) -> Done:
    """Create or update a topic on every master (RocketMQ's updateTopic)."""
    topic = ctx.required("topic", "the topic")
    read_q = ctx.int_arg("readQueueNums", 8, 1, 1024)
    write_q = ctx.int_arg("writeQueueNums", 8, 1, 1024)
    perm = ctx.arg("perm", "6")
    if perm not in PERMS:
        raise PageError(f"perm must be one of {', '.join(PERMS)} (RocketMQ's permission bits), got {perm!r}")
    order = ctx.arg("order").lower() in ("on", "true", "1")
    addrs = ctx.admin.create_topic(topic, read_q, write_q, int(perm), cluster=ctx.arg("cluster") or None, order=order)
    ctx.admin.wait_topic_route(topic, timeout_s=5.0)
    return Done(f"topic {topic} written to {', '.join(addrs)}", topic_url(topic), {"brokers": addrs})


def delete(ctx: Ctx) -> Done:
    """Delete a topic from the masters and the name servers."""
    topic = ctx.required("topic", "the topic")
    ctx.admin.delete_topic(topic)
    return Done(f"topic {topic} deleted", "/topics", {"topic": topic})


def send_test(ctx: Ctx) -> Done:
    """Send one message to a topic (as RocketMQ's dashboard's send-message dialog)."""
    topic = ctx.required("topic", "the topic")
    body = ctx.arg("body") or "Hello from the rocketmesh dashboard"
    msg = Message(topic, body.encode("utf-8"), tags=ctx.arg("tags") or None, keys=ctx.arg("keys") or None)
    try:
        result = ctx.dash.accounts.producer(ctx.session.account).send(msg)
    except MQBrokerError as exc:
        if exc.response_code == ResponseCode.TOPIC_NOT_EXIST:
            raise PageError(f"topic {topic} does not exist: create it first", 404) from None
        raise
    data = {"sendStatus": result.send_status.value, "msgId": result.msg_id, "offsetMsgId": result.offset_msg_id,
            "queueId": result.message_queue.queue_id, "brokerName": result.message_queue.broker_name,
            "queueOffset": result.queue_offset}
    return Done(f"sent: {result.send_status.value}, msgId {result.msg_id}",
                "/message?" + urllib.parse.urlencode({"topic": topic, "msgId": result.msg_id}), data)


VIEWS = [View("/topics", "topics.html", load_list), View("/topic", "topic.html", load_topic)]
ACTIONS = [Action("/topics/create", create_or_update), Action("/topics/delete", delete),
           Action("/topics/send", send_test, admin=False)]
