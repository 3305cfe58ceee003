"""SEND_MESSAGE and SEND_BATCH_MESSAGE: checks, auto-creation, delay rewrite, the ordered send worker.

While the remoting I/O thread keeps up with its clients, it stores each send
itself: no thread hand-off on the way. Once it has been reading without a
pause for longer than a quarter of ``waitTimeMillsInSendQueue`` (sustained
load), sends are queued and handled by one worker thread in arrival order
(RocketMQ's single send thread), which drains what is queued, answers
SYSTEM_BUSY for requests that waited longer than ``waitTimeMillsInSendQueue``
and stores the rest. Either way, when puts wait to be durable (the store's
``put_waits``: SYNC_FLUSH, SYNC_MASTER) the answers go out once the store has
made them durable (``MessageStore.when_durable``), from the thread that settles
it, while the storing thread goes on with the next sends: concurrent producers
share one disk flush and one replication round. Sends stored on the I/O thread
share the fdatasync it does once it has read every request waiting
(``MessageStore.flush_pending``, run after each round of reading), which also
finishes their puts, after their answers went out.
Sends never overtake each other: while anything is queued or being stored by
the worker, new sends queue behind it, and answers come in the order the sends
were stored.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from rocketmesh.broker.metrics import BrokerMetrics, message_type_of
from rocketmesh.broker.processor.transaction import HALF_QUEUE_ID, HalfMessageError, half_properties, half_sys_flag
from rocketmesh.broker.schedule import ScheduleRewriteError, ScheduleRewriter
from rocketmesh.broker.store import (
    MessageExtBatch,
    MessageExtBrokerInner,
    PutMessageResult,
    PutMessageStatus,
)
from rocketmesh.model.codec import encode_host
from rocketmesh.model.message import SysFlag
from rocketmesh.model.route import Perm
from rocketmesh.model.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TRANS_HALF_TOPIC,
    validate_topic_name,
)
from rocketmesh.remoting import RemotingCommand, RequestCode, RequestContext, ResponseCode, response_to
from rocketmesh.remoting.protocol.headers import (
    HeaderError,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    send_header_of,
)
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.broker.parts import BrokerParts

log = get_logger("broker", component="send")

#: Put statuses that mean "stored", with the response code each is answered with.
_STORED_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
_FAILED_CODES = {
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_BUSY,
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutMessageStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
}
_MAX_DRAIN = 1024
_BATCH_CODE = RequestCode.SEND_BATCH_MESSAGE


@dataclass(slots=True)
class _Stored:
    """A send in the store, not answered yet."""

    ctx: RequestContext
    queue_id: int
    result: PutMessageResult
    #: The commitlog offset just past its records (what must be durable before the answer).
    end: int


class SendError(Exception):
    """A send refused before it reached the store, with the response code to answer."""

    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class SendMessageProcessor:
    """Validates sends, turns them into store puts, answers with where they went."""

    def __init__(self, broker: BrokerParts, metrics: BrokerMetrics) -> None:
        self.broker = broker
        self.store = broker.store
        self.topics = broker.topics
        self.config = broker.config
        self.store_config = broker.store_config
        self.metrics = metrics
        self.rewriter = ScheduleRewriter(len(self.store.delay_levels), broker.config.timer_max_delay_sec * 1000,
                                         broker.config.timer_queue_nums)
        self._queue: collections.deque[tuple[RemotingCommand, RequestContext]] = collections.deque()
        self._wake = threading.Event()
        self._running = False
        self._thread: threading.Thread | None = None
        #: The worker is storing or answering a batch: newer sends must queue behind it.
        self._busy = False
        #: Answers wait for the store to make the puts durable (SYNC_FLUSH, SYNC_MASTER).
        self._put_waits = broker.store.put_waits
        #: Past this much reading without a pause, sends go through the queue, where waits are measured.
        self._inline_backlog_ms = self.config.wait_time_mills_in_send_queue / 4.0
        self.busy_rejections = 0

    # --- queueing (remoting I/O thread) ---

    def enqueue(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand | None:
        """Inline handler: queue the send for the worker, or refuse it when the queue is full."""
        if not self._running:
            return response_to(cmd, ResponseCode.SERVICE_NOT_AVAILABLE,
                               f"the broker[{self.config.broker_name}] is shutting down, send to another broker")
        queue = self._queue
        if not queue and not self._busy and ctx.backlogged_ms() < self._inline_backlog_ms:
            # The broker keeps up: store and answer right here rather than pay two thread hand-offs.
            sent = self._store(cmd, ctx, on_io_thread=True)
            if sent is not None:
                # Under SYNC_FLUSH the sends of one round of reading share the fdatasync this thread does
                # when the round ends (the store's flush_pending).
                self._answer_when_durable((sent,), flush_here=True)
            return None
        if len(queue) >= self.config.send_thread_pool_queue_capacity:
            self.busy_rejections += 1
            return response_to(cmd, ResponseCode.SYSTEM_BUSY,
                               "[TOO_MANY_REQUESTS]broker busy, the send queue is full, try another broker")
        queue.append((cmd, ctx))
        self._wake.set()
        return None

    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="SendMessageWorker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self._wake.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        queue = self._queue
        while self._running or queue:
            if not queue:
                self._wake.wait(0.1)
                self._wake.clear()
                continue
            self._busy = True  # before popping, so the I/O thread never overtakes these sends
            batch = [queue.popleft() for _ in range(min(len(queue), _MAX_DRAIN))]
            try:
                self._handle(batch)
            except Exception:  # noqa: BLE001 - answer everyone rather than leave them to time out
                log.exception("send_batch_failed")
                for cmd, ctx in batch:
                    ctx.respond(response_to(cmd, ResponseCode.SYSTEM_ERROR, "broker failed to handle the send"))
            finally:
                self._busy = False

    def _handle(self, batch: list[tuple[RemotingCommand, RequestContext]]) -> None:
        """Store a drained run of queued sends (the worker's), then answer them: at once, or once the
        store made them durable."""
        limit_ms = self.config.wait_time_mills_in_send_queue
        now = time.monotonic()
        stored: list[_Stored] = []
        for cmd, ctx in batch:
            if (now - ctx.enqueued_at) * 1000 > limit_ms:
                self.busy_rejections += 1
                ctx.respond(response_to(cmd, ResponseCode.SYSTEM_BUSY, (
                    f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                    f"{(now - ctx.enqueued_at) * 1000:.0f}ms, size of queue: {len(self._queue)}")))
                continue
            sent = self._store(cmd, ctx, on_io_thread=False)
            if sent is not None:
                stored.append(sent)
        if stored:
            self._answer_when_durable(stored)

    def _store(self, cmd: RemotingCommand, ctx: RequestContext, on_io_thread: bool) -> _Stored | None:
        """Check one send and put it in the store: what to answer it with once durable, or None when it
        was answered already (refused, or not stored).

        ``on_io_thread``: the remoting I/O thread stores it, and finishes the put's work after the
        round's answers went out (the store's ``flush_pending``); under SYNC_FLUSH the sends of one round
        share the fdatasync it does then."""
        try:
            header = send_header_of(cmd.ext)
            if cmd.code == _BATCH_CODE:
                header.batch = True  # the Java client's batch: its code says it, whatever its header
            msgs = self._build(cmd, header, ctx)
        except SendError as exc:
            ctx.respond(response_to(cmd, exc.code, exc.remark))
            return None
        except HeaderError as exc:
            ctx.respond(response_to(cmd, ResponseCode.SYSTEM_ERROR, f"bad send header: {exc}"))
            return None
        if isinstance(msgs, MessageExtBatch):
            result = self.store.put_batch(msgs, wait_flush=False, finish_later=on_io_thread)
            stored_topic = msgs.topic
        else:
            result = self.store.put_messages(msgs, wait_flush=False, finish_later=on_io_thread)
            stored_topic = msgs[0].topic
        if not result.status.stored:
            code = _FAILED_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
            ctx.respond(response_to(cmd, code, f"[{result.status.value}] {result.remark}".strip()))
            return None
        self.metrics.sent(header.topic, message_type_of(header.topic, stored_topic), len(result.appended),
                          len(cmd.body))
        last = result.appended[-1]
        return _Stored(ctx, header.queue_id, result, last.wrote_offset + last.wrote_bytes)

    def _answer_when_durable(self, stored: Sequence[_Stored], flush_here: bool = False) -> None:
        """Answer stored sends at once, or (SYNC_FLUSH, SYNC_MASTER) once the store made them durable, from
        the thread that settles it: the storing thread goes on with the next sends meanwhile, so puts
        overlap the slave's round. ``flush_here`` as ``MessageStore.when_durable`` takes it."""
        if self._put_waits:
            self.store.when_durable(max(sent.end for sent in stored), partial(self._answer, stored),
                                    flush_here=flush_here)
        else:
            self._answer(stored, PutMessageStatus.PUT_OK)

    @staticmethod
    def _answer(stored: Sequence[_Stored], durable: PutMessageStatus) -> None:
        """Answer stored sends: where each went, with its put's status unless ``durable`` says they did not
        become durable in time."""
        for sent in stored:
            result = sent.result
            status = result.status if durable is PutMessageStatus.PUT_OK else durable
            first = result.appended[0]
            ext = SendMessageResponseHeader(first.msg_id, sent.queue_id, first.queue_offset).to_ext()
            sent.ctx.respond(RemotingCommand(_STORED_CODES[status], ext=ext))

    # --- validation and building store messages ---

    def _build(self, cmd: RemotingCommand, header: SendMessageRequestHeader, ctx: RequestContext
               ) -> list[MessageExtBrokerInner] | MessageExtBatch:
        """Check one send request and turn it into what to store (SendError if refused); sets
        ``header.queue_id`` when the producer left the choice to the broker (a negative queue id).

        A batch's items are checked by the store as it writes them.
        """
        topic = header.topic
        queue_id = header.queue_id
        born = header.born_timestamp or int(time.time() * 1000)
        props = header.properties
        flag = header.flag
        sys_flag = header.sys_flag
        reconsume = header.reconsume_times
        if not Perm.is_writeable(self.config.broker_permission):
            raise SendError(ResponseCode.NO_PERMISSION,
                            f"the broker[{self.config.broker_name}] sending message is forbidden")
        why = validate_topic_name(topic)
        if why is not None:
            raise SendError(ResponseCode.SYSTEM_ERROR, f"the specified topic is illegal: {why}")
        if topic in SYSTEM_TOPICS:
            raise SendError(ResponseCode.NO_PERMISSION, f"sending message to topic[{topic}] is forbidden")
        prepared = sys_flag & 0xC == SysFlag.TRANSACTION_PREPARED
        if prepared and self.config.reject_transaction_message:
            raise SendError(ResponseCode.NO_PERMISSION,
                            f"the broker[{self.config.broker_name}] sending transaction message is forbidden")
        cfg = self.topics.get(topic)
        if cfg is None:
            cfg = self._auto_create(header)
        if not cfg.writable:
            raise SendError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if queue_id < 0:
            queue_id = header.queue_id = random.randrange(cfg.write_queue_nums)
        elif queue_id >= max(cfg.read_queue_nums, cfg.write_queue_nums):
            raise SendError(ResponseCode.SYSTEM_ERROR, (
                f"request queueId[{queue_id}] is illegal, topic {topic} has {cfg.write_queue_nums} "
                f"write queues, producer: {ctx.remote}"))
        born_host = self._born_host(ctx)
        max_size = self.store_config.max_message_size
        if header.batch:
            if prepared:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL, "a batch may not hold transactional messages")
            if not cmd.body:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL, "the batch holds no message")
            return MessageExtBatch(topic, queue_id, cmd.body, sys_flag, born, born_host, reconsume)
        body = cmd.body
        self._check_body(len(body), max_size)
        raw_props = props.encode()
        if prepared:
            group = header.producer_group
            if not group:
                raise SendError(ResponseCode.SYSTEM_ERROR, "a transactional message needs its producerGroup")
            try:
                raw_props = half_properties(topic, queue_id, raw_props, group)
            except HalfMessageError as exc:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
            return [MessageExtBrokerInner(TRANS_HALF_TOPIC, body, HALF_QUEUE_ID, flag, raw_props,
                                          half_sys_flag(sys_flag), born, born_host, reconsume)]
        topic_out, queue_out = topic, queue_id
        if ScheduleRewriter.wants(raw_props):
            try:
                topic_out, queue_out, raw_props = self.rewriter.rewrite(topic, queue_id, raw_props)
            except ScheduleRewriteError as exc:
                raise SendError(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None
        return [MessageExtBrokerInner(topic_out, body, queue_out, flag, raw_props, sys_flag, born, born_host,
                                      reconsume)]

    @staticmethod
    def _check_body(size: int, max_size: int) -> None:
        if size == 0:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL, "the message body is empty")
        if size > max_size:
            raise SendError(ResponseCode.MESSAGE_ILLEGAL,
                            f"the message body size {size} exceeds maxMessageSize {max_size}")

    def _auto_create(self, header: SendMessageRequestHeader):
        topic = header.topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) or topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            raise SendError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        queue_nums = header.default_topic_queue_nums or self.config.default_topic_queue_nums
        cfg = None
        if self.config.auto_create_topic_enable:
            cfg = self.topics.create_in_send(topic, header.default_topic, queue_nums)
        if cfg is None:
            raise SendError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        return cfg

    _host_cache: dict[str, bytes] = {}

    def _born_host(self, ctx: RequestContext) -> bytes:
        remote = ctx.remote
        host = self._host_cache.get(remote)
        if host is None:
            # "identity@ip" from the ZeroMQ door (no port), "ip:port" from the TCP door.
            ip, port = remote.rpartition("@")[2], "0"
            if ctx.over_tcp:
                ip, _, port = ip.rpartition(":")
            try:
                host = encode_host(ip, int(port))
            except (OSError, ValueError, OverflowError):
                host = encode_host("127.0.0.1", 0)
            if len(self._host_cache) < 65536:
                self._host_cache[remote] = host
        return host

