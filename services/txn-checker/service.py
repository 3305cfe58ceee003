"""TxnCheckerService: one txn-checker replica (RocketMQ's TransactionalMessageCheckService, out of the broker).

Pulling: a ConsumerCore of the system group CID_RMQ_SYS_TRANS subscribes
RMQ_SYS_TRANS_HALF_TOPIC, so rebalance hands this replica its share of every
master broker's half queues and pulls them from the committed offset on
(bodies are dropped at once). Each half queue comes with its op queue (same
broker, same queue id of RMQ_SYS_TRANS_OP_HALF_TOPIC), which the check pass
reads itself, so a half queue and its ops always have one owner.

Checking: every ``transactionCheckInterval`` a pass goes over the owned
queues (the model is RocketMQ's TransactionalMessageServiceImpl.check): read
the new ops; settle the pending halves they name; for each pending half
older than its immunity time (transactionTimeOut, or the message's
CHECK_IMMUNITY_TIME_IN_SECONDS) ask its broker to check it
(CHECK_HALF_MESSAGE). The broker asks a live producer and stores a copy
with TRANSACTION_CHECK_TIMES + 1 (which the next pass meets), or gives the
message up past ``transactionCheckMax``, or says nobody of the group is
there (the half stays pending, its count untouched, and is checked again
next pass). Progress - the half queue up to the first pending half, the op
queue up to the first op still needed - is committed to the brokers as the
group's offsets, so a replica that takes a queue over resumes there.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rocketmesh.client.consumer.core import (
    PULL_DELAY_WHEN_FLOW_CONTROL_MS,
    ConsumerHooks,
    PullRequest,
    make_subscription,
)
from rocketmesh.client.consumer.offset_store import ReadOffsetType
from rocketmesh.client.consumer.process_queue import ProcessQueue
from rocketmesh.client.consumer.types import PullStatus
from rocketmesh.client.errors import MQError
from rocketmesh.model.message import MessageExt, MessageQueue
from rocketmesh.model.topics import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketmesh.remoting.protocol.headers import CheckHalfMessageRequestHeader, HalfCheckOutcome
from rocketmesh.runtime.log import get_logger
from rocketmesh.server.metrics import service_metrics
from rocketmesh.server.service_identity import instance_name_of, status_server
from rocketmesh.server.system_group import system_group_core
from rocketmesh.txn_checker.config import TxnCheckerConfig
from rocketmesh.txn_checker.half_queue import HalfQueue
from rocketmesh.txn_checker.tracing import end_check, start_check

log = get_logger("txn-checker")

#: Op-queue pulls per queue in one pass, at most (each up to pull_batch_size ops).
MAX_OP_PULLS_PER_PASS = 64
#: Outcomes after which a half needs nothing more from the checker.
_SETTLED = frozenset({HalfCheckOutcome.CHECKED, HalfCheckOutcome.DECIDED, HalfCheckOutcome.DISCARDED,
                      HalfCheckOutcome.MISSING})


class TxnCheckerService:
    """See the module docstring: ``start()``, then ``shutdown()``; ``status()`` for what it did."""

    def __init__(self, config: TxnCheckerConfig) -> None:
        self.config = config
        self.instance_name = instance_name_of(config, "txn-checker")
        self.core = system_group_core(config, self.instance_name, ConsumerHooks(
            deliver=self._on_pulled, can_pull=self._flow_control, on_queue_removed=self._on_queue_removed))
        self.core.subscribe(TRANS_HALF_TOPIC, system=True)
        self._op_subscription = make_subscription(TRANS_OP_HALF_TOPIC, system=True)
        self.server = status_server(config, "txn-checker", self.status)
        self._queues: dict[MessageQueue, HalfQueue] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._running = False
        self._thread: threading.Thread | None = None
        self.counts = {"passes": 0, "checked": 0, "decidedByOp": 0, "decidedByBroker": 0, "discarded": 0,
                       "noProducer": 0, "missing": 0, "failures": 0}
        self.last_pass_ms = 0
        self.metrics = service_metrics("txn-checker", config, self.server, self.instance_name)
        self.metrics.gauge("rocketmq_half_messages", "Half messages of this replica's queues not yet decided",
                           self._pending_halves)
        self.metrics.counter_of("rocketmq_transaction_checks_total", "Half messages checked back, by outcome",
                                lambda: [(v, {"outcome": k}) for k, v in self.counts.items() if k != "passes"])

    # --- life cycle ---

    @property
    def address(self) -> str:
        return self.server.address

    def start(self) -> None:
        self.server.start()
        self.metrics.start()
        self._running = True
        self.core.start()
        self._thread = threading.Thread(target=self._check_loop, name="txn-check", daemon=True)
        self._thread.start()
        log.info("txn_checker_started", group=self.config.consumer_group, instance=self.instance_name,
                 address=self.address, transaction_time_out=self.config.transaction_time_out,
                 transaction_check_interval=self.config.transaction_check_interval,
                 transaction_check_max=self.config.transaction_check_max)

    def shutdown(self) -> None:
        """Stop pulling and checking, commit the progress, leave the group."""
        if not self._running:
            self.server.stop(grace_s=0.5)
            return
        self._running = False
        self._wake.set()
        self.core.shutdown()
        if self._thread is not None:
            self._thread.join(self.config.check_timeout_ms / 1000.0 + 5.0)
        with self._lock:
            queues = list(self._queues.values())
        for hq in queues:
            self._commit_op_offset(hq)
        self.core.finish_shutdown()
        self.server.stop(grace_s=1.0)
        self.metrics.shutdown()
        log.info("txn_checker_stopped", **self.counts)

    # --- pulled half messages (client callback thread) ---

    def _flow_control(self, req: PullRequest) -> float:
        if req.pq.msg_count >= self.config.max_pending_per_queue:
            return PULL_DELAY_WHEN_FLOW_CONTROL_MS
        return 0

    def _on_pulled(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        req.pq.drop_bodies(msgs)
        hq = self._queue_of(req)
        if hq is not None:
            hq.add_halves(msgs, time.monotonic())

    def _queue_of(self, req: PullRequest) -> HalfQueue | None:
        """The state of ``req``'s queue, made on first sight (None once the queue is gone)."""
        if req.pq.dropped:
            return None
        mq = req.mq
        with self._lock:
            hq = self._queues.get(mq)
            if hq is None:
                hq = self._queues[mq] = HalfQueue(mq, MessageQueue(TRANS_OP_HALF_TOPIC, mq.broker_name, mq.queue_id),
                                                  req.next_offset)
            return hq

    def _on_queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        with self._lock:
            hq = self._queues.pop(mq, None)
        if hq is None:
            return
        self._commit_op_offset(hq)
        hq.removed = True
        self.core.offset_store.remove(hq.op_mq)

    # --- the check pass ---

    def _check_loop(self) -> None:
        interval = self.config.transaction_check_interval / 1000.0
        while self._running:
            try:
                self.check_pass()
            except Exception:  # noqa: BLE001 - a bug in one pass must not end the checking
                log.exception("check_pass_failed")
            self._wake.wait(interval)

    def check_pass(self) -> None:
        """One look through every owned half queue (see the module docstring)."""
        started = time.monotonic()
        for mq, req in list(self.core.requests.items()):
            if not self._running:
                return
            if mq.topic != TRANS_HALF_TOPIC or req.pq.dropped:
                continue
            hq = self._queue_of(req)
            if hq is None:
                continue
            try:
                self._check_queue(hq, req.pq, started)
            except MQError as exc:
                self.counts["failures"] += 1
                log.warning("check_queue_failed", mq=str(mq), error=str(exc))
        self.counts["passes"] += 1
        self.last_pass_ms = int(time.time() * 1000)

    def _check_queue(self, hq: HalfQueue, pq: ProcessQueue, started: float) -> None:
        if not self._read_ops(hq, pq):
            return
        decided = hq.take_decided()
        if decided:
            pq.remove_messages(decided)
            self.counts["decidedByOp"] += len(decided)
        due = hq.due(int(time.time() * 1000), started, self.config.transaction_time_out)
        step = self.config.check_concurrency
        for i in range(0, len(due), step):
            if not self._running or hq.removed:
                break
            self._check(hq, pq, due[i:i + step])
        self._commit_op_offset(hq)

    def _half_base(self, hq: HalfQueue, pq: ProcessQueue) -> int:
        """The half queue's committed offset: everything below it is settled."""
        return pq.committed_offset if pq.committed_offset >= 0 else hq.start_offset

    def _read_ops(self, hq: HalfQueue, pq: ProcessQueue) -> bool:
        """Read the op queue from where this checker got to; False when its start offset is not known yet."""
        core = self.core
        if hq.op_next is None:
            stored = core.offset_store.read(hq.op_mq, ReadOffsetType.READ_FROM_STORE)
            if stored < -1:
                return False  # the broker could not be asked; next pass
            hq.op_next = hq.op_committed = max(stored, 0)
        for _ in range(MAX_OP_PULLS_PER_PASS):
            result = core.pull_api.pull_sync(hq.op_mq, self._op_subscription, hq.op_next, self.config.pull_batch_size,
                                             timeout_ms=self.config.check_timeout_ms)
            status, nxt = result.status, result.next_begin_offset
            if status is PullStatus.FOUND:
                hq.add_ops(result.messages, self._half_base(hq, pq))
            elif status is PullStatus.OFFSET_ILLEGAL:
                log.warning("op_offset_illegal", mq=str(hq.op_mq), offset=hq.op_next, next=nxt)
                hq.op_next = nxt
                break
            elif nxt <= hq.op_next:
                break  # caught up
            hq.op_next = nxt
        return True

    def _check(self, hq: HalfQueue, pq: ProcessQueue, halves: list[MessageExt]) -> None:
        inst = self.core.instance
        addr = inst.find_master_addr(hq.mq)
        group = self.config.consumer_group
        spans = []
        calls: list[tuple[CheckHalfMessageRequestHeader, str | None]] = []
        for m in halves:
            span, traceparent = start_check(m, group, addr)
            spans.append(span)
            calls.append((CheckHalfMessageRequestHeader(hq.mq.queue_id, m.queue_offset, m.commitlog_offset,
                                                        self.config.transaction_check_max), traceparent))
        settled: list[MessageExt] = []
        outcomes = inst.api.check_half_messages(addr, calls, self.config.check_timeout_ms)
        for msg, span, outcome in zip(halves, spans, outcomes, strict=False):
            if isinstance(outcome, MQError):
                self.counts["failures"] += 1
                log.warning("check_failed", mq=str(hq.mq), offset=msg.queue_offset, error=str(outcome))
                end_check(span, failure=str(outcome))
                continue
            end_check(span, outcome.value)
            self.counts[_COUNTER[outcome]] += 1
            if outcome in _SETTLED:
                settled.append(msg)
        if settled:
            hq.settle(settled)
            pq.remove_messages(settled)

    def _commit_op_offset(self, hq: HalfQueue) -> None:
        if hq.removed:
            return
        req = self.core.requests.get(hq.mq)
        base = self._half_base(hq, req.pq) if req is not None else hq.start_offset
        offset = hq.op_commit_offset(base)
        if offset is None or offset == hq.op_committed:
            return
        store = self.core.offset_store
        store.update(hq.op_mq, offset, False)
        try:
            store.persist(hq.op_mq)
        except MQError as exc:
            log.warning("op_offset_persist_failed", mq=str(hq.op_mq), error=str(exc))
            return
        hq.op_committed = offset

    # --- status ---

    def _pending_halves(self) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            queues = list(self._queues.values())
        return [(sum(hq.pending_count for hq in queues), {"topic": TRANS_HALF_TOPIC})]

    def status(self) -> dict[str, Any]:
        """What this replica owns and has done (the answer to GET_CONSUMER_RUNNING_INFO)."""
        with self._lock:
            queues = dict(self._queues)
        table = {}
        for mq, req in list(self.core.requests.items()):
            hq = queues.get(mq)
            table[str(mq)] = {"pending": hq.pending_count if hq else 0,
                              "committedOffset": self._half_base(hq, req.pq) if hq else req.next_offset,
                              "opOffset": hq.op_committed if hq else None,
                              "opsWaiting": hq.ops_waiting if hq else 0}
        return {"instanceName": self.instance_name, "group": self.config.consumer_group,
                "clientId": self.core.instance.client_id if self.core.instance else "",
                "transactionTimeOut": self.config.transaction_time_out,
                "transactionCheckInterval": self.config.transaction_check_interval,
                "transactionCheckMax": self.config.transaction_check_max,
                "lastPassMs": self.last_pass_ms, **self.counts, "queues": table}


_COUNTER = {
    HalfCheckOutcome.CHECKED: "checked",
    HalfCheckOutcome.DECIDED: "decidedByBroker",
    HalfCheckOutcome.DISCARDED: "discarded",
    HalfCheckOutcome.NO_PRODUCER: "noProducer",
    HalfCheckOutcome.MISSING: "missing",
}
