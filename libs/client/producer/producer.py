"""Producer: sends messages to brokers (RocketMQ's DefaultMQProducer).

``send`` waits for the broker's answer and retries on another broker;
``send_async`` returns a Future and retries on the same broker; ``send_oneway``
sends and forgets; ``send_batch`` sends a list of messages of one topic as
one request to one queue. A ``queue`` or a ``selector`` pins the queue (for
ordered messages); such sends are not retried elsewhere, since that would
break the order.

By default ``send_async`` coalesces single messages of one topic into batch
requests while earlier ones are in flight (RocketMQ 5's auto batching, see
:mod:`rocketmesh.client.producer.accumulator`); each message still gets its own
SendResult, and a lone message goes at once. ``auto_batch=AutoBatch.OFF`` (or
False) turns it off; ``auto_batch=True`` (RocketMQ 5's setAutoBatch) coalesces
``send`` too.

    with Producer("orders-producer", "127.0.0.1:9876") as producer:
        result = producer.send(Message("Orders", b"..."))
"""

from __future__ import annotations

import queue as queue_mod
import struct
import threading
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, InvalidStateError, TimeoutError as FutureTimeoutError
from typing import Any, cast

from rocketmesh.client import exit_hooks
from rocketmesh.client.api import DEFAULT_TIMEOUT_MS, ClientAPI
from rocketmesh.client.errors import (
    ClientErrorCode,
    MQBrokerError,
    MQClientError,
    MQError,
    RequestTimeoutError,
)
from rocketmesh.client.fault import MQFaultStrategy
from rocketmesh.client.instance import ClientInstance, namesrv_addrs_from
from rocketmesh.client.producer.accumulator import AutoBatch, ProduceAccumulator
from rocketmesh.client.producer.selector import MessageQueueSelector
from rocketmesh.client.results import SendResult, SendStatus
from rocketmesh.client.route import TopicPublishInfo
from rocketmesh.client.trace.msg_trace import MsgTracer
from rocketmesh.client.trace.tracing import UNTRACED, SendTrace, start_send
from rocketmesh.client.unique_id import set_unique_id, set_unique_ids
from rocketmesh.client.validators import (
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_PRODUCER_GROUP,
    check_batch,
    check_group,
    check_message,
    check_topic,
)
from rocketmesh.model.codec import BATCH_ITEM_HEADER, BATCH_ITEM_HEADER_SIZE, compress_body, encode_batch
from rocketmesh.model.fields import encode_properties
from rocketmesh.model.message import Message, MessageConst, MessageQueue, SysFlag
from rocketmesh.model.topics import DEFAULT_TOPIC, RETRY_GROUP_TOPIC_PREFIX
from rocketmesh.remoting import RemotingConnectError, RemotingError, RemotingTimeoutError, ResponseCode
from rocketmesh.remoting.protocol.headers import SendMessageRequestHeader
from rocketmesh.runtime.log import get_logger

#: Broker answers after which a sync send tries another broker (RocketMQ's retryResponseCodes).
RETRY_RESPONSE_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION,
    ResponseCode.NO_BUYER_ID,
    ResponseCode.NOT_IN_CURRENT_UNIT,
})

#: ``callback(future)``: told when an async send completes, on the producer's callback thread.
SendCallback = Callable[["Future[SendResult]"], None]
SelectorLike = MessageQueueSelector | Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
#: A send's attempts, as its driver makes them: yields ``(broker address, queue, attempt timeout ms)``, is sent
#: each attempt's SendResult (or thrown its MQError), returns the send's result (see Producer.failover_plan).
SendPlan = Generator[tuple[str, MessageQueue, int], SendResult, SendResult]

_TRAN_PREPARED = MessageConst.TRANSACTION_PREPARED
_SEND_OK = SendStatus.SEND_OK
_SYS_TRAN_PREPARED = int(SysFlag.TRANSACTION_PREPARED)
_SYS_COMPRESSED = int(SysFlag.COMPRESSED)
#: RocketMQ's DefaultMQProducer.compressMsgBodyOverHowmuch: a single message's body of this many bytes or more
#: is sent compressed (RocketMQ compares with >=, whatever the name says).
DEFAULT_COMPRESS_MSG_BODY_OVER_HOWMUCH = 4096
#: RocketMQ's default zlib level for message bodies (the system property rocketmq.message.compressLevel).
DEFAULT_COMPRESS_LEVEL = 5
_CHECKED_TOPICS_MAX = 10_000
#: Properties of messages that are never auto batched: delayed, timer and transactional ones.
_UNBATCHABLE = frozenset({
    MessageConst.DELAY_TIME_LEVEL,
    MessageConst.TIMER_DELIVER_MS,
    MessageConst.TIMER_DELAY_MS,
    MessageConst.TRANSACTION_PREPARED,
    MessageConst.PRODUCER_GROUP,
})
#: The most bytes of properties a batch item holds (the broker refuses a batch with an item over it).
_MAX_ITEM_PROPERTIES = 32767
_pack_item_header = BATCH_ITEM_HEADER.pack
_unpack_item_header = BATCH_ITEM_HEADER.unpack
_pack_short = struct.Struct(">H").pack
_monotonic = time.monotonic
_time = time.time


