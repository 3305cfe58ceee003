"""Per-queue logical offsets: naming queues, resolving where a read starts and ends, admission control.

Spark's offsets for this source are JSON objects::

    {"source": "rocketmesh", "group": "G", "namesrv": "127.0.0.1:9876",
     "offsets": {"Orders": {"broker-a:0": 17, "broker-a:1": 9}}}

``offsets`` holds, per topic and queue (``brokerName:queueId``), the next
offset to read. The group and name server ride along so that the driver-side
listener can commit a finished micro-batch's end to the group on the brokers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocketmesh.client import Admin, MQBrokerError
from rocketmesh.client.stream import StreamClient
from rocketmesh.model.message import MessageQueue
from rocketmesh.remoting import ResponseCode
from rocketmesh.spark.options import OptionError, QueueOffsets, SourceOptions, Start

SOURCE_TAG = "rocketmesh"
EARLIEST, LATEST = -2, -1


def queue_key(mq: MessageQueue) -> str:
    """``brokerName:queueId``, the name a queue has in offsets and options."""
    return f"{mq.broker_name}:{mq.queue_id}"


def queue_of(topic: str, key: str) -> MessageQueue:
    """The queue named ``key`` (``brokerName:queueId``) of ``topic``."""
    broker, _, qid = key.rpartition(":")
    return MessageQueue(topic, broker, int(qid))


@dataclass(frozen=True, slots=True)
class Bounds:
    """A queue's min offset (first still stored) and max offset (one past the last)."""

    min_offset: int
    max_offset: int


#: topic -> queue key -> bounds
QueueBounds = dict[str, dict[str, Bounds]]


def wrap(opts: SourceOptions, offsets: QueueOffsets) -> dict:
    """The offset object Spark checkpoints (see the module docstring)."""
    return {"source": SOURCE_TAG, "group": opts.group, "namesrv": opts.namesrv,
            "offsets": {t: dict(sorted(q.items())) for t, q in sorted(offsets.items())}}


def unwrap(offset: Mapping) -> QueueOffsets:
    """The per-queue offsets of an offset object (from Spark or from :func:`wrap`)."""
    return {t: {k: int(v) for k, v in q.items()} for t, q in (offset.get("offsets") or {}).items()}


def queue_bounds(admin: Admin, topics: tuple[str, ...]) -> QueueBounds:
    """Every readable queue of ``topics`` on every broker of their routes, with its offsets (one request
    per broker and topic). Queues added to a topic, or brokers added to its route, show up here."""
    out: QueueBounds = {}
    for topic in topics:
        try:
            status = admin.topic_status(topic)
        except MQBrokerError as exc:
            if exc.response_code == ResponseCode.TOPIC_NOT_EXIST:
                raise OptionError(f"option 'topic': topic {topic!r} does not exist on the name server "
                                  f"{admin.namesrv_addrs[0]}; create it (rocketmesh admin update-topic) first"
                                  ) from None
            raise
        out[topic] = {queue_key(mq): Bounds(o.min_offset, o.max_offset) for mq, o in status.items()}
    return out


def _group_offsets(admin: Admin, group: str, bounds: QueueBounds) -> QueueOffsets:
    out: QueueOffsets = {}
    # The admin's name servers and timeout: the same client instance as the admin's.
    with StreamClient(admin.namesrv_addrs, request_timeout_ms=admin.timeout_ms) as client:
        for topic, queues in bounds.items():
            table = out[topic] = {}
            for key, b in queues.items():
                committed = client.committed_offset(group, queue_of(topic, key))
                # A queue the group never committed starts at its end, as RocketMQ's CONSUME_FROM_LAST_OFFSET.
                table[key] = b.max_offset if committed is None else min(max(committed, b.min_offset), b.max_offset)
    return out


def resolve(admin: Admin, start: Start, group: str, bounds: QueueBounds, *, left_out: int) -> QueueOffsets:
    """Concrete offsets for a starting or ending point over ``bounds``' queues.

    A queue left out of an explicit JSON goes to ``left_out`` (EARLIEST or LATEST);
    -2 and -1 in it mean earliest and latest; a store time resolves per queue to the
    first message stored at or after it.
    """
    if start == "group":
        return _group_offsets(admin, group, bounds)
    out: QueueOffsets = {}
    for topic, queues in bounds.items():
        table = out[topic] = {}
        given = start.get(topic, {}) if isinstance(start, dict) else {}
        for key, b in queues.items():
            if start == "earliest":
                table[key] = b.min_offset
            elif start == "latest":
                table[key] = b.max_offset
            elif isinstance(start, int):
                table[key] = admin.search_offset(queue_of(topic, key), start) if b.max_offset > b.min_offset \
                    else b.max_offset
            else:
                value = given.get(key, left_out)
                table[key] = b.min_offset if value == EARLIEST else b.max_offset if value == LATEST else value
        if isinstance(start, dict):
            unknown = sorted(set(given) - set(queues))
            if unknown:
                raise OptionError(f"offsets name queues {unknown} that topic {topic!r} does not have; its queues "
                                  f"are {sorted(queues)}")
    return out


def limit(start: QueueOffsets, latest: QueueOffsets, max_rows: int | None) -> QueueOffsets:
    """The end offsets of a micro-batch: ``latest``, or at most ``max_rows`` offsets past ``start`` in all,
    shared fairly: each queue with data gets an equal share, and what a short queue leaves goes to the rest."""
    end = {t: dict(q) for t, q in latest.items()}
    if max_rows is None:
        return end
    avail = [(latest[t][k] - start.get(t, {}).get(k, latest[t][k]), t, k) for t in latest for k in latest[t]]
    avail = sorted(a for a in avail if a[0] > 0)
    budget = max_rows
    left = len(avail)
    for n, t, k in avail:
        share = budget // left if left else 0
        # The first queues (by sort order) take the remainder so the budget is used in full.
        take = min(n, max(share, 1 if budget > 0 else 0))
        end[t][k] = start[t][k] + take
        budget -= take
        left -= 1
    return end
