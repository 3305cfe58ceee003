"""ScheduleService: one scheduler replica.

Pulling: a ConsumerCore of the system group subscribes SCHEDULE_TOPIC_XXXX and
the timer topic, so rebalance hands this replica its share of every master
broker's level and timer queues, and pulls them from the committed offset on.
Only the entries' offsets and due times are kept (bodies are dropped at once).

Timing: every pulled entry goes into one DueQueue. The delivery thread sleeps
until the earliest due time (or until an earlier entry arrives), then asks
each entry's broker to re-put the due ones (DELIVER_DUE_MESSAGES, batched per
queue, all brokers at once). An entry is removed from its process queue only
when its broker says it is settled, so the committed offset (the smallest
offset still pending) never passes an undelivered entry: a crash re-reads it,
and the broker's memory of what it re-put keeps that from making a copy.

Rolling: a timer that has waited ``timerRollWindowMs`` and is still not due is
parked again at the tail of its queue (same due time) and counts as settled,
so no queue's progress (nor the brokers' memory of re-puts above it) lags more
than the roll window behind, however far off its timers are.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import orjson

from rocketmesh.client.api import DeliverDueAnswer
from rocketmesh.client.consumer.core import PULL_DELAY_WHEN_FLOW_CONTROL_MS, ConsumerHooks, PullRequest
from rocketmesh.client.consumer.process_queue import HeldOffset, ProcessQueue
from rocketmesh.client.errors import MQError
from rocketmesh.model.delay_levels import parse_delay_levels
from rocketmesh.model.message import MessageConst, MessageExt, MessageQueue
from rocketmesh.model.topics import SCHEDULE_TOPIC, TIMER_TOPIC
from rocketmesh.remoting.protocol.headers import DeliverDueMessagesRequestHeader
from rocketmesh.runtime.log import get_logger
from rocketmesh.scheduler.config import SchedulerConfig
from rocketmesh.scheduler.due_queue import DueQueue
from rocketmesh.scheduler.tracing import DeliverySpan, ParkedTrace, parked_trace, start_delivery
from rocketmesh.server.metrics import service_metrics
from rocketmesh.server.service_identity import instance_name_of, status_server
from rocketmesh.server.system_group import system_group_core
from rocketmesh.telemetry.propagation import tracing_enabled

#: Bucket bounds of rocketmq_delay_message_latency: how late a delivery was (ms after due).
LATENESS_BOUNDS_MS = (10, 50, 100, 500, 1000, 5000, 10_000, 60_000)

log = get_logger("scheduler")


#: An entry woken this close to its due time is delivered (the broker says if it is early), not rolled.
_ROLL_SLACK_MS = 1000


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Entry:
    """One pending delivery: a parked message of a pulled queue, by offset."""

    __slots__ = ("req", "held", "due", "attempts", "trace", "span")

    def __init__(self, req: PullRequest, held: HeldOffset, due: int, trace: ParkedTrace | None) -> None:
        self.req = req
        self.held = held
        self.due = due
        self.attempts = 0
        #: The message's trace, for its delivery span (None when untraced).
        self.trace = trace
        #: The delivery span, from the first attempt until the broker settles the entry.
        self.span: DeliverySpan | None = None


class ScheduleService:
    """See the module docstring: ``start()``, then ``shutdown()``."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.instance_name = instance_name_of(config, "scheduler")
        self.core = system_group_core(config, self.instance_name, ConsumerHooks(
            deliver=self._on_pulled, can_pull=self._flow_control, on_queue_removed=self._forget))
        self.core.subscribe(SCHEDULE_TOPIC, system=True)
        self.core.subscribe(TIMER_TOPIC, system=True)
        self.server = status_server(config, "scheduler", self.status)
        self._due = DueQueue()
        self._cond = threading.Condition()
        self._waiting_until: int | None = None
        self._running = False
        self._thread: threading.Thread | None = None
        #: Delay of each level (ms) by broker name, from the broker's own messageDelayLevel.
        self._levels: dict[str, list[int]] = {}
        self.delivered = 0
        self.duplicates = 0
        self.rolled = 0
        self.lost = 0
        self.failures = 0
        #: Lateness of the latest deliveries (ms after due), for the status answer.
        self._lateness: list[int] = []
        self.metrics = service_metrics("scheduler", config, self.server, self.instance_name)
        self.metrics.gauge("rocketmq_timing_messages", "Delayed and timer messages held until due, by delay level",
                           self._pending_by_level)
        self.metrics.counter_of("rocketmq_timer_dequeue_total", "Messages delivered to their real topic",
                                lambda: [(self.delivered, {})])
        self._lateness_hist = self.metrics.histogram(
            "rocketmq_delay_message_latency", "How late a message was delivered after it was due (ms)", (),
            LATENESS_BOUNDS_MS)

    # --- life cycle ---

    @property
    def address(self) -> str:
        return self.server.address

    def start(self) -> None:
        self.server.start()
        self.metrics.start()
        self._running = True
        self._thread = threading.Thread(target=self._deliver_loop, name="scheduler-deliver", daemon=True)
        self._thread.start()
        self.core.start()
        log.info("scheduler_started", group=self.config.consumer_group, instance=self.instance_name,
                 address=self.address)

    def shutdown(self) -> None:
        """Stop pulling and delivering, commit what was delivered, leave the group."""
        if not self._running:
            return
        self._running = False
        with self._cond:
            self._cond.notify_all()
        self.core.shutdown()
        if self._thread is not None:
            self._thread.join(10)
        self.core.finish_shutdown()
        self.server.stop(grace_s=1.0)
        self.metrics.shutdown()
        log.info("scheduler_stopped", delivered=self.delivered)

    # --- pulled entries ---

    def _flow_control(self, req: PullRequest) -> float:
        if req.pq.msg_count >= self.config.max_pending_per_queue:
            return PULL_DELAY_WHEN_FLOW_CONTROL_MS
        return 0

    def _forget(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """A queue went to another replica: its pending entries are that replica's now."""
        with self._cond:
            dropped = self._due.discard(lambda e: e.req.pq is pq)
        for e in dropped:
            if e.span is not None:
                e.span.end("handed_over: another scheduler replica delivers it")
        if dropped:
            log.info("queue_handed_over", mq=str(mq), pending_dropped=len(dropped))

    def _on_pulled(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        mq = req.mq
        if mq.topic == SCHEDULE_TOPIC:
            # This runs on the remoting I/O thread, which must not wait for a request of its own:
            # an unknown broker's levels are asked for on the scheduler thread meanwhile.
            levels = self._levels.get(mq.broker_name)
            if levels is None:
                self.core.scheduler.call_soon(lambda: self._levels_of(mq.broker_name))
                levels = []
            delay = levels[min(mq.queue_id, len(levels) - 1)] if levels else 0
            dues = [m.store_timestamp + delay for m in msgs]
        else:
            dues = []
            for m in msgs:
                try:
                    dues.append(int(m.properties[MessageConst.TIMER_DELIVER_MS]))
                except (KeyError, ValueError):
                    dues.append(m.store_timestamp)  # the broker's entry is the authority; it says when
        traces = [parked_trace(m) for m in msgs] if tracing_enabled() else [None] * len(msgs)
        # Only offsets, due times (and traces) stay; the pulled messages go.
        held = req.pq.keep_offsets_only(msgs)
        if len(held) != len(msgs):
            return  # the queue was dropped or restarted meanwhile: its new owner pulls these again
        roll_at = _now_ms() + self.config.timer_roll_window_ms
        with self._cond:
            due_queue = self._due
            for due, h, trace in zip(dues, held, traces, strict=False):
                due_queue.push(min(due, roll_at), _Entry(req, h, due, trace))
            first = due_queue.next_due()
            if self._waiting_until is None or (first is not None and first < self._waiting_until):
                self._cond.notify()

    def _levels_of(self, broker_name: str) -> list[int]:
        """The broker's delay of each level; [] when unknown (the broker then tells each entry's due time)."""
        levels = self._levels.get(broker_name)
        if levels is not None:
            return levels
        inst = self.core.instance
        try:
            addr = inst.master_addr(broker_name)
            if addr is None:
                return []
            props = inst.api.get_broker_config(addr, 3000)
            levels = parse_delay_levels(props["messageDelayLevel"])
        except (MQError, KeyError, ValueError) as exc:
            log.warning("delay_levels_unknown", broker=broker_name, error=str(exc))
            return []
        self._levels[broker_name] = levels
        return levels

    # --- delivering ---

    def _deliver_loop(self) -> None:
        cond = self._cond
        while self._running:
            with cond:
                now = _now_ms()
                nxt = self._due.next_due()
                if nxt is None or nxt > now:
                    self._waiting_until = nxt
                    cond.wait(1.0 if nxt is None else min(1.0, (nxt - now) / 1000.0))
                    self._waiting_until = None
                    continue
                # A bounded round, so that the first requests of a large burst leave at once.
                batch = self._due.pop_due(now, self.config.deliver_batch_max * 4)
            try:
                self._deliver(batch)
            except Exception:  # noqa: BLE001 - a bug must not stop delivery; the entries are retried
                log.exception("deliver_round_failed")
                self._retry([e for _, e in batch])

    def _deliver(self, batch: list[tuple[int, _Entry]]) -> None:
        by_queue: dict[PullRequest, list[tuple[int, _Entry]]] = defaultdict(list)
        for due, entry in batch:
            if not entry.req.pq.dropped:
                by_queue[entry.req].append((due, entry))
        calls: list[tuple[str, DeliverDueMessagesRequestHeader, bytes]] = []
        chunks: list[tuple[PullRequest, list[tuple[int, _Entry]]]] = []
        step = self.config.deliver_batch_max
        for req, items in by_queue.items():
            try:
                addr = self.core.instance.find_master_addr(req.mq)
            except MQError as exc:
                log.warning("deliver_no_broker", mq=str(req.mq), error=str(exc))
                self._retry([e for _, e in items])
                continue
            committed = max(req.pq.committed_offset, 0)
            now = _now_ms()
            # Woken well before due: that is a roll (a timer's wait outlasted the roll window).
            due_now = [(d, e) for d, e in items if e.due <= now + _ROLL_SLACK_MS]
            to_roll = [(d, e) for d, e in items if e.due > now + _ROLL_SLACK_MS]
            for roll, part in ((False, due_now), (True, to_roll)):
                header = DeliverDueMessagesRequestHeader(req.mq.topic, req.mq.queue_id, committed, roll)
                for i in range(0, len(part), step):
                    chunk = part[i:i + step]
                    offsets = [e.held.queue_offset for _, e in chunk]
                    traceparents = {} if roll else self._traceparents(chunk, addr)
                    body = orjson.dumps({"offsets": offsets, "traceparents": traceparents} if traceparents
                                        else offsets)
                    calls.append((addr, header, body))
                    chunks.append((req, chunk))
        if not calls:
            return
        results = self.core.instance.api.deliver_due_messages(calls, self.config.deliver_timeout_ms)
        now = _now_ms()
        for (req, chunk), resp in zip(chunks, results, strict=False):
            entries = [e for _, e in chunk]
            if isinstance(resp, MQError):
                self.failures += 1
                why = str(resp)
                log.warning("deliver_failed", mq=str(req.mq), entries=len(entries), error=why)
                for e in entries:
                    if e.span is not None:
                        e.span.attempt_failed(why)
                self._retry(entries)
                continue
            self._settle(req, chunk, resp, now)

    def _traceparents(self, chunk: list[tuple[int, _Entry]], addr: str) -> dict[str, str]:
        """The context each traced entry's delivered copy carries: its delivery span's, started at the first
        attempt (by queue offset, as the DELIVER_DUE_MESSAGES body names them)."""
        out = {}
        for _, e in chunk:
            if e.trace is None:
                continue
            if e.span is None:
                e.span = start_delivery(e.trace, self.config.consumer_group, addr)
            if e.span.traceparent:
                out[str(e.held.queue_offset)] = e.span.traceparent
        return out

    def _settle(self, req: PullRequest, chunk: list[tuple[int, _Entry]], resp: DeliverDueAnswer, now: int) -> None:
        answer = resp.body
        by_offset = {e.held.queue_offset: (due, e) for due, e in chunk}
        settled: list[HeldOffset] = []
        for offset in answer.get("done", ()):
            due, e = by_offset.pop(offset)
            settled.append(e.held)
            if e.due <= now:
                self._lateness.append(now - e.due)
                self._lateness_hist.record((), now - e.due)
            if e.span is not None:
                e.span.end()
        for offset in answer.get("missing", ()):
            due, e = by_offset.pop(offset)
            settled.append(e.held)
            self.lost += 1
            if e.span is not None:
                e.span.end("missing: the parked message is no longer in the store")
        not_due = answer.get("notDue", ())
        if not_due:
            roll_at = _now_ms() + self.config.timer_roll_window_ms
            with self._cond:
                for offset, due in not_due:
                    _, e = by_offset.pop(offset)
                    e.due = due
                    self._due.push(min(due, roll_at), e)
        if by_offset:  # not named in the answer: try again
            self._retry([e for _, e in by_offset.values()])
        if len(self._lateness) > 10_000:
            del self._lateness[:5000]
        self.delivered += resp.header.delivered
        self.rolled += resp.header.rolled
        self.duplicates += resp.header.duplicates
        if settled:
            req.pq.remove_messages(settled)

    def _retry(self, entries: list[_Entry]) -> None:
        now = _now_ms()
        cap = self.config.deliver_retry_max_delay_ms
        with self._cond:
            for e in entries:
                e.attempts += 1
                self._due.push(now + min(cap, 100 * 2 ** min(e.attempts, 16)), e)
            self._cond.notify()

    # --- status ---

    def _pending_by_level(self) -> list[tuple[float, dict[str, Any]]]:
        """Pending entries per SCHEDULE_TOPIC_XXXX queue (queue id = level - 1), and the timer queues' as "timer"."""
        pending: dict[str, int] = {}
        for mq, pq in list(self.core.rebalance.process_queues.items()) if self.core.rebalance else ():
            level = str(mq.queue_id + 1) if mq.topic == SCHEDULE_TOPIC else "timer"
            pending[level] = pending.get(level, 0) + pq.msg_count
        return [(n, {"topic": SCHEDULE_TOPIC if level != "timer" else TIMER_TOPIC, "delay_level": level})
                for level, n in pending.items()]

    def status(self) -> dict[str, Any]:
        """What this replica holds and has done."""
        with self._cond:
            pending = len(self._due)
            next_due = self._due.next_due()
        queues = {str(mq): {"pending": pq.msg_count, "committedOffset": pq.committed_offset}
                  for mq, pq in list(self.core.rebalance.process_queues.items())} if self.core.rebalance else {}
        late = sorted(self._lateness[-1000:])
        return {"instanceName": self.instance_name, "group": self.config.consumer_group,
                "clientId": self.core.instance.client_id if self.core.instance else "",
                "pending": pending, "nextDueMs": next_due, "delivered": self.delivered,
                "duplicates": self.duplicates, "rolled": self.rolled, "lost": self.lost, "failures": self.failures,
                "latenessP50Ms": late[len(late) // 2] if late else None,
                "latenessP99Ms": late[int(len(late) * 0.99)] if late else None,
                "queues": queues}