class Producer:
    """Sends messages of one producer group.

    ``namesrv`` is ``"host:port;host:port"`` (or a list); None reads
    NAMESRV_ADDR. Settings keep RocketMQ's DefaultMQProducer names and
    defaults. ``start()`` is optional: the first send starts the producer.
    Use as a context manager, or call ``shutdown()``.

    Sends raise :class:`MQClientError` for a message that may not be sent
    (before anything goes out), :class:`MQBrokerError` for a broker's error
    answer (``response_code``, ``remark``), :class:`RequestTimeoutError`
    when no answer came in time; after retries the last attempt's error is
    raised with a note listing the brokers tried.

    A single message's body of ``compress_msg_body_over_howmuch`` bytes or more
    (4096) is sent zlib-compressed at ``compress_level`` (5), with the COMPRESSED
    bit of its sysFlag, as RocketMQ's producers do (compressMsgBodyOverHowmuch,
    rocketmq.message.compressLevel): any RocketMQ consumer, and ours, inflates it.
    Batches (``send_batch``, auto batches) go uncompressed; the Message keeps its
    original body.

    ``auto_batch`` (:class:`AutoBatch`; ``AutoBatch.ASYNC`` by default)
    coalesces single sends of a topic into batch requests: ``ASYNC`` those of
    ``send_async``, ``ALL`` (or True, RocketMQ 5's setAutoBatch) ``send``'s too,
    ``OFF`` (or False) none. A message goes at once when nothing of its topic
    is in flight, else with what gathered while earlier ones were in flight,
    at most ``batch_max_delay_ms`` later; each gets its own SendResult, and is
    retried as its send would be alone. ``batch_max_bytes`` is the most
    encoded bytes per batch and ``total_batch_max_bytes`` the most pending or
    in flight (RocketMQ 5's batchMaxDelayMs, batchMaxBytes,
    totalBatchMaxBytes, with its defaults). RocketMQ 5 leaves auto batching
    off; it is on here for async sends, which it makes several times faster,
    because it changes nothing else a sender can see (see
    docs/producing.md, "Auto batching").

    ``enable_msg_trace`` (off by default) records a Pub trace of each
    ``send`` and ``send_async`` into ``trace_topic`` (default
    RMQ_SYS_TRACE_TOPIC), in the background; see :mod:`rocketmesh.client.trace.msg_trace`.

    ``access_key`` and ``secret_key`` (both or neither) sign every request
    with that ACL account (see :mod:`rocketmesh.acl`); a refusal is an
    :class:`MQBrokerError` with ``response_code`` NO_PERMISSION.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        send_msg_timeout_ms: int = 3000,
        retry_times_when_send_failed: int = 2,
        retry_times_when_send_async_failed: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        send_latency_fault_enable: bool = False,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        compress_msg_body_over_howmuch: int = DEFAULT_COMPRESS_MSG_BODY_OVER_HOWMUCH,
        compress_level: int = DEFAULT_COMPRESS_LEVEL,
        default_topic_queue_nums: int = 4,
        create_topic_key: str = DEFAULT_TOPIC,
        instance_name: str | None = None,
        client_ip: str | None = None,
        poll_name_server_interval_ms: int = 30_000,
        heartbeat_broker_interval_ms: int = 30_000,
        mq_client_api_timeout_ms: int = DEFAULT_TIMEOUT_MS,
        auto_batch: AutoBatch | bool = AutoBatch.ASYNC,
        batch_max_delay_ms: int = 10,
        batch_max_bytes: int = 32 * 1024,
        total_batch_max_bytes: int = 32 * 1024 * 1024,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        check_group(group)
        if group == DEFAULT_PRODUCER_GROUP:
            raise MQClientError(f"the producer group {DEFAULT_PRODUCER_GROUP} is reserved; choose another group name",
                                ResponseCode.MESSAGE_ILLEGAL)
        for name, value, low, high in (
            ("send_msg_timeout_ms", send_msg_timeout_ms, 1, None),
            ("retry_times_when_send_failed", retry_times_when_send_failed, 0, None),
            ("retry_times_when_send_async_failed", retry_times_when_send_async_failed, 0, None),
            ("max_message_size", max_message_size, 1, None),
            ("compress_msg_body_over_howmuch", compress_msg_body_over_howmuch, 0, None),
            # java.util.zip.Deflater's levels: -1 (zlib's default, 6) and 0 (stored) .. 9.
            ("compress_level", compress_level, -1, 9),
            ("default_topic_queue_nums", default_topic_queue_nums, 1, None),
            ("poll_name_server_interval_ms", poll_name_server_interval_ms, 1, None),
            ("heartbeat_broker_interval_ms", heartbeat_broker_interval_ms, 1, None),
            ("mq_client_api_timeout_ms", mq_client_api_timeout_ms, 1, None),
            # RocketMQ 5's bounds: batchMaxDelayMs 1 ms .. 30 s, batchMaxBytes 1 B .. 2 MiB.
            ("batch_max_delay_ms", batch_max_delay_ms, 1, 30_000),
            ("batch_max_bytes", batch_max_bytes, 1, 2 * 1024 * 1024),
            ("total_batch_max_bytes", total_batch_max_bytes, 1, None),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise MQClientError(f"{name} must be an integer >= {low}, got {value!r}")
            if high is not None and value > high:
                raise MQClientError(f"{name} must be an integer <= {high}, got {value!r}")
        if not isinstance(enable_msg_trace, bool):
            raise MQClientError(f"enable_msg_trace must be True or False, got {enable_msg_trace!r}")
        mode = AutoBatch.of(auto_batch)
        if trace_topic is not None:
            check_topic(trace_topic)
        self.group = group
        self.namesrv_addrs = namesrv_addrs_from(namesrv)
        self.send_msg_timeout_ms = send_msg_timeout_ms
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.retry_times_when_send_async_failed = retry_times_when_send_async_failed
        self.retry_another_broker_when_not_store_ok = retry_another_broker_when_not_store_ok
        self.send_latency_fault_enable = send_latency_fault_enable
        self.max_message_size = max_message_size
        self.compress_msg_body_over_howmuch = compress_msg_body_over_howmuch
        self.compress_level = compress_level
        self.default_topic_queue_nums = default_topic_queue_nums
        self.create_topic_key = create_topic_key
        self.auto_batch = mode
        self._batch_async = mode is not AutoBatch.OFF
        self._batch_sync = mode is AutoBatch.ALL
        #: Auto batches fail over to another broker as a sync send does (AsyncProducer's sends), instead of
        #: being retried on their broker as an async send is.
        self._batch_failover = False
        self.batch_max_delay_ms = batch_max_delay_ms
        self.batch_max_bytes = batch_max_bytes
        self.total_batch_max_bytes = total_batch_max_bytes
        self._instance_args: dict[str, Any] = dict(
            instance_name=instance_name,
            client_ip=client_ip,
            poll_name_server_interval_ms=poll_name_server_interval_ms,
            heartbeat_broker_interval_ms=heartbeat_broker_interval_ms,
            request_timeout_ms=mq_client_api_timeout_ms,
            access_key=access_key,
            secret_key=secret_key,
        )
        self._log = get_logger("producer", group=group)
        self._lock = threading.Lock()
        # Both set by start(); every send starts the producer first.
        self._instance: ClientInstance = None  # type: ignore[assignment]
        self._api: ClientAPI = None  # type: ignore[assignment]
        self._fault: MQFaultStrategy = None  # type: ignore[assignment]
        self._callbacks: _CallbackThread | None = None
        self._accumulator: ProduceAccumulator | None = None  # set by start() unless auto_batch is OFF
        self._running = False
        self._closed = False
        self._checked_topics: set[str] = set()
        self.enable_msg_trace = enable_msg_trace
        self.trace_topic = trace_topic
        #: The message trace hooks (RocketMQ's msgTrace); None unless enable_msg_trace. Started by start().
        self._msg_trace: MsgTracer | None = None
        if enable_msg_trace:
            self._msg_trace = MsgTracer(group, self.namesrv_addrs, trace_topic, new_producer=Producer,
                                        instance_name=instance_name, access_key=access_key, secret_key=secret_key)

    # -- life cycle ------------------------------------------------------------

    def start(self) -> Producer:
        """Join the client instance and register the group (idempotent); returns self."""
        with self._lock:
            if self._running:
                return self
            if self._closed:
                raise MQClientError("the producer is shut down; create a new one")
            instance = ClientInstance.acquire(self.namesrv_addrs, **self._instance_args)
            instance.register_producer(self.group)
            self._fault = MQFaultStrategy(self.send_latency_fault_enable, unreachable=instance.unreachable)
            self._instance = instance
            self._api = instance.api
            if self._batch_async:
                self._accumulator = ProduceAccumulator(
                    self._send_auto_batch, batch_max_delay_ms=self.batch_max_delay_ms,
                    batch_max_bytes=min(self.batch_max_bytes, self.max_message_size),
                    total_batch_max_bytes=self.total_batch_max_bytes, name=self.group)
            if self._msg_trace is not None:
                self._msg_trace.start()
            self._running = True
        exit_hooks.started(self)
        return self

    def shutdown(self, timeout_s: float = 3.0) -> None:
        """Unregister from the brokers and leave the client instance (bounded by ``timeout_s``).

        With ``auto_batch``, messages still pending are sent first and their
        Futures complete (waiting at most ``timeout_s`` for the answers).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            was_running, self._running = self._running, False
        exit_hooks.stopped(self)
        if self._accumulator is not None:
            begin = _monotonic()
            if not self._accumulator.close(timeout_s):
                self._log.warning("auto batch: sends still unanswered at shutdown", timeout_s=timeout_s)
            timeout_s = max(0.1, timeout_s - (_monotonic() - begin))
        if self._msg_trace is not None:
            begin = _monotonic()
            self._msg_trace.close(timeout_s)
            timeout_s = max(0.1, timeout_s - (_monotonic() - begin))
        if was_running and self._instance is not None:
            self._instance.unregister_producer(self.group, timeout_s=min(1.0, timeout_s))
            self._instance.release()
        # After the release: sends still in flight have failed by now, and their callbacks run.
        if self._callbacks is not None:
            self._callbacks.stop(timeout_s)

    close = shutdown

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def instance(self) -> ClientInstance:
        """The shared client instance (starts the producer)."""
        if not self._running:
            self.start()
        return self._instance

    @property
    def running(self) -> bool:
        """True between start() (or the first send) and shutdown()."""
        return self._running

    @property
    def client_id(self) -> str:
        """The client instance's id (``ip@pid``), as brokers see this producer."""
        return self.instance.client_id

    def message_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send to ``topic`` may go to (RocketMQ's fetchPublishMessageQueues)."""
        check_topic(topic)
        return list(self._publish_info(topic).message_queues)

    # -- sends -----------------------------------------------------------------

    def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: SelectorLike | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer.

        Without ``queue``/``selector`` a failed attempt (connection failure,
        timeout, or a retryable broker answer) is retried up to
        ``retry_times_when_send_failed`` times on another broker; ``timeout_ms``
        (default ``send_msg_timeout_ms``) bounds all attempts together.

        With ``auto_batch=AutoBatch.ALL`` (or True) a batchable message (see
        :meth:`send_async`) goes in a batch, and is retried as the batch is: on
        the same broker, as an async send is. The wait for its answer is bounded
        by ``timeout_ms`` (then RequestTimeoutError); it is not retried on
        another broker. The default (``AutoBatch.ASYNC``) leaves ``send`` alone:
        a sync send goes out on the calling thread's own connection, which a
        batch would take it off.
        """
        if self._msg_trace is not None:
            return self._msg_trace.traced_send(msg, self._send, msg, queue, selector, arg, timeout_ms)
        return self._send(msg, queue, selector, arg, timeout_ms)

    def _send(self, msg: Message, queue: MessageQueue | None, selector: SelectorLike | None, arg: Any,
              timeout_ms: int | None) -> SendResult:
        """:meth:`send` without its message trace."""
        st = None
        if self._batch_sync and queue is None and selector is None:
            timeout = self.send_msg_timeout_ms if timeout_ms is None else timeout_ms
            fut, st = self._auto_batched(msg, timeout)
            if fut is not None:
                try:
                    return fut.result(timeout / 1000.0)
                except FutureTimeoutError:
                    raise RequestTimeoutError(
                        f"send to topic {msg.topic!r} timed out: no answer to its batch within {timeout} ms"
                    ) from None
        ordered = queue is not None or selector is not None
        timeout, uniq, header, body, st = self._prepare(msg, timeout_ms, ordered, st)
        topic = msg.topic
        with st or UNTRACED:  # the send's span ends with the send
            if not ordered:
                return self._send_sync(topic, header, body, uniq, timeout, st)
            mq = self._pinned_queue(msg, queue, selector, arg)
            return self._send_sync_once(mq, header, body, uniq, timeout, st)

    def send_async(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: SelectorLike | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
        callback: SendCallback | None = None,
    ) -> Future[SendResult]:
        """Send without waiting; the Future completes with the SendResult or the error.

        A connection failure or timeout is retried on the same broker up to
        ``retry_times_when_send_async_failed`` times, each attempt with the
        full timeout; broker error answers are not retried. ``callback(future)``
        runs on the producer's callback thread, in completion order. Errors
        found before sending (validation, no route) are raised here.

        Unless ``auto_batch`` is OFF, a message without ``queue``/``selector``
        that is not delayed (delay level, timer), not transactional and not for
        a retry topic goes in a batch of its topic: at once when nothing of the
        topic is in flight, else with what gathers until an earlier batch
        completes, at most ``batch_max_delay_ms``. Its batch is retried as
        above, and it gets its own SendResult. One whose body is compressed
        (``compress_msg_body_over_howmuch``) or whose encoded size is over
        ``batch_max_bytes`` goes alone, as does an ordered one; either goes
        after what was sent before it, so a queue stores one sender's async
        sends in the order they were made. When ``total_batch_max_bytes`` are
        pending or in flight, this waits for room, at most ``timeout_ms``, then
        raises MQClientError.
        """
        if self._msg_trace is not None:
            return self._msg_trace.traced_send(msg, self._send_async, msg, queue, selector, arg, timeout_ms, callback)
        return self._send_async(msg, queue, selector, arg, timeout_ms, callback)

    def _send_async(self, msg: Message, queue: MessageQueue | None, selector: SelectorLike | None, arg: Any,
                    timeout_ms: int | None, callback: SendCallback | None) -> Future[SendResult]:
        """:meth:`send_async` without its message trace."""
        st = None
        if self._batch_async and queue is None and selector is None:
            accumulator = self._accumulator
            if accumulator is not None and accumulator.claim_direct(msg.topic, len(msg.body)):
                return self._send_direct(msg, timeout_ms, callback, accumulator)
            fut, st = self._auto_batched(msg, self.send_msg_timeout_ms if timeout_ms is None else timeout_ms)
            if fut is not None:
                if callback is not None:
                    fut.add_done_callback(self._callback_thread().wrap(callback))
                return fut
        timeout, uniq, header, body, st = self._prepare(msg, timeout_ms, queue is not None or selector is not None,
                                                        st)
        try:
            mq = self._choose_queue(msg, queue, selector, arg)
            return self._start_async(mq, header, body, uniq, timeout, callback, st)
        except BaseException as exc:
            if st is not None:
                st.finish(exc)
            raise

    def send_oneway(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: SelectorLike | None = None,
        arg: Any = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Send and forget: no answer, no retry; the broker may or may not have stored it."""
        timeout, _uniq, header, body, st = self._prepare(msg, timeout_ms, queue is not None or selector is not None)
        with st or UNTRACED:  # the send's span ends once the request is out
            mq = self._choose_queue(msg, queue, selector, arg)
            addr = self._instance.find_master_addr(mq)
            header.queue_id = mq.queue_id
            if st is not None:
                st.attempt(addr, mq)
            self._api.send_message_oneway(addr, header, body, timeout, None if st is None else st.traceparent)

    def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_ms: int | None = None,
    ) -> SendResult:
        """Send messages of one topic as one request to one queue; retried like :meth:`send`.

        All must share a topic, none may be delayed or go to a retry topic,
        and the encoded batch must fit ``max_message_size``. The result's
        ``msg_id`` and ``offset_msg_id`` list one id per message, comma
        separated; ``queue_offset`` is the first message's.
        """
        topic, body, ids, st = self._encode_batch(msgs, queue is not None)
        timeout = self.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        with st or UNTRACED:  # the batch's span ends with the send
            if not self._running:
                self.start()
            header = self._header(None, topic)
            if queue is None:
                return self._send_sync(topic, header, body, ids, timeout, st)
            if queue.topic != topic:
                raise MQClientError(f"the queue {queue} is not a queue of topic {topic!r}",
                                    ResponseCode.MESSAGE_ILLEGAL)
            return self._send_sync_once(queue, header, body, ids, timeout, st)

    def send_batch_async(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_ms: int | None = None,
        callback: SendCallback | None = None,
    ) -> Future[SendResult]:
        """:meth:`send_batch` without waiting, retried like :meth:`send_async` (same broker).

        Keeping several batches in flight is how a producer fills a broker's pipe.
        """
        topic, body, ids, st = self._encode_batch(msgs, queue is not None)
        try:
            if not self._running:
                self.start()
            timeout = self.send_msg_timeout_ms if timeout_ms is None else timeout_ms
            if queue is not None and queue.topic != topic:
                raise MQClientError(f"the queue {queue} is not a queue of topic {topic!r}",
                                    ResponseCode.MESSAGE_ILLEGAL)
            return self._send_encoded_batch(topic, body, ids, timeout, queue, callback, st)
        except BaseException as exc:
            if st is not None:
                st.finish(exc)
            raise

    # -- internals -------------------------------------------------------------

    def _send_encoded_batch(self, topic: str, body: bytes, ids: str, timeout: int,
                            queue: MessageQueue | None = None,
                            callback: SendCallback | None = None,
                            st: SendTrace | None = None, traceparent: str | None = None,
                            in_order: bool = True) -> Future[SendResult]:
        """Send an encoded batch without waiting: to ``queue``, else to the next queue by fault-aware round robin.

        ``st`` is the batch's send span; an auto batch has none of its own (each message's send has one) and
        its request carries ``traceparent``, the first of them. ``in_order``: see :meth:`_start_async`."""
        header = self._header(None, topic)
        mq = self._fault.select_one_message_queue(self._publish_info(topic), None) if queue is None else queue
        return self._start_async(mq, header, body, ids, timeout, callback, st, traceparent, in_order)

    def _send_auto_batch(self, topic: str, parts: list[bytes], ids: str, timeout: int,
                         traceparent: str | None) -> Future[SendResult]:
        """The accumulator's sender: an auto batch goes out retried as its messages' sends would be alone. A batch
        of one message (``parts`` as :meth:`_auto_batched` made them: item header, body, properties) is sent as
        that message's own SEND_MESSAGE, which costs client and broker less than a batch of one."""
        header = self._header(None, topic)
        if len(parts) == 3:
            flag = _unpack_item_header(parts[0])[3]
            header.batch, header.flag, header.properties = False, flag, parts[2][2:].decode()
            body = parts[1]
        else:
            body = b"".join(parts)
        if self._batch_failover:
            plan = self.failover_plan(self._publish_info(topic), header, timeout, None, self._refresh_later)
            return _PlanSend(self, plan, header, body, ids, traceparent).start()
        mq = self._fault.select_one_message_queue(self._publish_info(topic), None)
        return self._start_async(mq, header, body, ids, timeout, None, None, traceparent, in_order=False)

    def _refresh_later(self, topic: str, broker: str) -> str | None:
        """A failover plan's ``refresh_addr`` that does not wait: a broker the cached route names without a master
        is refreshed in the background, and the plan moves on to another broker."""
        self._instance.request_route_refresh(topic)
        return None

    def _auto_batched(self, msg: Message, timeout: int
                      ) -> tuple[Future[SendResult] | None, SendTrace | None]:
        """Check ``msg`` and queue it for an auto batch: its Future (None when it must go alone) and its send
        span (None when tracing is off or nothing was started; one that goes alone keeps it)."""
        self._check(msg)
        if not self._running:
            self.start()
        accumulator = self._accumulator
        topic = msg.topic
        props = msg.properties
        body = msg.body
        # Alone: what a batch cannot carry (the broker refuses a batch holding a delayed or transactional
        # message, so one would spoil its batch-mates), and a body a single send compresses.
        if (accumulator is None or not _UNBATCHABLE.isdisjoint(props) or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                or len(body) >= self.compress_msg_body_over_howmuch):
            return None, None
        uniq = set_unique_id(msg)
        st = start_send(self.group, topic, (msg,))
        raw_props = encode_properties(props)
        size = BATCH_ITEM_HEADER_SIZE + 2 + len(body) + len(raw_props)
        if size > accumulator.max_item_bytes or len(raw_props) > _MAX_ITEM_PROPERTIES:
            return None, st
        # The batch item's layout (see rocketmesh.model.codec.encode_batch), the body not copied until the batch is.
        parts = (_pack_item_header(size, 0, 0, msg.flag, len(body)), body, _pack_short(len(raw_props)) + raw_props)
        try:
            if not self._route_cached(topic):
                self._publish_info(topic)  # no route: raised to the caller, as without auto batch
            fut = accumulator.add(topic, parts, size, uniq, timeout, None if st is None else st.traceparent)
        except BaseException as exc:
            if st is not None:
                st.finish(exc)
            raise
        if st is not None:
            fut.add_done_callback(st.finish_future)
        return fut, None

    def _send_direct(self, msg: Message, timeout_ms: int | None, callback: SendCallback | None,
                     accumulator: ProduceAccumulator) -> Future[SendResult]:
        """A plain async send of ``msg``, which ``accumulator.claim_direct`` let go at once (see the accumulator's
        docstring); the accumulator hears when it is done."""
        topic, size = msg.topic, len(msg.body)  # what claim_direct was told
        st = None
        try:
            timeout, uniq, header, body, st = self._prepare(msg, timeout_ms, False, None)
            mq = self._choose_queue(msg, None, None, None)
            fut = self._start_async(mq, header, body, uniq, timeout, callback, st, in_order=False)
        except BaseException as exc:
            accumulator.direct_done(topic, size)
            if st is not None:
                st.finish(exc)
            raise
        fut.add_done_callback(lambda _: accumulator.direct_done(topic, size))
        return fut

    def _route_cached(self, topic: str) -> bool:
        """True when ``topic``'s route is cached with a queue to write to (a send needs no name server call)."""
        tp = self._instance.cached_publish_info(topic)
        return tp is not None and tp.ok()

    def _prepare(self, msg: Message, timeout_ms: int | None, ordered: bool = False, st: SendTrace | None = None
                 ) -> tuple[int, str, SendMessageRequestHeader, bytes, SendTrace | None]:
        """Check ``msg``, start if needed, give it its unique id and start its send span (unless ``st`` is the
        one it has): (timeout, unique id, request header, body to send, send span or None).

        A body of ``compress_msg_body_over_howmuch`` bytes or more is sent compressed, with the COMPRESSED
        bit in the header's sysFlag; ``msg.body`` stays as it was (RocketMQ's producer restores it too)."""
        self._check(msg)
        if not self._running:
            self.start()
        timeout = self.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        uniq = set_unique_id(msg)
        if st is None:
            st = start_send(self.group, msg.topic, (msg,), ordered=ordered)  # before _header encodes the properties
        header = self._header(msg, msg.topic)
        body = msg.body
        if len(body) >= self.compress_msg_body_over_howmuch:
            body = compress_body(body, self.compress_level)
            header.sys_flag |= _SYS_COMPRESSED
        return timeout, uniq, header, body, st

    def _choose_queue(self, msg: Message, queue: MessageQueue | None, selector: SelectorLike | None,
                      arg: Any) -> MessageQueue:
        """The pinned queue, the selector's pick, or the next queue by fault-aware round robin."""
        if queue is None and selector is None:
            return self._fault.select_one_message_queue(self._publish_info(msg.topic), None)
        return self._pinned_queue(msg, queue, selector, arg)

    def _start_async(self, mq: MessageQueue, header: SendMessageRequestHeader, body: bytes, ids: str,
                     timeout: int, callback: SendCallback | None, st: SendTrace | None = None,
                     traceparent: str | None = None, in_order: bool = True) -> Future[SendResult]:
        """Send to ``mq`` without waiting; the Future completes on the answer (retried on the same broker) and
        ends ``st``, the send's span, whose context the request carries (else ``traceparent``).

        ``in_order``: the request goes out after what auto batching holds of the topic (the accumulator's own
        batches, already in its order, pass False)."""
        addr = self._instance.find_master_addr(mq)
        header.queue_id = mq.queue_id
        if st is not None:
            st.attempt(addr, mq)
            traceparent = st.traceparent
        op = _AsyncSend(self, ids, mq, addr, header, body, traceparent, timeout,
                        self.retry_times_when_send_async_failed)
        if st is not None:
            op.future.add_done_callback(st.finish_future)
        if callback is not None:
            op.future.add_done_callback(self._callback_thread().wrap(callback))
        accumulator = self._accumulator
        if in_order and accumulator is not None:
            accumulator.add_alone(mq.topic, op.invoke)
        else:
            op.invoke()
        return op.future

    def _encode_batch(self, msgs: Sequence[Message], ordered: bool = False
                      ) -> tuple[str, bytes, str, SendTrace | None]:
        """Check and encode a batch: (topic, body, comma-separated unique ids, the batch's send span or None)."""
        topic = check_batch(msgs, self.max_message_size)
        ids = ",".join(set_unique_ids(msgs))
        st = start_send(self.group, topic, msgs, ordered=ordered, batch=True)  # before the messages are encoded
        body = encode_batch(msgs)
        if len(body) > self.max_message_size:
            err = MQClientError(
                f"the batch of {len(msgs)} messages encodes to {len(body)} bytes, over the maximum of "
                f"{self.max_message_size} bytes (max_message_size); send it in smaller batches",
                ResponseCode.MESSAGE_ILLEGAL,
            )
            if st is not None:
                st.finish(err)
            raise err
        return topic, body, ids, st

    def _check(self, msg: Message) -> None:
        if type(msg) is not Message and not isinstance(msg, Message):
            check_message(msg, self.max_message_size)
        body = msg.body
        if msg.topic not in self._checked_topics or not body or len(body) > self.max_message_size:
            check_message(msg, self.max_message_size)
            if len(self._checked_topics) >= _CHECKED_TOPICS_MAX:
                self._checked_topics.clear()
            self._checked_topics.add(msg.topic)

    def _header(self, msg: Message | None, topic: str) -> SendMessageRequestHeader:
        """The send's header (queue id filled in per attempt); a batch's (``msg`` None) when no message."""
        header = SendMessageRequestHeader(self.group, topic, 0, int(_time() * 1000), self.create_topic_key,
                                          self.default_topic_queue_nums)
        if msg is None:
            header.batch = True
            return header
        header.flag = msg.flag
        props = msg.properties
        if props:
            if props.get(_TRAN_PREPARED) == "true":
                header.sys_flag = _SYS_TRAN_PREPARED
            if topic[0] == "%" and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                reconsume = props.pop(MessageConst.RECONSUME_TIME, None)
                if reconsume is not None:
                    header.reconsume_times = int(reconsume)
                max_reconsume = props.pop(MessageConst.MAX_RECONSUME_TIMES, None)
                if max_reconsume is not None:
                    header.max_reconsume_times = int(max_reconsume)
            header.properties = "".join([f"{k}\x01{v}\x02" for k, v in props.items()])
        return header

    def _publish_info(self, topic: str) -> TopicPublishInfo:
        tp = self._instance.cached_publish_info(topic)
        if tp is None or not tp.ok():
            tp = self._instance.publish_info(
                topic, create_topic_key=self.create_topic_key, default_topic_queue_nums=self.default_topic_queue_nums
            )
        return tp

    def _pinned_queue(
        self, msg: Message, queue: MessageQueue | None, selector: SelectorLike | None, arg: Any
    ) -> MessageQueue:
        if queue is not None:
            if selector is not None:
                raise MQClientError("give either queue or selector, not both")
            if not isinstance(queue, MessageQueue):
                raise MQClientError(f"queue must be a MessageQueue, got {type(queue).__name__}")
            if queue.topic != msg.topic:
                raise MQClientError(f"the queue {queue} is not a queue of the message's topic {msg.topic!r}",
                                    ResponseCode.MESSAGE_ILLEGAL)
            return queue
        if selector is None:
            raise MQClientError("give a queue or a selector")
        tp = self._publish_info(msg.topic)
        # A MessageQueueSelector's select, or the selector itself when it is a plain function.
        select = cast(Callable[[Sequence[MessageQueue], Message, Any], object], getattr(selector, "select", selector))
        mq = select(tp.message_queues, msg, arg)
        if not isinstance(mq, MessageQueue):
            raise MQClientError(f"the selector returned {mq!r}, not a MessageQueue")
        return mq

    def _send_sync(self, topic: str, header: SendMessageRequestHeader, body: bytes, uniq: str,
                   timeout_ms: int, st: SendTrace | None = None) -> SendResult:
        """RocketMQ's sendDefaultImpl for sync sends: retries on another broker, bounded by ``timeout_ms``.
        Every attempt carries ``st``'s context (the send's span, which the caller ends)."""
        plan = self.failover_plan(self._publish_info(topic), header, timeout_ms, st, self._refresh_for_addr)
        return self._run_plan(plan, header, body, uniq, None if st is None else st.traceparent)

    def _send_sync_once(self, mq: MessageQueue, header: SendMessageRequestHeader, body: bytes,
                        uniq: str, timeout_ms: int, st: SendTrace | None = None) -> SendResult:
        """One attempt to a given queue (a pinned queue or a selector's choice): no retry. The request carries
        ``st``'s context (the send's span, which the caller ends)."""
        plan = self.pinned_plan(mq, header, timeout_ms, st)
        return self._run_plan(plan, header, body, uniq, None if st is None else st.traceparent)

    def _run_plan(self, plan: SendPlan, header: SendMessageRequestHeader, body: bytes, uniq: str,
                  traceparent: str | None) -> SendResult:
        """Make the attempts ``plan`` asks for, each waiting for its answer on this thread."""
        send = self._api.send_message
        try:
            addr, mq, attempt_ms = next(plan)
            while True:
                try:
                    result = send(addr, mq, header, body, uniq, attempt_ms, traceparent)
                except MQError as err:
                    addr, mq, attempt_ms = plan.throw(err)
                else:
                    addr, mq, attempt_ms = plan.send(result)
        except StopIteration as done:
            return cast(SendResult, done.value)

    def failover_plan(self, tp: TopicPublishInfo, header: SendMessageRequestHeader, timeout_ms: int,
                      st: SendTrace | None, refresh_addr: Callable[[str, str], str | None]) -> SendPlan:
        """RocketMQ's sendDefaultImpl for sync sends, without the waiting: which attempts to make, each on another
        broker, all within ``timeout_ms``. A plan yields ``(addr, queue, attempt timeout ms)``; its driver makes
        the request (``header.queue_id`` is set) and sends the plan the SendResult, or throws it the MQError;
        the plan returns the send's result or raises its error. ``refresh_addr(topic, broker)`` finds a master
        address the route did not have (None: no master).

        One plan serves the threaded ``send`` and the asyncio one (rocketmesh.aio), so both fail over alike."""
        topic = tp.topic
        instance = self._instance
        fault = self._fault
        fault_on = fault.send_latency_fault_enable
        attempts = 1 + self.retry_times_when_send_failed
        split = tp.broker_count > 1
        begin = _monotonic()
        deadline = begin + timeout_ms / 1000.0
        last_broker: str | None = None
        last_error: MQError | None = None
        last_result: SendResult | None = None
        brokers_sent: list[str] = []
        for n in range(attempts):
            mq = fault.select_one_message_queue(tp, last_broker)
            broker = last_broker = mq.broker_name
            start = _monotonic()
            remaining_ms = int((deadline - start) * 1000)
            if remaining_ms <= 0:
                break
            brokers_sent.append(broker)
            addr = instance.master_addr(broker)
            if addr is None:
                addr = refresh_addr(topic, broker)
                if addr is None:
                    last_error = MQClientError(f"the broker {broker!r} is in no route of topic {topic!r}",
                                               ClientErrorCode.BROKER_NOT_EXIST_EXCEPTION)
                    fault.update_fault_item(broker, 0, True)
                    continue
            header.queue_id = mq.queue_id
            if st is not None:
                st.attempt(addr, mq)
            # With another broker to retry on, each attempt gets an equal share of
            # what is left: over ZeroMQ a dead broker shows only as a timeout, and
            # must not eat the retries' time. With one broker, all of it (RocketMQ's way).
            attempt_ms = remaining_ms // (attempts - n) if split else remaining_ms
            try:
                result = yield addr, mq, max(1, attempt_ms)
            except MQBrokerError as err:
                fault.update_fault_item(broker, (_monotonic() - start) * 1000, True)
                if err.response_code in RETRY_RESPONSE_CODES:
                    last_error = err
                    instance.request_route_refresh(topic)
                    if st is not None:
                        st.attempt_failed(addr, err)
                    continue
                raise
            except MQError as err:
                cause = err.__cause__
                fault.update_fault_item(broker, (_monotonic() - start) * 1000, True,
                                        reachable=cause is None)
                if isinstance(cause, RemotingConnectError):
                    instance.mark_broker_unreachable(broker)
                    instance.request_route_refresh(topic)
                elif cause is None:
                    raise  # a malformed answer: the message may be stored, a retry could store it twice
                elif instance.closed or self._closed:
                    raise MQClientError("the producer is shut down") from cause
                last_error = err
                if st is not None:
                    st.attempt_failed(addr, last_error)
                continue
            if fault_on:
                fault.update_fault_item(broker, (_monotonic() - start) * 1000, False)
            if result.send_status is not _SEND_OK and self.retry_another_broker_when_not_store_ok:
                last_result = result
                continue
            return result
        if last_result is not None:
            return last_result
        elapsed = int((_monotonic() - begin) * 1000)
        if last_error is None:
            last_error = RequestTimeoutError(
                f"send to topic {topic!r} timed out: {timeout_ms} ms passed before an attempt could be made"
            )
        last_error.add_note(
            f"send failed {len(brokers_sent)} time(s) in {elapsed} ms; topic {topic!r}, brokers tried {brokers_sent}"
        )
        raise last_error

    def pinned_plan(self, mq: MessageQueue, header: SendMessageRequestHeader, timeout_ms: int,
                    st: SendTrace | None) -> SendPlan:
        """The plan (see :meth:`failover_plan`) of a send to a given queue (pinned, or a selector's choice): one
        attempt, no retry, since another queue would break the order."""
        addr = self._instance.find_master_addr(mq)
        header.queue_id = mq.queue_id
        if st is not None:
            st.attempt(addr, mq)
        start = _monotonic()
        try:
            result = yield addr, mq, timeout_ms
        except MQBrokerError as err:
            self._fault.update_fault_item(mq.broker_name, (_monotonic() - start) * 1000, True)
            if err.response_code in RETRY_RESPONSE_CODES:
                self._instance.request_route_refresh(mq.topic)
            raise
        except MQError as err:
            cause = err.__cause__
            self._fault.update_fault_item(mq.broker_name, (_monotonic() - start) * 1000, True,
                                          reachable=cause is None)
            if isinstance(cause, RemotingConnectError):
                self._instance.mark_broker_unreachable(mq.broker_name)
            raise
        self._fault.update_fault_item(mq.broker_name, (_monotonic() - start) * 1000, False)
        return result

    def _refresh_for_addr(self, topic: str, broker: str) -> str | None:
        try:
            self._instance.update_topic_route(topic)
        except MQError:
            return None
        return self._instance.master_addr(broker)

    def _callback_thread(self) -> _CallbackThread:
        cb = self._callbacks
        if cb is None:
            with self._lock:
                if self._callbacks is None:
                    self._callbacks = _CallbackThread(f"producer-callback-{self.group}", self._log)
                cb = self._callbacks
        return cb

    def __repr__(self) -> str:
        return f"Producer(group={self.group!r}, namesrv={';'.join(self.namesrv_addrs)!r}, running={self._running})"


