"""PullConsumer: the application polls for messages (RocketMQ's DefaultLitePullConsumer).

    with PullConsumer("reports", "127.0.0.1:9876") as consumer:   # start() on enter
        consumer.subscribe("Orders")          # rebalanced among the group, or consumer.assign([...])
        while True:
            for msg in consumer.poll(timeout_ms=1000):
                handle(msg)

Queues are pulled in the background into a bounded cache; ``poll`` returns
the next batch. With ``auto_commit`` (the default) the offsets of what earlier
polls returned are committed every ``auto_commit_interval_ms`` at the next
poll, so a message is committed only after the application asked for more;
without it, call ``commit()``. ``seek`` and ``seek_to_time`` move a queue.
"""

from __future__ import annotations

import collections
import queue as queue_mod
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rocketmesh.client import exit_hooks
from rocketmesh.client.consumer.core import PULL_DELAY_WHEN_FLOW_CONTROL_MS, ConsumerCore, ConsumerHooks, PullRequest
from rocketmesh.client.consumer.offset_store import ReadOffsetType
from rocketmesh.client.consumer.options import PullConsumerOptions, options_from
from rocketmesh.client.consumer.process_queue import ProcessQueue
from rocketmesh.client.consumer.rebalance import readable_queues
from rocketmesh.client.errors import ClientErrorCode, MQClientError
from rocketmesh.client.producer.producer import Producer
from rocketmesh.client.trace.msg_trace import MsgTracer
from rocketmesh.model.message import MessageExt, MessageQueue

_MiB = 1024 * 1024


@dataclass(slots=True)
class _Batch:
    req: PullRequest
    messages: list[MessageExt]
    #: How many of ``messages`` were handed out already (a poll with ``max_records`` took part of the batch).
    taken: int = 0

    @property
    def left(self) -> int:
        return len(self.messages) - self.taken


