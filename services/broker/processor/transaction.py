"""Transactional messages on the broker: half messages, END_TRANSACTION, and the checks a txn-checker asks for.

Half message: a prepared send is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0,
its real topic and queue in REAL_TOPIC / REAL_QID, its producer group in
PGROUP and its transaction id (the producer's UNIQ_KEY) in __transactionId__,
with the transaction bits of its sysflag cleared so that the dispatcher files
it like any message of the half topic. Consumers of the real topic never see it.

Decision: END_TRANSACTION COMMIT stores the restored message in its real queue
(sysflag COMMIT, prepared offset = the half's commitlog offset; the half's body
as stored, a compressed one with its COMPRESSED bit) and, in the same
put, an op message; ROLLBACK stores only the op. An op message goes to
RMQ_SYS_TRANS_OP_HALF_TOPIC, the half's queue id, body = the half's queue
offset, tag "d": the txn-checker reads ops to learn what is decided. The
broker also remembers decided transactions by id (the most recent
``transactionDecidedTableSize``, rebuilt from the op queue's tail at start), so
a late or repeated END_TRANSACTION - for the half or for any copy of it - is
answered and ignored.

Check (CHECK_HALF_MESSAGE, from the txn-checker): a half past
``transactionCheckMax`` checks, or older than the store keeps files, is moved
to TRANS_CHECK_MAX_TIME_TOPIC and counted decided. Otherwise the broker pushes
CHECK_TRANSACTION_STATE to a live producer of PGROUP (the freshest heartbeat
first, the next one if that one is not connected) and, once one took it,
stores the half again with TRANSACTION_CHECK_TIMES + 1: the copy is what the
next check looks at. With no live producer nothing is stored and nothing counted.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor, TimeoutError as FutureTimeoutError
from typing import TYPE_CHECKING, Any

import orjson

from rocketmesh.broker.processor.handlers import BAD_REQUEST_ERRORS, ok, register_all
from rocketmesh.broker.store import MessageExtBrokerInner, PutMessageStatus
from rocketmesh.model.codec import CorruptRecord, decode_properties, decode_record, encode_host_text, encode_properties
from rocketmesh.model.message import MessageConst, MessageExt, SysFlag
from rocketmesh.model.route import PERM_READ_WRITE
from rocketmesh.model.topics import (
    TRANS_CHECK_GROUP,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_OP_REMOVE_TAG,
)
from rocketmesh.remoting import (
    RemotingCommand,
    RemotingError,
    RequestCode,
    RequestContext,
    ResponseCode,
    request,
    response_to,
)
from rocketmesh.remoting.protocol.headers import (
    CheckHalfMessageRequestHeader,
    CheckHalfMessageResponseHeader,
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    HalfCheckOutcome,
    PendingHalfMessagesRequestHeader,
    PendingHalfMessagesResponseHeader,
)
from rocketmesh.runtime.log import get_logger
from rocketmesh.telemetry.propagation import traceparent_of

if TYPE_CHECKING:
    from rocketmesh.broker.parts import BrokerParts
    from rocketmesh.remoting import RemotingServer

log = get_logger("broker", component="transaction")

#: Every half message goes to this queue of the half topic (RocketMQ's choice); its ops to the same queue id.
HALF_QUEUE_ID = 0
#: How long a producer has to take a pushed check before the next live producer is tried.
CHECK_ACK_TIMEOUT_MS = 1000
#: At most this many producers are tried for one check.
CHECK_PRODUCERS_TRIED = 3
#: Checks handled at once; each mostly waits for a producer to take its push.
CHECK_THREADS = 8
#: GET_PENDING_HALF_MESSAGES reads at most this many half-queue entries per queue.
PENDING_SCAN_MAX = 100_000

_TRANSACTION_BITS = 0xC
_COMMIT = int(SysFlag.TRANSACTION_COMMIT)
_ROLLBACK = int(SysFlag.TRANSACTION_ROLLBACK)
_NO_TRANSACTION = 0
_OUTCOME_NAMES = {_COMMIT: "COMMIT", _ROLLBACK: "ROLLBACK"}


class HalfMessageError(ValueError):
    """A prepared send that cannot become a half message (delayed or timer messages)."""


def half_properties(topic: str, queue_id: int, raw_props: bytes, producer_group: str) -> bytes:
    """The properties a prepared send to ``topic``/``queue_id`` is stored with as a half message.

    Raises HalfMessageError for a delay level or a delivery time: a transactional
    message is delivered when it commits, never later.
    """
    pm = decode_properties(raw_props)
    level = pm.get(MessageConst.DELAY_TIME_LEVEL, "0").strip()
    if level not in ("", "0"):
        raise HalfMessageError("a transactional message may not have a delay level (DELAY)")
    if MessageConst.TIMER_DELIVER_MS in pm or MessageConst.TIMER_DELAY_MS in pm:
        raise HalfMessageError("a transactional message may not have a delivery time (TIMER_DELIVER_MS / "
                               "TIMER_DELAY_MS)")
    pm[MessageConst.REAL_TOPIC] = topic
    pm[MessageConst.REAL_QUEUE_ID] = str(queue_id)
    pm[MessageConst.PRODUCER_GROUP] = producer_group
    pm[MessageConst.TRANSACTION_PREPARED] = "true"
    pm[MessageConst.TRANSACTION_ID] = (pm.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                                       or pm.get(MessageConst.TRANSACTION_ID) or uuid.uuid4().hex.upper())
    return encode_properties(pm)


def half_sys_flag(sys_flag: int) -> int:
    """The sysflag a half message is stored with: no transaction bits, so it is filed in the half topic."""
    return sys_flag & ~_TRANSACTION_BITS


def transaction_id(msg: MessageExt) -> str:
    """The transaction a stored half message (or a copy of it) belongs to."""
    props = msg.properties
    return (props.get(MessageConst.TRANSACTION_ID) or props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            or msg.msg_id)


class DecidedTable:
    """Transaction id -> outcome, for the most recent ``capacity`` decisions (thread-safe)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._table: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, tid: str) -> str | None:
        with self._lock:
            return self._table.get(tid)

    def put(self, tid: str, outcome: str) -> None:
        with self._lock:
            self._table[tid] = outcome
            self._table.move_to_end(tid)
            while len(self._table) > self.capacity:
                self._table.popitem(last=False)

    def __contains__(self, tid: object) -> bool:
        with self._lock:
            return tid in self._table

    def __len__(self) -> int:
        with self._lock:
            return len(self._table)


