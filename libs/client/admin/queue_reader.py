"""Reading a queue's messages whatever the topic's permission: QUERY_CONSUME_QUEUE lists a queue's entries
(commitlog offset and size), VIEW_MESSAGE_BY_ID reads each message by its commitlog offset. Both are admin
requests, so nothing is pulled and no group's offset moves; a write-only topic (a dead-letter queue) reads
as any other."""

from __future__ import annotations

from collections.abc import Iterator

from rocketmesh.client.api import ClientAPI
from rocketmesh.client.errors import MQBrokerError, MQClientError, MQError
from rocketmesh.model.codec import CorruptRecord, decode_record
from rocketmesh.model.message import MessageExt
from rocketmesh.remoting.protocol.headers import QueryConsumeQueueRequestHeader

#: Consume-queue entries asked for per QUERY_CONSUME_QUEUE.
PAGE = 256


def read_queue(api: ClientAPI, addr: str, topic: str, queue_id: int, timeout_ms: int, offset: int = 0,
               max_num: int | None = None) -> Iterator[MessageExt]:
    """The messages of ``topic``'s queue ``queue_id`` on the broker ``addr`` from queue offset ``offset`` on,
    in offset order, at most ``max_num`` (None: to the end). An entry whose message is gone (its commitlog
    file expired) is skipped."""
    index, left = max(0, offset), max_num
    while left is None or left > 0:
        want = PAGE if left is None else min(PAGE, left)
        data = api.query_consume_queue(addr, QueryConsumeQueueRequestHeader(topic, queue_id, index, want), timeout_ms)
        try:
            entries = [(int(e["queueOffset"]), int(e["physicOffset"])) for e in data.get("queueData") or []]
            max_index = int(data.get("maxQueueIndex", 0))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MQClientError(f"malformed consume queue answer from {addr}: {exc}") from exc
        entries = [e for e in entries if e[0] >= index][:want]
        if not entries:
            return
        views = api.view_messages(addr, [phys for _, phys in entries], timeout_ms)
        for record in views:
            if isinstance(record, MQBrokerError):
                continue
            if isinstance(record, MQError):
                raise record
            try:
                yield decode_record(record)
            except CorruptRecord as exc:
                raise MQClientError(f"the broker at {addr} sent an unreadable record: {exc}") from exc
        index = entries[-1][0] + 1
        if left is not None:
            left -= len(entries)
        if index >= max_index:
            return