class _AsyncSend:
    """One async send in flight: completes its Future on the remoting I/O thread, retrying the same broker."""

    __slots__ = ("producer", "uniq", "mq", "addr", "header", "body", "traceparent", "timeout_ms", "retries_left",
                 "start", "future")

    def __init__(self, producer: Producer, uniq: str, mq: MessageQueue, addr: str, header: SendMessageRequestHeader,
                 body: bytes, traceparent: str | None, timeout_ms: int, retries: int) -> None:
        self.producer = producer
        self.uniq = uniq
        self.mq = mq
        self.addr = addr
        self.header = header
        self.body = body
        self.traceparent = traceparent
        self.timeout_ms = timeout_ms
        self.retries_left = retries
        self.future: Future[SendResult] = Future()

    def invoke(self) -> None:
        """Send (again) to the same broker."""
        self.start = _monotonic()
        try:
            self.producer._api.send_message_async(self.addr, self.mq, self.header, self.body, self.uniq,
                                                  self.timeout_ms, self.on_done, self.traceparent)
        except MQError as exc:
            self._fail(exc)

    def on_done(self, result: SendResult | None, error: MQError | None) -> None:
        """Complete the send's Future from the broker's answer."""
        # Runs on the remoting I/O thread: short, never blocking.
        if result is None:
            self._on_error(error)  # type: ignore[arg-type]
            return
        fault = self.producer._fault
        if fault.send_latency_fault_enable:
            fault.update_fault_item(self.mq.broker_name, (_monotonic() - self.start) * 1000, False)
        try:
            self.future.set_result(result)
        except InvalidStateError:  # cancelled by the caller
            pass

    def _on_error(self, err: MQError) -> None:
        producer = self.producer
        broker = self.mq.broker_name
        cause = err.__cause__
        producer._fault.update_fault_item(broker, (_monotonic() - self.start) * 1000, True,
                                          reachable=not isinstance(cause, RemotingError))
        if isinstance(cause, RemotingConnectError):
            producer._instance.mark_broker_unreachable(broker)
        closed = producer._closed or producer._instance.closed
        if (self.retries_left > 0 and not closed and not self.future.cancelled()
                and isinstance(cause, (RemotingConnectError, RemotingTimeoutError))):
            self.retries_left -= 1
            self.invoke()
            return
        self._fail(err)

    def _fail(self, err: BaseException) -> None:
        try:
            self.future.set_exception(err)
        except InvalidStateError:
            pass


