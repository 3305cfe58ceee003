"""DELIVER_DUE_MESSAGES: the re-put of due delayed and timer messages to their real topic.

The scheduler service owns the timing; the broker owns the data. The scheduler
names queue entries of SCHEDULE_TOPIC_XXXX or the timer topic by offset, and
the broker reads each one, checks it is due by its own clock (an entry's tag
field holds its delivery time), restores the message (real topic and queue
from REAL_TOPIC / REAL_QID, the parking properties removed, everything else
kept, a compressed body still compressed with its sysFlag bit, a new store time)
and stores it as a new write.

A timer entry far from due can be rolled instead: parked again at the tail of
its queue with the same due time, so the scheduler can commit past it.

Deliveries are idempotent per (queue, offset): the broker remembers which
offsets of each parked queue it re-put since the scheduler's last commit, so a
scheduler that crashes between re-put and commit, or two replicas overlapping
during a rebalance, cause no second copy. That memory is written to
``config/scheduleDelivered.json`` with the consumer offsets (every few seconds
and on shutdown), so a broker restart keeps it too; only a broker crash can
lose its last few seconds, and then a re-put may happen twice (at least once,
never lost).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from rocketmesh.broker.processor.handlers import BAD_REQUEST_ERRORS, ok, register_all
from rocketmesh.broker.schedule import PARKING_PROPERTIES
from rocketmesh.broker.store import MessageExtBrokerInner, PutMessageStatus
from rocketmesh.model.codec import encode_host_text, encode_properties
from rocketmesh.model.message import MessageConst
from rocketmesh.model.topics import SCHEDULE_TOPIC, TIMER_TOPIC
from rocketmesh.remoting import RemotingCommand, RequestCode, RequestContext, ResponseCode, response_to
from rocketmesh.remoting.protocol.headers import DeliverDueMessagesRequestHeader, DeliverDueMessagesResponseHeader
from rocketmesh.runtime.jsonfile import read_json, write_json_atomic
from rocketmesh.runtime.log import get_logger
from rocketmesh.telemetry.propagation import TRACEPARENT

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from rocketmesh.broker.parts import BrokerParts
    from rocketmesh.remoting import RemotingServer

log = get_logger("broker", component="delivery")

PARKED_TOPICS = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC})
#: The most entries one request may name.
MAX_OFFSETS_PER_REQUEST = 4096


@dataclass
class _Delivered:
    """Offsets of one parked queue re-put at or above ``floor`` (all below it are settled)."""

    floor: int = 0
    offsets: set[int] = field(default_factory=set)

    def advance(self, floor: int) -> None:
        if floor > self.floor:
            self.floor = floor
            self.offsets = {o for o in self.offsets if o >= floor}


class DeliveryProcessor:
    """Answers DELIVER_DUE_MESSAGES; counts what it re-put."""

    def __init__(self, broker: BrokerParts, path: str) -> None:
        self.broker = broker
        self.path = path
        self._lock = threading.Lock()
        self._delivered: dict[tuple[str, int], _Delivered] = {}
        self._version = 0
        self._persisted_version = 0
        self.delivered_total = 0
        self.duplicates_total = 0
        self.rolled_total = 0

    def load(self) -> None:
        """Read the re-put memory a previous run left (none: start empty)."""
        self.replace_all(read_json(self.path) or {})
        self._persisted_version = self._version

    def persist_if_dirty(self) -> bool:
        """Write the re-put memory if it changed since the last write (write-then-rename)."""
        with self._lock:
            if self._version == self._persisted_version:
                return False
            version = self._version
        write_json_atomic(self.path, self.snapshot())
        self._persisted_version = version
        return True

    def snapshot(self) -> dict:
        """The re-put memory as a document (what scheduleDelivered.json holds; GET_ALL_DELAY_OFFSET)."""
        with self._lock:
            return {"queues": {f"{t}@{q}": {"floor": d.floor, "offsets": sorted(d.offsets)}
                               for (t, q), d in sorted(self._delivered.items())}}

    def replace_all(self, doc: dict) -> None:
        """A slave takes its master's re-put memory (a :meth:`snapshot` document)."""
        delivered = {}
        for key, d in (doc.get("queues") or {}).items():
            topic, _, qid = key.rpartition("@")
            if topic in PARKED_TOPICS and qid.isdigit():
                delivered[(topic, int(qid))] = _Delivered(int(d.get("floor", 0)),
                                                          {int(o) for o in d.get("offsets", ())})
        with self._lock:
            if delivered == self._delivered:
                return  # a slave's sync with nothing new: nothing to write either
            self._delivered = delivered
            self._version += 1

    def register(self, server: RemotingServer, executor: Executor) -> None:
        register_all(server, {
            RequestCode.DELIVER_DUE_MESSAGES: (self.deliver, executor),
            RequestCode.GET_ALL_DELAY_OFFSET: (lambda req, ctx: ok(req, body=orjson.dumps(self.snapshot())), None),
        }, BAD_REQUEST_ERRORS)

    def deliver(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """Re-put the named entries that are due.

        Request: header topic, queueId, committedOffset (every entry below it is
        settled, so its memory can go); body a JSON list of queue offsets, or
        ``{"offsets": [...], "traceparents": {"<offset>": traceparent}}`` when
        the scheduler traces deliveries: a delivered copy carries its delivery
        span's context as its ``traceparent``.
        With ``roll`` (timer topic), entries not yet due are parked again at the
        queue's tail and count as settled.
        Answer: header delivered, rolled and duplicates (counts); body JSON
        ``{"done": [offsets settled], "notDue": [[offset, dueMs]], "missing": [offsets]}``.
        """
        h = DeliverDueMessagesRequestHeader.from_ext(req.ext)
        if h.topic not in PARKED_TOPICS:
            return response_to(req, ResponseCode.NO_PERMISSION,
                               f"only {SCHEDULE_TOPIC} and {TIMER_TOPIC} entries can be delivered, not {h.topic}")
        offsets, traceparents = _offsets_of(req.body)
        store = self.broker.store
        cq = store.find_consume_queue(h.topic, h.queue_id)
        if cq is None:
            return ok(req, DeliverDueMessagesResponseHeader(),
                      orjson.dumps({"done": [], "notDue": [], "missing": offsets}))
        now_ms = int(time.time() * 1000)
        key = (h.topic, h.queue_id)
        roll = h.roll and h.topic == TIMER_TOPIC
        rolled = 0
        done: list[int] = []
        not_due: list[list[int]] = []
        missing: list[int] = []
        with self._lock:
            seen = self._delivered.setdefault(key, _Delivered())
            seen.advance(h.committed_offset)
            batch: list[tuple[int, MessageExtBrokerInner]] = []
            duplicates = 0
            for offset in offsets:
                if offset < seen.floor or offset in seen.offsets:
                    duplicates += 1
                    done.append(offset)
                    continue
                entry = cq.get(offset)
                if entry is None:
                    missing.append(offset)
                    continue
                phys, _size, due_ms = entry
                if due_ms > now_ms and not roll:
                    not_due.append([offset, due_ms])
                    continue
                inner = self._restore(phys, traceparents.get(offset)) if due_ms <= now_ms \
                    else self._repark(phys, h.queue_id)
                rolled += due_ms > now_ms and inner is not None
                if inner is None:
                    missing.append(offset)
                    continue
                batch.append((offset, inner))
            if batch:
                result = store.put_messages([m for _, m in batch], wait_flush=False)
                if not result.status.stored:
                    log.warning("delivery_put_failed", status=result.status.value, remark=result.remark)
                    return response_to(req, ResponseCode.SYSTEM_ERROR,
                                       f"[{result.status.value}] re-put of due messages failed {result.remark}")
                last = result.appended[-1]
                for offset, _ in batch:
                    seen.offsets.add(offset)
                    done.append(offset)
                self._version += 1
                end = last.wrote_offset + last.wrote_bytes
            self.delivered_total += len(batch) - rolled
            self.rolled_total += rolled
            self.duplicates_total += duplicates
        if batch and store.wait_durable(end) is not PutMessageStatus.PUT_OK:
            # Stored and remembered; only the flush is late. The scheduler commits, as a send would.
            log.warning("delivery_flush_timeout", topic=h.topic, queue_id=h.queue_id)
        if missing:
            log.warning("delivery_entries_missing", topic=h.topic, queue_id=h.queue_id, offsets=missing[:20])
        return ok(req, DeliverDueMessagesResponseHeader(len(batch) - rolled, rolled, duplicates),
                  orjson.dumps({"done": done, "notDue": not_due, "missing": missing}))

    def _repark(self, phys: int, queue_id: int) -> MessageExtBrokerInner | None:
        """The timer entry at ``phys`` as a new record of the same timer queue (same due time)."""
        msg = self.broker.store.look_message_by_offset(phys)
        if msg is None:
            return None
        return MessageExtBrokerInner(TIMER_TOPIC, msg.body, queue_id, msg.flag, encode_properties(msg.properties),
                                     msg.sys_flag, msg.born_timestamp, encode_host_text(msg.born_host),
                                     msg.reconsume_times)

    def _restore(self, phys: int, traceparent: str | None = None) -> MessageExtBrokerInner | None:
        msg = self.broker.store.look_message_by_offset(phys)
        if msg is None:
            return None
        props = dict(msg.properties)
        if traceparent:
            props[TRACEPARENT] = traceparent
        real_topic = props.get(MessageConst.REAL_TOPIC)
        try:
            real_qid = int(props.get(MessageConst.REAL_QUEUE_ID, ""))
        except ValueError:
            real_qid = -1
        if not real_topic or real_qid < 0:
            log.warning("parked_message_without_real_queue", commitlog_offset=phys)
            return None
        for name in PARKING_PROPERTIES:
            props.pop(name, None)
        return MessageExtBrokerInner(real_topic, msg.body, real_qid, msg.flag, encode_properties(props),
                                     msg.sys_flag, msg.born_timestamp, encode_host_text(msg.born_host),
                                     msg.reconsume_times)


def _offsets_of(body: bytes | None) -> tuple[list[int], dict[int, str]]:
    """The offsets a DELIVER_DUE_MESSAGES body names, and the traceparent given for each traced one."""
    doc = orjson.loads(body) if body else []
    traceparents: dict[int, str] = {}
    if isinstance(doc, dict):
        given = doc.get("traceparents") or {}
        if not isinstance(given, dict) or not all(isinstance(v, str) and k.isdigit() for k, v in given.items()):
            raise ValueError("traceparents must map queue offsets (as strings) to traceparent strings")
        traceparents = {int(k): v for k, v in given.items()}
        doc = doc.get("offsets")
    if not isinstance(doc, list) or not all(type(o) is int and o >= 0 for o in doc):
        raise ValueError("the body must be a JSON list of queue offsets, "
                         "or {\"offsets\": [...], \"traceparents\": {...}}")
    if len(doc) > MAX_OFFSETS_PER_REQUEST:
        raise ValueError(f"at most {MAX_OFFSETS_PER_REQUEST} offsets per request")
    return doc, traceparents