class TransactionProcessor:
    """END_TRANSACTION, CHECK_HALF_MESSAGE and GET_PENDING_HALF_MESSAGES (see the module docstring)."""

    def __init__(self, broker: BrokerParts) -> None:
        self.broker = broker
        self.store = broker.store
        cfg = broker.config
        self.decided = DecidedTable(cfg.transaction_decided_table_size)
        #: Serialises decisions and check re-puts, so a transaction is decided once.
        self._lock = threading.Lock()
        self._end_executor = ThreadPoolExecutor(cfg.end_transaction_thread_pool_nums,
                                                thread_name_prefix="EndTransactionThread")
        # Checks wait for a producer to take the push: kept apart so they never hold up END_TRANSACTION.
        self._check_executor = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="TransactionCheckThread")
        self.committed = 0
        self.rolled_back = 0
        self.ignored = 0
        self.checks_pushed = 0
        self.checks_without_producer = 0
        self.discarded = 0

    # --- life cycle ---

    def load(self) -> None:
        """Remember the transactions the op queue's tail says are decided (a late END_TRANSACTION changes nothing)."""
        store = self.store
        budget = self.decided.capacity
        loaded = 0
        for qid in store.queue_ids(TRANS_OP_HALF_TOPIC):
            hi = store.get_max_offset_in_queue(TRANS_OP_HALF_TOPIC, qid)
            offset = max(store.get_min_offset_in_queue(TRANS_OP_HALF_TOPIC, qid), hi - budget)
            for op in self._read(TRANS_OP_HALF_TOPIC, qid, offset, hi):
                tid = op.properties.get(MessageConst.TRANSACTION_ID)
                if tid:
                    self.decided.put(tid, "DECIDED")
                    loaded += 1
        if loaded:
            log.info("decided_transactions_loaded", count=loaded)

    def _read(self, topic: str, queue_id: int, offset: int, end: int) -> Iterator[MessageExt]:
        """The messages of ``topic``/``queue_id`` from ``offset`` up to ``end``, read from the store
        (records that do not decode are skipped)."""
        store = self.store
        while offset < end:
            result = store.get_message(TRANS_CHECK_GROUP, topic, queue_id, offset, 1024)
            for rec in result.records:
                try:
                    yield decode_record(rec, inflate=False)
                except CorruptRecord:
                    continue
            if result.next_begin_offset <= offset:
                return
            offset = result.next_begin_offset

    def register(self, server: RemotingServer, admin_executor: Executor) -> None:
        register_all(server, {
            RequestCode.END_TRANSACTION: (self.end_transaction, self._end_executor),
            RequestCode.CHECK_HALF_MESSAGE: (self.check_half_message, self._check_executor),
            RequestCode.GET_PENDING_HALF_MESSAGES: (self.pending_half_messages, admin_executor),
        }, BAD_REQUEST_ERRORS)

    def shutdown(self) -> None:
        self._check_executor.shutdown(wait=True, cancel_futures=True)
        self._end_executor.shutdown(wait=True, cancel_futures=True)

    # --- END_TRANSACTION ---

    def end_transaction(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """Commit or roll back a half message (RocketMQ's EndTransactionProcessor); 0 (not known yet) is a no-op."""
        h = EndTransactionRequestHeader.from_ext(req.ext)
        if self.broker.config.broker_id != 0:
            return response_to(req, ResponseCode.SLAVE_NOT_AVAILABLE,
                               "a slave broker takes no END_TRANSACTION; send it to the master")
        value = h.commit_or_rollback & _TRANSACTION_BITS
        if value not in _OUTCOME_NAMES:
            # UNKNOW: the transaction stays open; a check will ask again.
            return ok(req)
        found = self._half_at(h.commit_log_offset)
        if found is None:
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"no half message at commitlog offset {h.commit_log_offset}")
        half, _rec = found
        why = self._not_matching(half, h)
        if why is not None:
            return response_to(req, ResponseCode.SYSTEM_ERROR, why)
        outcome = _OUTCOME_NAMES[value]
        extra = None
        if value == _COMMIT:
            extra = self._restored(half)
            if extra is None:
                return response_to(req, ResponseCode.SYSTEM_ERROR,
                                   f"the half message at {h.commit_log_offset} has no REAL_TOPIC / REAL_QID")
        code, remark = self._decide(half, outcome, extra)
        if code == ResponseCode.SUCCESS and remark is None:
            log.debug("transaction_ended", transaction_id=transaction_id(half), outcome=outcome,
                      from_check=h.from_transaction_check)
        return response_to(req, code, remark)

    @staticmethod
    def _not_matching(half: MessageExt, h: EndTransactionRequestHeader) -> str | None:
        if half.topic != TRANS_HALF_TOPIC:
            return f"the message at commitlog offset {h.commit_log_offset} is not a half message"
        group = half.properties.get(MessageConst.PRODUCER_GROUP)
        if group != h.producer_group:
            return (f"the producer group {h.producer_group!r} is not the half message's ({group!r}): "
                    "the producer group is wrong")
        if half.queue_offset != h.tran_state_table_offset:
            return (f"the half message at commitlog offset {h.commit_log_offset} has queue offset "
                    f"{half.queue_offset}, not {h.tran_state_table_offset}")
        return None

    def _decide(self, half: MessageExt, outcome: str,
                extra: MessageExtBrokerInner | None) -> tuple[ResponseCode, str | None]:
        """Store ``extra`` (the committed or discarded message, if any) and the op of ``half``, once per
        transaction; (SUCCESS, None) when this call decided it."""
        tid = transaction_id(half)
        with self._lock:
            before = self.decided.get(tid)
            if before is not None:
                self.ignored += 1
                return ResponseCode.SUCCESS, f"transaction {tid} was decided before ({before}); ignored"
            op = MessageExtBrokerInner.of(TRANS_OP_HALF_TOPIC, str(half.queue_offset).encode(),
                                          queue_id=half.queue_id, tags=TRANS_OP_REMOVE_TAG,
                                          properties={MessageConst.TRANSACTION_ID: tid})
            result = self.store.put_messages([extra, op] if extra is not None else [op], wait_flush=False)
            if not result.status.stored:
                log.warning("transaction_put_failed", transaction_id=tid, outcome=outcome,
                            status=result.status.value, remark=result.remark)
                return (ResponseCode.SYSTEM_ERROR,
                        f"[{result.status.value}] storing the {outcome} failed {result.remark}")
            self.decided.put(tid, outcome)
            if outcome == "COMMIT":
                self.committed += 1
            elif outcome == "ROLLBACK":
                self.rolled_back += 1
            else:
                self.discarded += 1
        last = result.appended[-1]
        flushed = self.store.wait_durable(last.wrote_offset + last.wrote_bytes)
        if flushed is not PutMessageStatus.PUT_OK:
            log.warning("transaction_flush_late", transaction_id=tid, status=flushed.value)
        return ResponseCode.SUCCESS, None

    @staticmethod
    def _restored(half: MessageExt) -> MessageExtBrokerInner | None:
        """The committed message: the half's body and properties in its real queue."""
        props = dict(half.properties)
        real_topic = props.pop(MessageConst.REAL_TOPIC, None)
        try:
            real_qid = int(props.pop(MessageConst.REAL_QUEUE_ID, ""))
        except ValueError:
            return None
        if not real_topic or real_qid < 0:
            return None
        return MessageExtBrokerInner(real_topic, half.body, real_qid, half.flag, encode_properties(props),
                                     (half.sys_flag & ~_TRANSACTION_BITS) | _COMMIT, half.born_timestamp,
                                     encode_host_text(half.born_host), half.reconsume_times, half.commitlog_offset)

    @staticmethod
    def _copy(half: MessageExt, topic: str, queue_id: int, props: dict[str, str]) -> MessageExtBrokerInner:
        return MessageExtBrokerInner(topic, half.body, queue_id, half.flag, encode_properties(props),
                                     half.sys_flag & ~_TRANSACTION_BITS, half.born_timestamp,
                                     encode_host_text(half.born_host), half.reconsume_times)

    def _half_at(self, commitlog_offset: int) -> tuple[MessageExt, bytes] | None:
        if commitlog_offset < 0:
            return None
        rec = self.store.commitlog.read_record(commitlog_offset)
        if not rec:
            return None
        try:
            # As stored: the committed message and check copies keep a compressed body compressed.
            return decode_record(rec, inflate=False), rec
        except CorruptRecord:
            return None

    # --- CHECK_HALF_MESSAGE ---

    def check_half_message(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """One check of a half message the txn-checker found undecided (see the module docstring)."""
        h = CheckHalfMessageRequestHeader.from_ext(req.ext)
        found = self._half_at(h.commit_log_offset)
        if found is None:
            return self._outcome(req, HalfCheckOutcome.MISSING)
        half, rec = found
        if half.topic != TRANS_HALF_TOPIC or half.queue_id != h.queue_id or half.queue_offset != h.queue_offset:
            return self._outcome(req, HalfCheckOutcome.MISSING)
        tid = transaction_id(half)
        if tid in self.decided:
            return self._outcome(req, HalfCheckOutcome.DECIDED)
        props = half.properties
        try:
            times = int(props.get(MessageConst.TRANSACTION_CHECK_TIMES) or 0)
        except ValueError:
            times = 0
        age_ms = int(time.time() * 1000) - half.born_timestamp
        kept_ms = self.broker.store_config.file_reserved_time * 3600 * 1000
        if times >= h.transaction_check_max or age_ms > kept_ms:
            return self._discard(req, half, tid, times, age_ms > kept_ms)
        group = props.get(MessageConst.PRODUCER_GROUP, "")
        if not self._push_check(half, rec, tid, group, times + 1):
            self.checks_without_producer += 1
            return self._outcome(req, HalfCheckOutcome.NO_PRODUCER)
        again = dict(props)
        again[MessageConst.TRANSACTION_CHECK_TIMES] = str(times + 1)
        self.checks_pushed += 1
        with self._lock:
            if tid in self.decided:  # the producer answered already: no copy to check later
                return self._outcome(req, HalfCheckOutcome.CHECKED)
            result = self.store.put_messages([self._copy(half, TRANS_HALF_TOPIC, half.queue_id, again)],
                                             wait_flush=False)
        if not result.status.stored:
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"[{result.status.value}] storing the checked half message again failed "
                               f"{result.remark}")
        return self._outcome(req, HalfCheckOutcome.CHECKED)

    def _discard(self, req: RemotingCommand, half: MessageExt, tid: str, times: int,
                 expired: bool) -> RemotingCommand:
        self.broker.topics.create_system_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1, PERM_READ_WRITE)
        moved = self._copy(half, TRANS_CHECK_MAX_TIME_TOPIC, 0, dict(half.properties))
        code, remark = self._decide(half, "DISCARD", moved)
        if code != ResponseCode.SUCCESS:
            return response_to(req, code, remark)
        if remark is not None:
            return self._outcome(req, HalfCheckOutcome.DECIDED)
        props = half.properties
        log.warning("transaction_discarded", transaction_id=tid, topic=props.get(MessageConst.REAL_TOPIC),
                    producer_group=props.get(MessageConst.PRODUCER_GROUP), check_times=times,
                    reason="older than the store keeps files" if expired else "transactionCheckMax reached",
                    moved_to=TRANS_CHECK_MAX_TIME_TOPIC)
        return self._outcome(req, HalfCheckOutcome.DISCARDED)

    def _push_check(self, half: MessageExt, rec: bytes, tid: str, group: str, check_times: int) -> bool:
        """Push CHECK_TRANSACTION_STATE to a live producer of ``group``; True once one took it (the
        ``check_times``-th check of ``tid``)."""
        channels = sorted(self.broker.clients.producer_channels(group), key=lambda c: c.last_update, reverse=True)
        ext = CheckTransactionStateRequestHeader(
            half.queue_offset, half.commitlog_offset,
            half.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX) or tid, tid, half.msg_id).to_ext()
        for ch in channels[:CHECK_PRODUCERS_TRIED]:
            check = request(RequestCode.CHECK_TRANSACTION_STATE, dict(ext), rec, traceparent=traceparent_of())
            door = self.broker.server.door_of(ch.identity)
            if door is not None:
                # RocketMQ's own clients take the check oneway, as RocketMQ's broker sends it, and answer
                # with END_TRANSACTION: a live connection is the producer taking it.
                door.push(ch.identity, check)
                log.info("transaction_checked", transaction_id=tid, producer_group=group, client_id=ch.client_id,
                         check_times=check_times, topic=half.properties.get(MessageConst.REAL_TOPIC))
                return True
            fut = self.broker.server.invoke_client(ch.identity, check, CHECK_ACK_TIMEOUT_MS)
            try:
                resp = fut.result(CHECK_ACK_TIMEOUT_MS / 1000.0 + 1.0)
            except (RemotingError, FutureTimeoutError) as exc:
                log.info("check_push_failed", group=group, client_id=ch.client_id, error=str(exc))
                continue
            if resp.code == ResponseCode.SUCCESS:
                log.info("transaction_checked", transaction_id=tid, producer_group=group, client_id=ch.client_id,
                         check_times=check_times, topic=half.properties.get(MessageConst.REAL_TOPIC))
                return True
            log.info("check_refused", group=group, client_id=ch.client_id, code=resp.code, remark=resp.remark)
        return False

    @staticmethod
    def _outcome(req: RemotingCommand, outcome: HalfCheckOutcome) -> RemotingCommand:
        return ok(req, CheckHalfMessageResponseHeader(outcome.value))

    # --- GET_PENDING_HALF_MESSAGES ---

    def pending_half_messages(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """Half messages of a topic whose transaction is not decided, oldest first (the latest copy of each),
        from the txn-checker's committed offset on."""
        h = PendingHalfMessagesRequestHeader.from_ext(req.ext)
        max_num = max(1, min(h.max_num, 1000))
        store = self.store
        latest: dict[str, dict[str, Any]] = {}
        for qid in store.queue_ids(TRANS_HALF_TOPIC):
            lo = store.get_min_offset_in_queue(TRANS_HALF_TOPIC, qid)
            hi = store.get_max_offset_in_queue(TRANS_HALF_TOPIC, qid)
            offset = max(lo, self.broker.offsets.query_offset(TRANS_CHECK_GROUP, TRANS_HALF_TOPIC, qid),
                         hi - PENDING_SCAN_MAX)
            for half in self._read(TRANS_HALF_TOPIC, qid, offset, hi):
                props = half.properties
                if props.get(MessageConst.REAL_TOPIC) != h.topic:
                    continue
                tid = transaction_id(half)
                latest.pop(tid, None)  # a later copy replaces an earlier one
                latest[tid] = {
                    "transactionId": tid, "topic": h.topic,
                    "queueId": int(props.get(MessageConst.REAL_QUEUE_ID, "-1") or -1),
                    "producerGroup": props.get(MessageConst.PRODUCER_GROUP, ""),
                    "checkTimes": int(props.get(MessageConst.TRANSACTION_CHECK_TIMES) or 0),
                    "bornTimestamp": half.born_timestamp, "storeTimestamp": half.store_timestamp,
                    "halfQueueId": half.queue_id, "halfQueueOffset": half.queue_offset,
                    "commitLogOffset": half.commitlog_offset, "offsetMsgId": half.msg_id,
                    "keys": props.get(MessageConst.KEYS, ""), "tags": props.get(MessageConst.TAGS, ""),
                }
        pending = [e for tid, e in latest.items() if tid not in self.decided]
        pending.sort(key=lambda e: (e["bornTimestamp"], e["transactionId"]))
        return ok(req, PendingHalfMessagesResponseHeader(len(pending)), orjson.dumps(pending[:max_num]))

    def runtime_info(self) -> dict[str, int]:
        """Counters for GET_BROKER_RUNTIME_INFO."""
        return {"transactionCommitted": self.committed, "transactionRolledBack": self.rolled_back,
                "transactionEndIgnored": self.ignored, "transactionChecksPushed": self.checks_pushed,
                "transactionChecksWithoutProducer": self.checks_without_producer,
                "transactionDiscarded": self.discarded}
