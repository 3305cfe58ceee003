"""Auto batching of a producer's single sends (RocketMQ 5's ProduceAccumulator).

A :class:`Producer` (and an ``AsyncProducer`` with auto batching on) hands each batchable async send to a
:class:`ProduceAccumulator` (on by default for ``send_async``, see ``Producer``'s ``auto_batch``), which keeps a
pending list per topic and sends it as one SEND_BATCH_MESSAGE. Each message still
gets a Future of its own SendResult. A topic's pending list is sent:

- at once when nothing of that topic is in flight (no added latency at low load). Such a message
  does not enter a list at all: the producer sends it as a plain single send that counts as the
  topic's request in flight (:meth:`ProduceAccumulator.claim_direct`), which costs no more than a send
  with auto batching off. So does one that comes while one request of its topic is in flight, when
  the last list held back for the topic carried a single message: holding gathers nothing for a topic
  whose next message rarely comes before its answer (a producer of many topics), so such a topic may
  have two requests in flight and is held again only beyond them, which tells whether gathering pays;
- when the next message would take it over ``batch_max_bytes`` (a full batch goes at once);
- when the last batch of the topic in flight completes (what gathered meanwhile goes next);
- at the latest ``batch_max_delay_ms`` after its first message came (a timer thread, woken
  once per pending list, not per message);
- when a send of the topic that goes alone comes (:meth:`ProduceAccumulator.add_alone`);
- when the producer shuts down, or when a send waits for room under ``total_batch_max_bytes``.

So under load batches form by themselves while earlier ones are in flight,
and the delay is only an upper bound. ``total_batch_max_bytes`` bounds the
encoded bytes pending or in flight (a message sent at once as a plain send holds its body's); a send
that would go over waits for room, at most its send timeout, then fails with :class:`MQClientError`.

Order: whatever leaves the accumulator (batches, and the sends of its topics that
go alone) goes through one outbox, sent by one thread at a time in the order it
was queued, so the requests of one sender reach the remoting client in the order
of its calls, and a queue stores one sender's messages in the order it sent them. A message sent at
once as a plain send bypasses the outbox only while it is empty and nothing of its topic is pending, so
it overtakes nothing.
A batch that a completion releases is sent by the completing thread, most often
the remoting I/O thread, with no other thread woken: the remoting client sends a
request made there after the ones other threads handed it before.
"""

from __future__ import annotations

import collections
import enum
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from functools import partial

from rocketmesh.client.errors import MQClientError
from rocketmesh.client.results import SendResult

#: ``send(topic, parts, ids, timeout_ms, traceparent)``: send the messages whose encoded batch items are ``parts``
#: joined (what :meth:`ProduceAccumulator.add` was given, message after message), a Future of their SendResult
#: (one message's may go as a single send); the request carries ``traceparent`` (the first traced message's
#: send span), when not None.
BatchSender = Callable[[str, list[bytes], str, int, str | None], "Future[SendResult]"]

_monotonic = time.monotonic
_TOPICS_KEPT = 1024
#: Requests of a topic in flight before its sends are held back, for a topic whose last held list carried
#: one message (see the module docstring); a topic that gathers holds from its first request in flight.
_EAGER_INFLIGHT = 2


class AutoBatch(enum.Enum):
    """Which single sends a Producer coalesces into batch requests (its ``auto_batch`` setting)."""

    #: None: every send is its own request.
    OFF = "off"
    #: ``send_async`` (and AsyncProducer's sends): the default.
    ASYNC = "async"
    #: ``send`` too, as RocketMQ 5's ``setAutoBatch(true)`` does (``auto_batch=True``).
    ALL = "all"

    @classmethod
    def of(cls, value: AutoBatch | bool) -> AutoBatch:
        """The mode a setting names: an AutoBatch, or True (ALL, RocketMQ 5's autoBatch) / False (OFF);
        MQClientError for anything else."""
        if value is True:
            return cls.ALL
        if value is False:
            return cls.OFF
        if isinstance(value, cls):
            return value
        raise MQClientError(f"auto_batch must be an AutoBatch, True or False, got {value!r}")


