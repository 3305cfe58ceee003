"""Message trace (RocketMQ's msgTrace): who sent a message, who consumed it, when, how long, with what outcome.

``Producer(..., enable_msg_trace=True)``, ``TransactionProducer``,
``PushConsumer`` and ``PullConsumer`` (the same keyword) each own a :class:`MsgTracer`. Its
hooks (RocketMQ's SendMessageTraceHookImpl, ConsumeMessageTraceHookImpl and
EndTransactionTraceHookImpl) build :class:`~rocketmesh.client.trace.trace_data.TraceRecord`
objects and hand them to a background dispatcher (RocketMQ's
AsyncTraceDispatcher): a bounded queue, drained in batches by one thread that
sends them with an internal, untraced Producer to the trace topic
(``RMQ_SYS_TRACE_TOPIC`` unless ``trace_topic=`` names another), each trace
message keyed by the traced messages' ids. When the queue is full a record is
dropped and counted; the user's send or consume never waits for, or fails
because of, its trace. Shutdown flushes what is queued, bounded in time.

``rocketmesh admin query-msg-trace-by-id -i <msgId>`` reads them back
(:meth:`rocketmesh.client.admin.admin.Admin.query_msg_trace`).
"""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rocketmesh.client.errors import MQError
from rocketmesh.client.results import SendResult
from rocketmesh.client.trace.trace_data import (
    ConsumeReturnType,
    TraceMessageType,
    TraceRecord,
    TraceType,
    encode_record,
    trace_keys,
)
from rocketmesh.client.trace.tracing import message_type
from rocketmesh.client.unique_id import create_unique_id
from rocketmesh.model.codec import decode_message_id
from rocketmesh.model.message import Message, MessageConst, MessageExt
from rocketmesh.model.topics import TRACE_TOPIC
from rocketmesh.runtime.log import get_logger
from rocketmesh.telemetry import semconv as sc

#: The internal producer's group is this prefix and the traced group (RocketMQ's TraceConstants.GROUP_NAME_PREFIX).
TRACE_PRODUCER_GROUP_PREFIX = "_INNER_TRACE_PRODUCER-"
#: RocketMQ's AsyncTraceDispatcher defaults: queued records, records per trace message, bytes per trace message.
DEFAULT_QUEUE_SIZE = 2048
DEFAULT_BATCH_SIZE = 100
DEFAULT_MAX_MSG_SIZE = 128 * 1024
#: How long the dispatcher gathers a batch after its first record (s), and how long a trace send may take (ms).
FLUSH_INTERVAL_S = 0.05
SEND_TIMEOUT_MS = 3000

log = get_logger("client", component="msg_trace")
T = TypeVar("T")


