"""AsyncProducer: the Producer for asyncio programs.

    async with AsyncProducer("orders-producer", "127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"..."))

It drives a threaded :class:`~rocketmesh.client.producer.producer.Producer` (same settings, same
checks, compression, unique ids, spans, msgTrace and fault tolerance) without its waits: each attempt
goes out through the client's remoting I/O thread on the one connection per broker that every send
shares, and its answer wakes the loop (:class:`~rocketmesh.aio.bridge.LoopInbox`). ``send`` fails over
to another broker exactly as ``Producer.send`` does (the same plan of attempts). Concurrent sends of a
topic are coalesced into batch requests (auto batching, on by default as for ``Producer.send_async``),
and a batch fails over as each of its sends would. Work that must ask a name server first (a topic's
first route, ``start``, ``stop``) runs in a worker thread, so the loop never waits on the network.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from rocketmesh.aio.bridge import Deadlines, LoopInbox, start_in_thread
from rocketmesh.client.errors import MQClientError, MQError, RequestTimeoutError
from rocketmesh.client.producer.accumulator import AutoBatch, ProduceAccumulator
from rocketmesh.client.producer.producer import Producer, SelectorLike, SendPlan
from rocketmesh.client.results import SendResult
from rocketmesh.client.trace.tracing import UNTRACED, SendTrace
from rocketmesh.client.validators import check_topic
from rocketmesh.model.message import Message, MessageQueue
from rocketmesh.remoting.protocol.headers import SendMessageRequestHeader


def _batch_item_bound(msg: Message) -> int:
    """At least the bytes ``msg`` takes in an auto batch (its item as encoded, with the unique id and trace
    context a send adds), without encoding it."""
    props = sum(len(k.encode()) + len(v.encode()) + 2 for k, v in msg.properties.items())
    return _ITEM_OVERHEAD + len(msg.body) + props


#: An item's header and length fields, a UNIQ_KEY and a traceparent property, with room to spare.
_ITEM_OVERHEAD = 256


class AsyncProducer:
    """Sends messages of one producer group from asyncio code.

    Takes :class:`~rocketmesh.client.producer.producer.Producer`'s arguments and defaults, and raises its
    errors (MQClientError, MQBrokerError, RequestTimeoutError). ``await start()`` (or ``async with``) before
    the first send, ``await stop()`` at the end. Sends may come from any number of tasks of the loop that
    started the producer; none holds a thread while it waits.

    ``auto_batch=AutoBatch.ASYNC`` (or ``ALL``/True) coalesces the sends of concurrent tasks to one topic into
    batch requests: a send goes at once when nothing of its topic is in flight, else with what gathered while
    earlier ones were in flight (at most ``batch_max_delay_ms``). Each still gets its own SendResult, and a
    failed batch fails over to another broker as each of its sends would alone. It is off by default here
    (``AutoBatch.OFF``, unlike the threaded Producer's ``send_async``): a batch's answers resume all its
    tasks in one turn of the loop, which then runs their next sends back to back, and on a slow machine that
    held the loop past 20 ms.
    """

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, **settings: Any) -> None:
        settings.setdefault("auto_batch", AutoBatch.OFF)
        self._producer = self._new_producer(group, namesrv, settings)
        # An auto batch's sends are this class's sends, which fail over to another broker: so does the batch.
        self._producer._batch_failover = True
        self._inbox: LoopInbox | None = None
        self._deadlines: Deadlines | None = None  # made on the loop by the first auto-batched send

    @staticmethod
    def _new_producer(group: str, namesrv: str | Sequence[str] | None, settings: dict[str, Any]) -> Producer:
        return Producer(group, namesrv, **settings)

    # -- life cycle ------------------------------------------------------------

    @property
    def group(self) -> str:
        """The producer group."""
        return self._producer.group

    @property
    def producer(self) -> Producer:
        """The threaded Producer underneath (for settings and introspection; do not send through it from the
        loop: its waits would block the loop)."""
        return self._producer

    @property
    def running(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._inbox is not None and self._producer.running

    async def start(self) -> AsyncProducer:
        """Join the client instance and register the group (in a worker thread); returns self. Cancelled, it
        leaves the producer shut down (nothing registered): create a new one."""
        if self._inbox is not None:
            return self
        loop = asyncio.get_running_loop()
        # A cancelled start shuts the producer down once its thread is done: create a new one to try again.
        await start_in_thread(self._producer.start, self._producer.shutdown)
        self._inbox = LoopInbox(loop)
        return self

    async def stop(self, timeout_s: float = 3.0) -> None:
        """Send what auto batching holds, unregister the group and leave the client instance (in a worker
        thread, bounded by ``timeout_s``). Sends still awaiting answers fail with MQClientError."""
        await asyncio.to_thread(self._producer.shutdown, timeout_s)

    async def __aenter__(self) -> AsyncProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _loop_inbox(self) -> LoopInbox:
        inbox = self._inbox
        if inbox is None:
            raise MQClientError("the producer is not started: await producer.start() (or use async with) first")
        if asyncio.get_running_loop() is not inbox.loop:
            raise MQClientError("the producer belongs to the event loop that started it; send from that loop")
        return inbox

    async def message_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send to ``topic`` may go to (asks the name server the first time, in a worker thread)."""
        check_topic(topic)
        self._loop_inbox()
        await self._ensure_route(topic)
        return self._producer.message_queues(topic)

    async def _ensure_route(self, topic: str) -> None:
        """Have ``topic``'s publish route cached: a worker thread asks the name server when it is not."""
        if not self._producer._route_cached(topic):
            await asyncio.to_thread(self._producer._publish_info, topic)

    # -- sends -----------------------------------------------------------------

    async def send(self, msg: Message, *, queue: MessageQueue | None = None, selector: SelectorLike | None = None,
                   arg: Any = None, timeout_ms: int | None = None) -> SendResult:
        """Send and await the broker's answer: :meth:`Producer.send`'s semantics (failover to another broker
        within ``timeout_ms``; a ``queue`` or ``selector`` pins the queue and is not retried elsewhere; delay
        levels and timers as message properties; auto batching when on)."""
        p = self._producer
        tracer = p._msg_trace
        if tracer is None:
            return await self._send(msg, queue, selector, arg, timeout_ms)
        begin = int(time.time() * 1000)
        try:
            result = await self._send(msg, queue, selector, arg, timeout_ms)
        except BaseException:
            tracer.pub(msg, None, begin)
            raise
        tracer.pub(msg, result, begin)
        return result

    async def _send(self, msg: Message, queue: MessageQueue | None, selector: SelectorLike | None, arg: Any,
                    timeout_ms: int | None) -> SendResult:
        p = self._producer
        inbox = self._loop_inbox()
        p._check(msg)
        await self._ensure_route(msg.topic)
        timeout = p.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        st: SendTrace | None = None
        if p._batch_async and queue is None and selector is None:
            accumulator = p._accumulator
            if accumulator is not None and accumulator.claim_direct(msg.topic, len(msg.body)):
                return await self._send_direct(inbox, msg, timeout_ms, accumulator)
            if accumulator is not None and not accumulator.has_room(_batch_item_bound(msg)):
                # Waiting for room is a wait on other sends' answers: a worker thread's, not the loop's.
                batched, st = await asyncio.to_thread(p._auto_batched, msg, timeout)
            else:
                batched, st = p._auto_batched(msg, timeout)
            if batched is not None:
                return await self._batched_result(inbox, batched, timeout, msg.topic)
        ordered = queue is not None or selector is not None
        timeout, uniq, header, body, st = p._prepare(msg, timeout_ms, ordered, st)
        with st or UNTRACED:  # the send's span ends with the send
            if ordered:
                plan = p.pinned_plan(p._pinned_queue(msg, queue, selector, arg), header, timeout, st)
            else:
                plan = p.failover_plan(p._publish_info(msg.topic), header, timeout, st, p._refresh_later)
            return await self._run_plan(inbox, plan, header, body, uniq, None if st is None else st.traceparent,
                                        _after_held(p._accumulator, msg.topic))

    async def _send_direct(self, inbox: LoopInbox, msg: Message, timeout_ms: int | None,
                           accumulator: ProduceAccumulator) -> SendResult:
        """A plain send of ``msg``, which ``accumulator.claim_direct`` let go at once (see the accumulator's
        docstring); the accumulator hears when it is done. Its first attempt goes out on the remoting
        client's socket, as batches do, so nothing of its topic sent after it overtakes it."""
        p = self._producer
        topic, size = msg.topic, len(msg.body)  # what claim_direct was told
        try:
            timeout, uniq, header, body, st = p._prepare(msg, timeout_ms, False, None)
            with st or UNTRACED:  # the send's span ends with the send
                plan = p.failover_plan(p._publish_info(topic), header, timeout, st, p._refresh_later)
                return await self._run_plan(inbox, plan, header, body, uniq, None if st is None else st.traceparent,
                                            _at_once)
        finally:
            accumulator.direct_done(topic, size)

    async def send_batch(self, msgs: Sequence[Message], *, queue: MessageQueue | None = None,
                         timeout_ms: int | None = None) -> SendResult:
        """Send messages of one topic as one request to one queue, as :meth:`Producer.send_batch` does (failover
        to another broker unless ``queue`` pins it)."""
        p = self._producer
        inbox = self._loop_inbox()
        topic, body, ids, st = p._encode_batch(msgs, queue is not None)  # checks the batch first
        timeout = p.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        with st or UNTRACED:  # the batch's span ends with the send
            await self._ensure_route(topic)
            header = p._header(None, topic)
            if queue is None:
                plan = p.failover_plan(p._publish_info(topic), header, timeout, st, p._refresh_later)
            else:
                if queue.topic != topic:
                    raise MQClientError(f"the queue {queue} is not a queue of topic {topic!r}")
                plan = p.pinned_plan(queue, header, timeout, st)
            return await self._run_plan(inbox, plan, header, body, ids, None if st is None else st.traceparent,
                                        _after_held(p._accumulator, topic))

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None,
                          selector: SelectorLike | None = None, arg: Any = None,
                          timeout_ms: int | None = None) -> None:
        """Send and forget (:meth:`Producer.send_oneway`): no answer, no retry."""
        self._loop_inbox()
        await self._ensure_route(msg.topic)
        # The request is queued on a socket without blocking; nothing here waits on the network.
        self._producer.send_oneway(msg, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms)

    async def _batched_result(self, inbox: LoopInbox, batched: concurrent.futures.Future[SendResult], timeout_ms: int,
                              topic: str) -> SendResult:
        """The answer to an auto-batched message: its batch's Future completes on the I/O thread, which hands it
        to the loop through the inbox (one wake-up per burst); RequestTimeoutError after ``timeout_ms``."""
        fut, done = inbox.future()
        batched.add_done_callback(lambda f: done(None, f.exception()) if f.exception() else done(f.result(), None))
        deadlines = self._deadlines
        if deadlines is None:
            deadlines = self._deadlines = Deadlines(inbox.loop)
        deadlines.add(fut, timeout_ms / 1000.0, lambda: RequestTimeoutError(
            f"send to topic {topic!r} timed out: no answer to its batch within {timeout_ms} ms"))
        result: SendResult = await fut
        return result

    # -- the plan's driver -----------------------------------------------------

    async def _run_plan(self, inbox: LoopInbox, plan: SendPlan, header: SendMessageRequestHeader, body: bytes,
                        uniq: str, traceparent: str | None, first: FirstAttempt | None) -> SendResult:
        """Make the attempts ``plan`` asks for, awaiting each answer on the loop. The first attempt goes out
        through ``first`` on the socket auto batching sends on (:func:`_after_held` or :func:`_at_once`), when
        given; any other attempt goes out on the loop's own socket, so neither it nor its answer crosses a
        thread."""
        api = self._producer.instance.api
        send = api.send_message_async
        try:
            addr, mq, attempt_ms = next(plan)
            while True:
                try:
                    if first is not None:
                        fut, done = inbox.future()
                        first(partial(_send_or_report, send, done, addr, mq, header, body, uniq, attempt_ms,
                                      traceparent))
                        first = None  # a retry goes at once, on the loop's socket
                        result: SendResult = await fut
                    else:
                        result = await api.send_message_from_loop(addr, mq, header, body, uniq, attempt_ms,
                                                                  traceparent)
                except MQError as err:
                    addr, mq, attempt_ms = plan.throw(err)
                else:
                    addr, mq, attempt_ms = plan.send(result)
        except StopIteration as finished:
            outcome: SendResult = finished.value
            return outcome
        finally:
            plan.close()

    def __repr__(self) -> str:
        return f"AsyncProducer(group={self.group!r}, running={self.running})"


#: How a send's first attempt leaves on the socket auto batching sends on: given the attempt, it runs it (now, or
#: after what is held).
FirstAttempt = Callable[[Callable[[], object]], object]


def _after_held(accumulator: ProduceAccumulator | None, topic: str) -> FirstAttempt | None:
    """The first attempt goes after what auto batching holds of ``topic`` (a queue keeps the order of sends);
    None without auto batching."""
    return None if accumulator is None else partial(accumulator.add_alone, topic)


def _at_once(attempt: Callable[[], object]) -> None:
    """The first attempt goes at once (a lone message that ``claim_direct`` let go: nothing is held)."""
    attempt()


def _send_or_report(send: Callable[..., None], done: Callable[[Any, BaseException | None], None], addr: str,
                    mq: MessageQueue, header: SendMessageRequestHeader, body: bytes, uniq: str, timeout_ms: int,
                    traceparent: str | None) -> None:
    """``send`` an attempt whose answer ``done`` takes; an error raised at once goes to ``done`` too (the attempt
    may run on another thread, after what auto batching held)."""
    try:
        send(addr, mq, header, body, uniq, timeout_ms, done, traceparent)
    except MQError as exc:
        done(None, exc)