class _PlanSend:
    """A send that follows a :data:`SendPlan` without waiting: each attempt's answer (on the remoting I/O thread)
    moves the plan on, to the next attempt or to the outcome of its Future. The plan must not block (its
    ``refresh_addr`` asks for a refresh and moves on)."""

    __slots__ = ("send", "plan", "header", "body", "ids", "traceparent", "future")

    def __init__(self, producer: Producer, plan: SendPlan, header: SendMessageRequestHeader, body: bytes, ids: str,
                 traceparent: str | None) -> None:
        self.send = producer._api.send_message_async
        self.plan = plan
        self.header = header
        self.body = body
        self.ids = ids
        self.traceparent = traceparent
        self.future: Future[SendResult] = Future()

    def start(self) -> Future[SendResult]:
        """Make the first attempt; the send's Future."""
        try:
            step = next(self.plan)
        except BaseException as exc:  # noqa: BLE001 - the plan's error is the send's
            self.future.set_exception(exc)
            return self.future
        self._attempt(step)
        return self.future

    def _attempt(self, step: tuple[str, MessageQueue, int]) -> None:
        addr, mq, attempt_ms = step
        try:  # the plan set the header's queue id for this attempt
            self.send(addr, mq, self.header, self.body, self.ids, attempt_ms, self.on_done, self.traceparent)
        except MQError as exc:
            self.on_done(None, exc)

    def on_done(self, result: SendResult | None, error: MQError | None) -> None:
        """Move the plan on with an attempt's answer."""
        try:
            step = self.plan.send(result) if error is None else self.plan.throw(error)  # type: ignore[arg-type]
        except StopIteration as done:
            outcome = cast(SendResult, done.value)
            try:
                self.future.set_result(outcome)
            except InvalidStateError:
                pass
            return
        except BaseException as exc:  # noqa: BLE001 - the plan's error is the send's
            try:
                self.future.set_exception(exc)
            except InvalidStateError:
                pass
            return
        self._attempt(step)


class _CallbackThread:
    """Runs user callbacks of async sends, one at a time, off the remoting I/O thread."""

    def __init__(self, name: str, log: Any) -> None:
        self._queue: queue_mod.SimpleQueue[tuple[SendCallback, Future] | None] = queue_mod.SimpleQueue()
        self._log = log
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def wrap(self, callback: SendCallback) -> Callable[[Future], None]:
        """A done-callback that queues ``callback(future)`` for this thread."""
        put = self._queue.put
        return lambda fut: put((callback, fut))

    def _run(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            callback, fut = item
            try:
                callback(fut)
            except Exception:  # noqa: BLE001 - a user's callback must not kill the thread
                self._log.exception("send_callback_failed")

    def stop(self, timeout_s: float) -> None:
        """Run the callbacks already queued, then end (waits at most ``timeout_s``)."""
        self._queue.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
