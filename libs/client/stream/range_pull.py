"""Pull exactly the offsets [start, end) of one queue, as the broker's raw records.

    with Admin(namesrv) as admin:
        sub = make_subscription("Orders", "TagA || TagB")
        for chunk in pull_range(admin.instance, "reports", mq, sub, 100, 200):
            handle(chunk.records)            # back-to-back commitlog records (message_codec)

Replays and batch jobs read a fixed offset range again and again and must get the
same messages each time: this reads the range by offset, never by the group's
committed offset, commits nothing, and never waits for new messages. The broker
applies the subscription's filter (tag codes or SQL92); two tags can share a tag
code, so a caller filtering by tags checks each record's tag as well.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from concurrent.futures import Future, TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocketmesh.client.api import PullResponse
from rocketmesh.client.errors import MQClientError, RequestTimeoutError
from rocketmesh.filter import SubscriptionData
from rocketmesh.model.codec import POS_QUEUE_OFFSET
from rocketmesh.model.message import MessageQueue
from rocketmesh.remoting import ResponseCode
from rocketmesh.remoting.protocol.headers import PullMessageRequestHeader
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.client.instance import ClientInstance

log = get_logger("client", component="range_pull")

_SIZE = struct.Struct(">i")
_QUEUE_OFFSET = struct.Struct(">q")
#: Pulls that make no progress (a broker busy removing a file) before the range is given up.
MAX_IDLE_PULLS = 50


@dataclass(frozen=True, slots=True)
class RangeChunk:
    """One pull's records inside the range, and where they came from.

    ``records`` holds whole commitlog records back to back (decode with
    :func:`rocketmesh.model.codec.decode_records`); ``first_offset`` and
    ``next_offset`` bound the queue offsets this pull covered (filtered-out
    messages included), so ``next_offset`` is where the next chunk starts.
    """

    mq: MessageQueue
    records: bytes
    count: int
    first_offset: int
    next_offset: int


def _trim(records: bytes, end: int) -> tuple[bytes, int]:
    """The records before queue offset ``end`` (a filtered pull may read past it) and their count."""
    pos = count = 0
    n = len(records)
    size, offset_at = _SIZE.unpack_from, _QUEUE_OFFSET.unpack_from
    while pos + 28 <= n:
        if offset_at(records, pos + POS_QUEUE_OFFSET)[0] >= end:
            break
        pos += size(records, pos)[0]
        count += 1
    return records[:pos], count


def _count(records: bytes) -> int:
    pos = count = 0
    n = len(records)
    size = _SIZE.unpack_from
    while pos + 4 <= n:
        pos += size(records, pos)[0]
        count += 1
    return count


def pull_range(
    instance: ClientInstance,
    group: str,
    mq: MessageQueue,
    subscription: SubscriptionData,
    start: int,
    end: int,
    *,
    pull_batch_size: int = 1024,
    timeout_ms: int = 10_000,
) -> Iterator[RangeChunk]:
    """Yield the records of ``mq`` whose queue offsets are in [``start``, ``end``), in order, one chunk per pull.

    Messages the broker no longer stores (``start`` below the queue's min offset)
    are skipped with a warning; the range stops early at the queue's max offset.
    One pull is kept in flight ahead of the caller, so the broker reads the next part while
    the caller handles this one. Each pull is bounded by ``timeout_ms``, and the whole range
    by that much per pull plus a bounded number of pulls that make no progress. Raises MQBrokerError for a
    broker's refusal (group or topic unknown, filter not supported) and the SDK's
    timeout and connection errors.
    """
    if not 1 <= pull_batch_size <= 1024:
        raise MQClientError(f"pull_batch_size must be within 1..1024, got {pull_batch_size}")

    def send(offset: int) -> tuple[str, Future[PullResponse]]:
        header = PullMessageRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=min(pull_batch_size, end - offset), sys_flag=0, commit_offset=0,
            suspend_timeout_millis=0, subscription=subscription.sub_string, sub_version=subscription.sub_version,
            expression_type=subscription.expression_type.value)
        addr = instance.find_master_addr(mq)
        future: Future[PullResponse] = Future()

        def done(answer: PullResponse | None, error: BaseException | None) -> None:
            if answer is None:
                future.set_exception(error)
            else:
                future.set_result(answer)

        instance.api.pull_message_async(addr, header, timeout_ms, done)
        return addr, future

    def answer(addr: str, future: Future[PullResponse]) -> PullResponse:
        try:
            return future.result(timeout=timeout_ms / 1000.0 + 1.0)
        except FutureTimeoutError:
            raise RequestTimeoutError(f"no answer from {addr} to a pull of {mq} within {timeout_ms} ms") from None

    offset = start
    idle = 0
    inflight = send(offset) if offset < end else None
    while inflight is not None:
        resp = answer(*inflight)
        inflight = None
        next_offset = resp.header.next_begin_offset
        max_offset = resp.header.max_offset
        if resp.code == ResponseCode.SUCCESS:
            nxt = min(next_offset, end)
            # Ask for the next part now: the broker reads it while the caller handles this one.
            if offset < nxt < end:
                inflight = send(nxt)
            records = resp.body or b""
            if next_offset > end:
                records, count = _trim(records, end)
            else:
                count = _count(records)
            if count:
                yield RangeChunk(mq, records, count, offset, nxt)
            idle = 0 if nxt > offset else idle + 1
            offset = max(offset, nxt)
        elif resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY:
            # Nothing matched the filter in what the broker scanned (it moves us past it), or a file
            # was being removed: go on from where it says.
            idle = 0 if next_offset > offset else idle + 1
            offset = max(offset, min(next_offset, end))
        elif resp.code == ResponseCode.PULL_OFFSET_MOVED:
            if next_offset <= offset:
                return  # past the queue's end
            log.warning("range_messages_gone", mq=str(mq), start=offset, resumed_at=next_offset)
            offset = min(next_offset, end)
            idle = 0
        elif resp.code == ResponseCode.PULL_NOT_FOUND:
            if offset >= max_offset:
                return  # the range asks for more than the queue holds
            idle += 1
        if idle >= MAX_IDLE_PULLS:
            raise MQClientError(f"pulling {mq} from offset {offset} made no progress in {idle} pulls")
        if inflight is None and offset < end:
            if idle:
                time.sleep(min(0.01 * idle, 0.2))
            inflight = send(offset)