@dataclass(slots=True)
class _Topic:
    """One topic's pending messages (the parts of their encoded batch items) and its batches in flight."""

    topic: str
    parts: list[bytes] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    futures: list[Future[SendResult]] = field(default_factory=list)
    size: int = 0
    timeout_ms: int = 0
    since: float = 0.0
    inflight: int = 0
    traceparent: str | None = None
    #: The last list held back while the topic had a request in flight gathered more than one message.
    gathers: bool = True

    def holds(self) -> bool:
        """Its next message joins a list rather than go at once: one is pending, or its requests in flight
        are as many as it may have before it holds (one while holding gathers, ``_EAGER_INFLIGHT`` while not)."""
        return bool(self.futures) or (self.inflight > 0 and (self.gathers or self.inflight >= _EAGER_INFLIGHT))


@dataclass(slots=True)
class _Batch:
    """A pending list taken out for sending."""

    topic: _Topic
    parts: list[bytes]
    ids: list[str]
    futures: list[Future[SendResult]]
    size: int
    timeout_ms: int
    traceparent: str | None


class ProduceAccumulator:
    """Per-topic pending lists of encoded messages, sent as batches by ``send`` (see the module docstring).

    Thread-safe. ``add`` and ``add_alone`` may wait for room: call them off the remoting I/O thread.
    """

    def __init__(self, send: BatchSender, *, batch_max_delay_ms: int, batch_max_bytes: int,
                 total_batch_max_bytes: int, name: str = "producer") -> None:
        self._send_batch = send
        self._delay_s = batch_max_delay_ms / 1000.0
        self._max_bytes = batch_max_bytes
        self._total_bytes = total_batch_max_bytes
        self._topics: dict[str, _Topic] = {}
        self._held = 0  # encoded bytes pending or in flight
        self._lock = threading.Lock()
        self._timer_cv = threading.Condition(self._lock)
        self._space_cv = threading.Condition(self._lock)
        self._space_waiters = 0
        self._timer_idle = True
        self._flush_all = False
        self._closed = False
        # What leaves, in order: batches, and sends that go alone (callables). One thread drains at a time.
        self._outbox: collections.deque[_Batch | Callable[[], object]] = collections.deque()
        self._draining = False
        self._thread = threading.Thread(target=self._run, name=f"auto-batch-{name}", daemon=True)
        self._thread.start()

    @property
    def max_item_bytes(self) -> int:
        """The largest encoded message that is batched; larger ones should be sent alone."""
        return self._max_bytes

    def add(self, topic: str, parts: Sequence[bytes], size: int, uniq: str, timeout_ms: int,
            traceparent: str | None = None) -> Future[SendResult]:
        """Queue one encoded message: ``parts`` are its batch item's bytes (``size`` of them in all), ``uniq``
        its unique id, ``traceparent`` the context of its send span. Its SendResult's Future.

        Waits for room under ``total_batch_max_bytes`` at most ``timeout_ms``,
        then raises MQClientError; raises MQClientError once closed.
        """
        fut: Future[SendResult] = Future()
        with self._lock:
            if self._held + size > self._total_bytes and self._held:
                self._wait_for_room(size, timeout_ms)
            elif self._closed:
                raise MQClientError("the producer is shut down")
            st = self._topics.get(topic)
            if st is None:
                st = self._topics[topic] = _Topic(topic)
            if st.futures and st.size + size > self._max_bytes:
                self._outbox.append(self._take(st))
            if not st.futures:
                st.since = _monotonic()
                st.timeout_ms = timeout_ms
                if st.inflight and self._timer_idle:
                    self._timer_idle = False
                    self._timer_cv.notify()
            elif timeout_ms < st.timeout_ms:
                st.timeout_ms = timeout_ms
            if st.traceparent is None:
                st.traceparent = traceparent
            st.parts += parts
            st.ids.append(uniq)
            st.futures.append(fut)
            st.size += size
            self._held += size
            if not st.inflight:
                self._outbox.append(self._take(st))
            drain = self._claim()
        if drain:
            self._drain()
        return fut

    def claim_direct(self, topic: str, size: int) -> bool:
        """True when a message of ``topic`` (``size`` bytes) is to be sent at once as a plain single send, not
        queued: nothing of the topic is pending or waiting to leave, it has no request in flight (or one, when
        holding gathers nothing for it), and ``size`` more bytes fit ``total_batch_max_bytes``. The send then
        counts as in flight and holds its bytes: the caller must call :meth:`direct_done` with the same
        ``size`` once it completed or failed. False once closed."""
        st = self._topics.get(topic)
        if st is not None and st.holds():
            return False  # read without the lock: a stale answer only sends the message through add()
        with self._lock:
            if (self._closed or self._outbox or self._draining
                    or (self._held and self._held + size > self._total_bytes)):
                return False
            st = self._topics.get(topic)
            if st is None:
                st = self._topics[topic] = _Topic(topic)
            elif st.holds():
                return False
            st.inflight += 1
            self._held += size
            return True

    def direct_done(self, topic: str, size: int) -> None:
        """A send :meth:`claim_direct` allowed completed: its bytes are free, and what gathered of ``topic``
        meanwhile may go."""
        with self._lock:
            drain = self._finished(self._topics[topic], size)
        if drain:
            self._drain()

    def add_alone(self, topic: str, send: Callable[[], object]) -> None:
        """Run ``send``, a send of ``topic`` that goes alone (ordered, too large, compressed ...), after what is
        pending of ``topic`` has been sent: so a queue stores one sender's messages in the order it sent them.
        ``send`` runs on this thread, or on the thread sending what was queued before it; it must not raise."""
        with self._lock:
            st = self._topics.get(topic)
            if st is not None and st.futures:
                self._outbox.append(self._take(st))
            self._outbox.append(send)
            drain = self._claim()
        if drain:
            self._drain()

    def has_room(self, n: int) -> bool:
        """Whether :meth:`add` of ``n`` encoded bytes would queue them without waiting for room now."""
        with self._lock:
            return not self._held or self._held + n <= self._total_bytes

    def close(self, timeout_s: float) -> bool:
        """Send everything pending and wait (at most ``timeout_s``) until it completed; True when it did."""
        with self._lock:
            if self._closed:
                return self._held == 0
            self._closed = True
            self._outbox.extend([self._take(st) for st in self._topics.values() if st.futures])
            self._timer_cv.notify()
            drain = self._claim()
        if drain:
            self._drain()
        with self._lock:
            self._space_waiters += 1
            try:
                return self._space_cv.wait_for(lambda: self._held == 0, timeout_s)
            finally:
                self._space_waiters -= 1

    # -- internals (the lock is held where noted) --------------------------------

    def _wait_for_room(self, n: int, timeout_ms: int) -> None:
        """Lock held: wait until ``n`` more bytes fit, having everything pending sent meanwhile."""
        deadline = _monotonic() + timeout_ms / 1000.0
        self._space_waiters += 1
        try:
            while self._held and self._held + n > self._total_bytes and not self._closed:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    raise MQClientError(
                        f"auto batch: {self._held} bytes are pending or in flight and {n} more do not fit "
                        f"total_batch_max_bytes={self._total_bytes}; no room within {timeout_ms} ms")
                self._flush_all = True
                self._timer_idle = False
                self._timer_cv.notify()
                self._space_cv.wait(remaining)
        finally:
            self._space_waiters -= 1
        if self._closed:
            raise MQClientError("the producer is shut down")

    def _release(self, st: _Topic) -> _Batch:
        """Lock held: take ``st``'s list, held back while the topic had a request in flight, out as a batch;
        whether it gathered more than one message says whether holding the topic's sends pays."""
        st.gathers = len(st.futures) > 1
        return self._take(st)

    def _take(self, st: _Topic) -> _Batch:
        """Lock held: take ``st``'s pending list out as a batch in flight."""
        b = _Batch(st, st.parts, st.ids, st.futures, st.size, st.timeout_ms, st.traceparent)
        st.parts, st.ids, st.futures, st.size, st.traceparent = [], [], [], 0, None
        st.inflight += 1
        return b

    def _claim(self) -> bool:
        """Lock held: True when the caller is to drain the outbox (it holds something and nobody drains it)."""
        if self._draining or not self._outbox:
            return False
        self._draining = True
        return True

    def _drain(self) -> None:
        """Send what the outbox holds, in order, until it is empty (the caller claimed it)."""
        outbox = self._outbox
        while True:
            with self._lock:
                if not outbox:
                    self._draining = False
                    return
                items = list(outbox)
                outbox.clear()
            for item in items:
                if type(item) is _Batch:
                    self._send(item)
                else:
                    item()  # type: ignore[operator]

    def _send(self, b: _Batch) -> None:
        try:
            fut = self._send_batch(b.topic.topic, b.parts, ",".join(b.ids), b.timeout_ms, b.traceparent)
        except Exception as exc:  # noqa: BLE001 - no route, no broker ...: every message's Future gets it
            self._complete(b, None, exc)
            return
        fut.add_done_callback(partial(self._on_done, b))

    def _on_done(self, b: _Batch, fut: Future[SendResult]) -> None:
        exc = fut.exception()
        self._complete(b, None if exc is not None else fut.result(), exc)

    def _complete(self, b: _Batch, result: SendResult | None, exc: BaseException | None) -> None:
        """Give each message its own SendResult (or the batch's error); what gathered meanwhile goes next."""
        futures = b.futures
        if result is not None:
            offset_ids = result.offset_msg_id.split(",")
            if len(offset_ids) != len(futures):
                exc = MQClientError(f"the batch of {len(futures)} messages got {len(offset_ids)} ids back: "
                                    f"{result.offset_msg_id!r}")
            else:
                status, mq, first = result.send_status, result.message_queue, result.queue_offset
                tid, region, ids = result.transaction_id, result.region_id, b.ids
                for i, f in enumerate(futures):
                    try:
                        f.set_result(SendResult(status, ids[i], offset_ids[i], mq, first + i, tid, region))
                    except InvalidStateError:  # cancelled by the caller
                        pass
        if exc is not None:
            for f in futures:
                try:
                    f.set_exception(exc)
                except InvalidStateError:
                    pass
        st = b.topic
        with self._lock:
            drain = self._finished(st, b.size)
        if drain:
            self._drain()

    def _finished(self, st: _Topic, size: int) -> bool:
        """Lock held: a request of ``st`` holding ``size`` bytes completed (a batch, or a plain send
        :meth:`claim_direct` allowed): free its bytes, let what gathered meanwhile go; True when the caller
        is to drain the outbox."""
        st.inflight -= 1
        self._held -= size
        if self._space_waiters:
            self._space_cv.notify_all()
        if st.futures:
            if not st.inflight:
                self._outbox.append(self._release(st))  # what gathered while it was in flight
        elif not st.inflight and len(self._topics) > _TOPICS_KEPT:
            del self._topics[st.topic]  # a producer of many topics keeps only the busy ones
        return self._claim()

    def _run(self) -> None:
        """The timer thread: sends pending lists at their deadline, or all of them when asked."""
        while True:
            with self._lock:
                while True:
                    if self._closed:
                        return  # close() sends what is left
                    now = _monotonic()
                    flush_all, self._flush_all = self._flush_all, False
                    wake: float | None = None
                    taken = False
                    for st in self._topics.values():
                        if not st.futures:
                            continue
                        deadline = st.since + self._delay_s
                        if flush_all or deadline <= now:
                            self._outbox.append(self._release(st))
                            taken = True
                        elif wake is None or deadline < wake:
                            wake = deadline
                    drain = self._claim()
                    if drain or taken:
                        break
                    self._timer_idle = wake is None
                    self._timer_cv.wait(None if wake is None else wake - now)
            if drain:
                self._drain()