class TraceDispatcher:
    """Sends queued trace records in batches on a background thread (RocketMQ's AsyncTraceDispatcher).

    ``put`` never blocks: a full queue drops the record and counts it in
    ``dropped``. ``start`` starts the thread; the internal producer (group
    ``_INNER_TRACE_PRODUCER-<group>``, no tracing of its own), made by
    ``new_producer(group, namesrv, instance_name=..., access_key=..., secret_key=...)`` (the
    ``Producer`` class), starts with the first batch. ``close`` sends what is queued, waiting at
    most its timeout.
    """

    def __init__(self, group: str, namesrv: Any, trace_topic: str | None = None, *,
                 new_producer: Callable[..., Any], queue_size: int = DEFAULT_QUEUE_SIZE,
                 batch_size: int = DEFAULT_BATCH_SIZE,
                 max_msg_size: int = DEFAULT_MAX_MSG_SIZE, instance_name: str | None = None,
                 access_key: str | None = None, secret_key: str | None = None) -> None:
        self.group = group
        self.trace_topic = trace_topic or TRACE_TOPIC
        self.batch_size = batch_size
        self.max_msg_size = max_msg_size
        #: Records dropped because the queue was full, and records whose trace message could not be sent.
        self.dropped = 0
        self.failed = 0
        self._namesrv = namesrv
        # The Producer class, handed in by whoever traces: the producer package imports this module.
        self._new_producer = new_producer
        self._instance_name = instance_name
        # The traced client's ACL account: its trace messages need PUB on the trace topic.
        self._credentials = dict(access_key=access_key, secret_key=secret_key)
        self._queue: queue_mod.Queue[TraceRecord] = queue_mod.Queue(queue_size)
        self._producer: Any = None
        self._stopping = threading.Event()
        self._deadline = 0.0
        self._thread = threading.Thread(target=self._run, name=f"msg-trace-{group}", daemon=True)

    def start(self) -> None:
        """Start sending (idempotent); records put before are kept for it."""
        if not self._thread.is_alive() and not self._stopping.is_set():
            self._thread.start()

    def put(self, record: TraceRecord) -> None:
        """Queue ``record`` (never blocks; dropped and counted when the queue is full or closed)."""
        if self._stopping.is_set():
            self.dropped += 1
            return
        try:
            self._queue.put_nowait(record)
        except queue_mod.Full:
            self.dropped += 1
            if self.dropped & (self.dropped - 1) == 0:  # 1, 2, 4, 8 ...: a full queue is said, not shouted
                log.warning("msg_trace_queue_full", group=self.group, dropped=self.dropped)

    def close(self, timeout_s: float = 3.0) -> None:
        """Send what is queued (at most ``timeout_s``), then stop the thread and the internal producer."""
        self._deadline = time.monotonic() + timeout_s
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        left = self._queue.qsize()
        if left:
            self.dropped += left
            log.warning("msg_trace_not_flushed", group=self.group, dropped=left)
        if self._producer is not None:
            self._producer.shutdown(max(0.1, self._deadline - time.monotonic()))

    def _run(self) -> None:
        get = self._queue.get
        while True:
            try:
                first = get(timeout=FLUSH_INTERVAL_S)
            except queue_mod.Empty:
                if self._stopping.is_set():
                    return
                continue
            batch = [first]
            until = time.monotonic() + FLUSH_INTERVAL_S
            while len(batch) < self.batch_size:
                wait = until - time.monotonic()
                try:
                    batch.append(get(timeout=wait) if wait > 0 and not self._stopping.is_set() else
                                 self._queue.get_nowait())
                except queue_mod.Empty:
                    break
            if self._stopping.is_set() and time.monotonic() >= self._deadline:
                self.dropped += len(batch)
                return
            self._send(batch)

    def _send(self, batch: list[TraceRecord]) -> None:
        """Pack ``batch`` into trace messages of at most ``max_msg_size`` bytes and send each."""
        body: list[str] = []
        keys: dict[str, None] = {}
        size = 0
        count = 0
        for r in batch:
            text = encode_record(r)
            if body and size + len(text) > self.max_msg_size:
                self._send_one("".join(body), list(keys), count)
                body, keys, size, count = [], {}, 0, 0
            body.append(text)
            size += len(text)
            count += 1
            keys.update(dict.fromkeys(trace_keys(r)))
        if body:
            self._send_one("".join(body), list(keys), count)

    def _send_one(self, body: str, keys: list[str], count: int) -> None:
        timeout_ms = SEND_TIMEOUT_MS
        if self._stopping.is_set():
            timeout_ms = max(1, min(timeout_ms, int((self._deadline - time.monotonic()) * 1000)))
        try:
            if self._producer is None:
                self._producer = self._new_producer(TRACE_PRODUCER_GROUP_PREFIX + self.group, self._namesrv,
                                          instance_name=self._instance_name, **self._credentials).start()
            self._producer.send(Message(self.trace_topic, body.encode("utf-8"), keys=keys), timeout_ms=timeout_ms)
        except MQError as exc:
            self.failed += count
            log.warning("msg_trace_send_failed", group=self.group, trace_topic=self.trace_topic, records=count,
                        error=str(exc))


@dataclass(slots=True)
class SubTrace:
    """One listener call being traced: its request id, start, and the SubBefore records of its messages."""

    request_id: str
    begin_ms: int
    before: list[TraceRecord] = field(default_factory=list)
    #: Set when the listener raised (the SubAfter's context code is EXCEPTION then).
    raised: bool = False


#: The trace's name of a message type (a FIFO message is recorded as a normal one).
_TRACE_MESSAGE_TYPES = {sc.MessageType.TRANSACTION: TraceMessageType.Trans_Msg_Half,
                        sc.MessageType.DELAY: TraceMessageType.Delay_Msg}


def _msg_type(msg: Message) -> TraceMessageType:
    return _TRACE_MESSAGE_TYPES.get(message_type(msg.properties, False), TraceMessageType.Normal_Msg)


def _ms() -> int:
    return int(time.time() * 1000)