class PullConsumer:
    """See the module docstring. Settings are RocketMQ's DefaultLitePullConsumer ones, snake_case: give
    them as keywords (``pull_batch_size=32``) or as ``options=PullConsumerOptions(...)``; each is checked
    here, MQClientError naming what is wrong."""

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 options: PullConsumerOptions | None = None, **settings: Any) -> None:
        o: PullConsumerOptions = options_from(PullConsumerOptions, options, settings)
        #: The settings (see PullConsumerOptions for each one's meaning and default).
        self.options = o
        self.auto_commit = o.auto_commit
        self.auto_commit_interval_s = o.auto_commit_interval_ms / 1000.0
        # The core persists only what it is given: with auto commit, poll() hands it what earlier polls
        # returned every auto_commit_interval_ms; without, commit() does. So the core never commits on its
        # own here, and a batch the application is still working on is never committed.
        core_options = o.replace(pull_interval_ms=0, persist_consumer_offset_interval_ms=(
            o.auto_commit_interval_ms if o.auto_commit else 3_600_000))
        self._core = ConsumerCore(
            group, namesrv, core_options,
            ConsumerHooks(deliver=self._deliver, can_pull=self._flow_control, on_queue_removed=self._on_queue_removed),
            consume_type="CONSUME_ACTIVELY", auto_commit=False, receive_spans=True)
        self._cache: queue_mod.SimpleQueue[_Batch] = queue_mod.SimpleQueue()
        #: A batch a poll took only part of: its rest comes before anything in the cache.
        self._front: collections.deque[_Batch] = collections.deque()
        self._cached = 0
        self._on_arrival: Callable[[], None] | None = None
        self._assigned: list[MessageQueue] | None = None
        self._next_auto_commit = 0.0
        self._lock = threading.Lock()
        self._started = False
        #: RocketMQ's message trace of what polls return (enable_msg_trace); started by start().
        self._msg_trace: MsgTracer | None = MsgTracer(
            group, namesrv, o.trace_topic, new_producer=Producer, instance_name=o.instance_name,
            access_key=o.access_key, secret_key=o.secret_key) if o.enable_msg_trace else None

    @property
    def group(self) -> str:
        return self._core.group

    # --- what to consume ---

    def subscribe(self, topic: str, expression: str | None = "*", *, sql: str | None = None) -> None:
        """Consume ``topic`` as a member of the group (queues rebalanced among its clients)."""
        if self._assigned is not None:
            raise MQClientError("subscribe and assign are mutually exclusive")
        self._core.subscribe(topic, expression, sql)

    def unsubscribe(self, topic: str) -> None:
        self._core.unsubscribe(topic)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly ``queues`` (no rebalance); the group's stored offsets are still used."""
        if self._core.subscriptions and self._assigned is None:
            raise MQClientError("subscribe and assign are mutually exclusive")
        queues = sorted(set(queues))
        self._assigned = queues
        self._core.use_rebalance = False
        for mq in queues:
            if mq.topic not in self._core.subscriptions:
                self._core.subscriptions[mq.topic] = self._core._assigned_subscription(mq.topic)
        if self._started:
            self._apply_assignment()

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (for ``assign``), asked of the name servers when not known yet.

        Raises MQClientError as RocketMQ's fetchMessageQueues does: NOT_FOUND_TOPIC_EXCEPTION when no name
        server routes ``topic``, and the look-up's own error when none answers within
        ``mq_client_api_timeout_ms``.
        """
        self._require_started()
        route = self._core.instance.topic_route(topic)
        if route is None:
            raise MQClientError(f"no name server routes topic {topic!r}: create it first (rocketmesh admin "
                                "update-topic), or check its name", ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION)
        return readable_queues(topic, route)

    def _apply_assignment(self) -> None:
        reb = self._core.rebalance
        wanted = set(self._assigned or [])
        with reb._lock:
            for mq in [mq for mq in reb.process_queues if mq not in wanted]:
                reb._drop(mq)
            for mq in sorted(wanted - set(reb.process_queues)):
                pq = ProcessQueue()
                reb.process_queues[mq] = pq
                if not self._core._on_queue_added(mq, pq):
                    del reb.process_queues[mq]

    # --- life cycle ---

    def start(self) -> PullConsumer:
        if self._started:
            raise MQClientError("the consumer is already started")
        if self._msg_trace is not None:
            self._msg_trace.start()
        try:
            self._core.start()
        except BaseException:
            if self._msg_trace is not None:
                self._msg_trace.close(1.0)
            raise
        self._started = True
        exit_hooks.started(self)
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        if self._assigned is not None:
            for topic in {mq.topic for mq in self._assigned}:
                self._core.instance.add_topic(topic)
            self._apply_assignment()
        return self

    def shutdown(self) -> None:
        """Stop pulling, commit what polls returned (auto commit), leave the group."""
        if not self._started:
            return
        self._started = False
        exit_hooks.stopped(self)
        self._core.shutdown()
        if self.auto_commit:
            self._commit_consumed()
        if self._msg_trace is not None:
            self._msg_trace.close()
        self._core.finish_shutdown()

    def __enter__(self) -> PullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _require_started(self) -> None:
        if not self._started:
            raise MQClientError("the consumer is not started")

    # --- polling ---

    def poll(self, timeout_ms: int | None = None, max_records: int | None = None) -> list[MessageExt]:
        """The next batch of messages (one queue's, in order), or [] after ``timeout_ms`` (default 5 s; 0 does
        not wait). With ``max_records``, at most that many: the rest of the batch comes first at the next poll.

        With auto commit, first commits what earlier polls returned when ``auto_commit_interval_ms`` passed
        (:meth:`commit_if_due`)."""
        self._require_started()
        _check_max_records(max_records)
        self.commit_if_due()
        timeout = (self.options.poll_timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        deadline = time.monotonic() + timeout
        while True:
            batch = self._next_batch(deadline - time.monotonic())
            if batch is None:
                return []
            msgs = self._hand_out(batch, max_records)
            if msgs:
                return msgs
            if time.monotonic() >= deadline:
                return []

    def poll_nowait(self, max_records: int | None = None) -> list[MessageExt]:
        """What the cache holds now, up to ``max_records`` (default: all of it); [] when it holds nothing.

        Unlike :meth:`poll` it may join the batches of several queues (each queue's messages in order, the
        rest of a batch cut by ``max_records`` first next time). It never waits and does no network I/O: it
        does not commit either, so a caller that polls this way (an event loop) runs :meth:`commit_if_due`
        itself where it may block. What it returns counts as consumed exactly as what ``poll`` returns."""
        self._require_started()
        _check_max_records(max_records)
        out: list[MessageExt] = []
        while max_records is None or len(out) < max_records:
            batch = self._next_batch(0)
            if batch is None:
                break
            out.extend(self._hand_out(batch, None if max_records is None else max_records - len(out)))
        return out

    def set_arrival_callback(self, callback: Callable[[], None] | None) -> None:
        """Have ``callback()`` called each time pulled messages land in the cache (None: no more calls).

        It runs on the client's remoting I/O thread, after the messages can be polled: it must not block or
        raise. An event loop's consumer uses it to wake a task waiting in :meth:`poll_nowait`'s stead."""
        self._on_arrival = callback

    def _next_batch(self, timeout_s: float) -> _Batch | None:
        """The rest of a batch cut by ``max_records``, else the next batch of the cache (waiting up to
        ``timeout_s``), else None."""
        with self._lock:
            if self._front:
                return self._front.popleft()
        try:
            return self._cache.get(timeout_s > 0, max(0.0, timeout_s))
        except queue_mod.Empty:
            return None

    def _hand_out(self, batch: _Batch, max_records: int | None) -> list[MessageExt]:
        """Up to ``max_records`` messages of ``batch`` (marked consumed; the rest put back in front); [] when
        the batch is of a queue dropped since (a seek, a rebalance)."""
        req = batch.req
        pq = req.pq
        if pq.dropped or self._core.requests.get(req.mq) is not req:
            with self._lock:
                self._cached -= batch.left
            return []
        n = batch.left if max_records is None else min(max_records, batch.left)
        msgs = batch.messages[batch.taken:batch.taken + n]
        batch.taken += n
        with self._lock:
            self._cached -= n
            if batch.left:
                self._front.appendleft(batch)
        pq.remove_messages(msgs)  # what commit() stores: pq.committed_offset
        if self._msg_trace is not None:
            self._msg_trace.polled(msgs)
        return msgs

    def _deliver(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        with self._lock:
            self._cached += len(msgs)
        self._cache.put(_Batch(req, msgs))
        callback = self._on_arrival
        if callback is not None:
            callback()

    def _flow_control(self, req: PullRequest) -> float:
        pq = req.pq
        o = self.options
        if self._cached > o.pull_threshold_for_all:
            return PULL_DELAY_WHEN_FLOW_CONTROL_MS
        if pq.msg_count > o.pull_threshold_for_queue or pq.msg_size > o.pull_threshold_size_for_queue * _MiB:
            return PULL_DELAY_WHEN_FLOW_CONTROL_MS
        return 0

    def _on_queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Nothing to do: the core persists what polls returned (auto commit) when a queue goes."""

    # --- offsets ---

    def _commit_consumed(self) -> None:
        self._core.sync_offsets()
        self._core.persist_offsets()

    @property
    def auto_commit_due(self) -> bool:
        """With auto commit: ``auto_commit_interval_ms`` passed since the last auto commit (the next poll
        commits)."""
        return self.auto_commit and time.monotonic() >= self._next_auto_commit

    def commit_if_due(self) -> bool:
        """The auto commit every poll makes first: when :attr:`auto_commit_due`, commit what earlier polls
        returned (on the brokers: network I/O). Returns whether it committed."""
        with self._lock:
            if not self.auto_commit_due:
                return False
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        self._commit_consumed()
        return True

    def commit(self) -> None:
        """Commit, on the brokers (or the local file), the offsets of every message polls returned."""
        self._require_started()
        self._commit_consumed()

    def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset of ``queue`` as stored (-1 when none)."""
        self._require_started()
        return self._core.offset_store.read(queue, ReadOffsetType.READ_FROM_STORE)

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Consume ``queue`` from ``offset`` on (must be assigned; within its min and max offsets)."""
        self._require_started()
        req = self._core.requests.get(queue)
        if req is None:
            raise MQClientError(f"the message queue {queue} is not assigned to this consumer")
        lo, hi = self._core.min_offset(queue), self._core.max_offset(queue)
        if not lo <= offset <= hi:
            raise MQClientError(f"seek offset {offset} is out of range [{lo}, {hi}] of {queue}")
        # A fresh pull state: the pull in flight (maybe held by the broker) and what it brings are dropped.
        self._core.restart_queue(queue, offset)

    def seek_to_time(self, timestamp_ms: int, queue: MessageQueue | None = None) -> None:
        """Move ``queue`` (or every assigned queue) to its first message stored at or after ``timestamp_ms``."""
        self._require_started()
        queues = [queue] if queue is not None else list(self._core.requests)
        for mq in queues:
            self.seek(mq, self._core.search_offset(mq, timestamp_ms))

    def seek_to_begin(self, queue: MessageQueue) -> None:
        self.seek(queue, self._core.min_offset(queue))

    def seek_to_end(self, queue: MessageQueue) -> None:
        self.seek(queue, self._core.max_offset(queue))

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer pulls now."""
        return sorted(self._core.requests)

    def pause(self) -> None:
        self._core.paused = True

    def resume(self) -> None:
        self._core.paused = False


def _check_max_records(max_records: int | None) -> None:
    if max_records is not None and (isinstance(max_records, bool) or not isinstance(max_records, int)
                                    or max_records < 1):
        raise MQClientError(f"max_records must be an integer >= 1 (or None), got {max_records!r}")