class MsgTracer:
    """The trace hooks of one producer or consumer group; records go to its :class:`TraceDispatcher`."""

    def __init__(self, group: str, namesrv: Any, trace_topic: str | None = None, **dispatcher: Any) -> None:
        self.group = group
        self.dispatcher = TraceDispatcher(group, namesrv, trace_topic, **dispatcher)
        self.trace_topic = self.dispatcher.trace_topic

    def start(self) -> None:
        """Start the dispatcher's thread (idempotent)."""
        self.dispatcher.start()

    def close(self, timeout_s: float = 3.0) -> None:
        """Flush and stop (bounded by ``timeout_s``)."""
        self.dispatcher.close(timeout_s)

    # -- producers (SendMessageTraceHookImpl, EndTransactionTraceHookImpl) ----

    def traced_send(self, msg: Message, send: Callable[..., T], *args: Any) -> T:
        """``send(*args)``, recording a Pub of ``msg``: at once for a sync send, when its Future completes for an
        async one, at once as failed when it raises. The send's outcome is returned or raised unchanged."""
        begin = _ms()
        try:
            result = send(*args)
        except BaseException:
            self.pub(msg, None, begin)
            raise
        if isinstance(result, Future):
            result.add_done_callback(
                lambda f: self.pub(msg, None if f.cancelled() or f.exception() else f.result(), begin))
        else:
            self.pub(msg, result, begin)  # type: ignore[arg-type]
        return result

    def pub(self, msg: Message, result: SendResult | None, begin_ms: int) -> None:
        """Record a Pub of ``msg``; ``result`` None for a failed send."""
        if msg.topic == self.trace_topic:
            return
        r = TraceRecord(TraceType.Pub, msg.properties.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
                        begin_ms, group=self.group, topic=msg.topic, tags=msg.tags, keys=msg.keys,
                        body_length=len(msg.body), cost_ms=_ms() - begin_ms, msg_type=_msg_type(msg),
                        success=result is not None)
        if result is not None:
            r.msg_id = result.msg_id
            r.offset_msg_id = result.offset_msg_id or ""
            r.store_host = store_host_of(result.offset_msg_id)
            r.region_id = result.region_id or r.region_id
        self.dispatcher.put(r)

    def end_transaction(self, msg: Message | MessageExt, result_msg_id: str, store_host: str, state: str,
                        from_check: bool) -> None:
        """Record an EndTransaction: the outcome ``state`` told to the broker for ``msg``."""
        self.dispatcher.put(TraceRecord(
            TraceType.EndTransaction, result_msg_id, _ms(), group=self.group, topic=msg.topic, tags=msg.tags,
            keys=msg.keys, store_host=store_host, msg_type=TraceMessageType.Trans_msg_Commit,
            transaction_id=result_msg_id, transaction_state=state, from_transaction_check=from_check))

    # -- push consumers (ConsumeMessageTraceHookImpl) -------------------------

    def before(self, msgs: Sequence[MessageExt]) -> SubTrace | None:
        """Record a SubBefore of each message of a listener call; None when none is traced."""
        now = _ms()
        sub = SubTrace(create_unique_id(), now)
        for m in msgs:
            if m.topic == self.trace_topic:
                continue
            r = TraceRecord(TraceType.SubBefore, m.unique_key or m.msg_id, now, group=self.group, topic=m.topic,
                            tags=m.tags, keys=m.keys, request_id=sub.request_id, retry_times=m.reconsume_times)
            sub.before.append(r)
            self.dispatcher.put(r)
        return sub if sub.before else None

    def after(self, sub: SubTrace, status: Any, success_status: Any, timeout_ms: float | None = None) -> None:
        """Record a SubAfter of each message of ``sub``: the listener returned ``status``."""
        now = _ms()
        success = status == success_status
        cost = now - sub.begin_ms
        if success:
            code = ConsumeReturnType.SUCCESS
        elif sub.raised:
            code = ConsumeReturnType.EXCEPTION
        elif timeout_ms is not None and cost >= timeout_ms:
            code = ConsumeReturnType.TIME_OUT
        elif status is None:
            code = ConsumeReturnType.RETURNNULL
        else:
            code = ConsumeReturnType.FAILED
        each = cost // len(sub.before)
        for b in sub.before:
            self.dispatcher.put(TraceRecord(TraceType.SubAfter, b.msg_id, now, keys=b.keys, cost_ms=each,
                                            success=success, request_id=sub.request_id, context_code=code))

    # -- pull consumers (DefaultLitePullConsumer's hooks) ---------------------

    def polled(self, msgs: Sequence[MessageExt]) -> None:
        """Record what a poll handed the application: a SubBefore and a successful SubAfter of each message
        at once (the application's processing is out of sight, as with RocketMQ's lite pull consumer)."""
        sub = self.before(msgs)
        if sub is not None:
            self.after(sub, True, True)


def store_host_of(offset_msg_id: str | None) -> str:
    """The address of the broker that stored a message, as its offset message id (the first of a batch's)
    says it; "" when it says none."""
    try:
        ip, port, _offset = decode_message_id((offset_msg_id or "").split(",")[0])
    except ValueError:
        return ""
    return f"{ip}:{port}"
