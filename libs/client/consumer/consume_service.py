"""Running the push consumer's listener: concurrently, or in queue order (RocketMQ's
ConsumeMessageConcurrentlyService and ConsumeMessageOrderlyService).

A message the listener fails (clustering) is handed back to the broker
(CONSUMER_SEND_MSG_BACK), which retries it through the group's retry topic or
dead-letters it; until the broker has taken it, it stays in the process
queue, so its offset is never committed past it. Broadcasting has no broker
retry: a failed message is logged and skipped.
"""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rocketmesh.client.consumer.process_queue import ProcessQueue
from rocketmesh.client.consumer.types import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, MessageModel
from rocketmesh.client.errors import MQError
from rocketmesh.client.running_info import CMResult, ConsumeMessageDirectlyResult
from rocketmesh.client.trace.msg_trace import MsgTracer, SubTrace
from rocketmesh.client.trace.tracing import ListenerTrace, current_traceparent, start_process
from rocketmesh.model.message import MessageConst, MessageExt, MessageQueue
from rocketmesh.remoting.protocol.headers import ConsumerSendMsgBackRequestHeader
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.client.consumer.core import ConsumerCore, PullRequest

log = get_logger("client", component="consume")

Listener = Callable[[list[MessageExt]], Any]

#: Messages whose send-back failed are consumed again locally after this pause (ms).
RECONSUME_LOCALLY_DELAY_MS = 5000
#: A message past the consume timeout is retried at this delay level (RocketMQ's cleanExpiredMsg).
EXPIRED_DELAY_LEVEL = 3
#: The most timed-out messages one queue hands back per check.
_EXPIRED_PER_CHECK = 16
#: Bounds of the interval between consume-timeout checks (s); in between it is a quarter of the timeout.
_EXPIRY_CHECK_MIN_S = 0.2
_EXPIRY_CHECK_MAX_S = 60.0
#: Delay level of a send-back that asks the broker to dead-letter the message at once.
DEAD_LETTER_DELAY_LEVEL = -1
#: An orderly consume task yields its thread after this long, so one busy queue cannot starve others.
MAX_TIME_CONSUME_CONTINUOUSLY_S = 60.0
#: Listener calls packed into one consume task when every consume thread is busy.
_PACKED_CALLS = 8
#: An orderly queue whose broker lock is not held is tried again after this pause (ms).
LOCK_RETRY_DELAY_MS = 100


class _Worker:
    """One consume thread's wake-up: a lock held while the thread has nothing to do, which it sleeps
    acquiring and a submit releases."""

    __slots__ = ("wake",)

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()


class _Workers:
    """A fixed pool of consume threads over one FIFO of tasks; a submit wakes the thread that went idle
    last.

    Waking the most recently idle thread (not the longest idle, as waiters on a shared queue are woken)
    keeps a light load on one or two warm threads while the others sleep, and the pool still runs
    ``size`` tasks at once when that many wait. On a busy machine the difference is the tail: with a CPU
    hog on one of two cores, end-to-end p99 at 2,000 msg/s went from 25-30 ms with 20 threads taking
    turns to about 6 ms (``bench/consumer_bench.py --modes e2e``).

    No lock of ours is taken per task: the queue is a SimpleQueue, and the idle stack is a list whose
    append, pop and remove are each atomic. A thread lists itself idle and then looks at the queue once
    more before it sleeps, and a submit queues its task before it looks for an idle thread, so a task
    never waits while a thread sleeps."""

    def __init__(self, name: str, size: int) -> None:
        self._tasks: queue_mod.SimpleQueue[Callable[[], object]] = queue_mod.SimpleQueue()
        #: Sleeping threads, the most recently idle last.
        self._idle: list[_Worker] = []
        self._stopped = False
        self.size = size
        self._threads = [threading.Thread(target=self._run, args=(_Worker(),), name=f"{name}-{i}", daemon=True)
                         for i in range(size)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def submit(self, task: Callable[[], object]) -> None:
        self._tasks.put(task)
        self._wake_one()

    def submit_many(self, tasks: list[Callable[[], object]]) -> None:
        put = self._tasks.put
        for task in tasks:
            put(task)
            self._wake_one()

    def _wake_one(self) -> None:
        if self._idle:
            try:
                worker = self._idle.pop()
            except IndexError:  # another submit took the last one
                return
            worker.wake.release()

    def backlog(self) -> int:
        """Tasks waiting for a thread."""
        return self._tasks.qsize()

    def stop(self, timeout_s: float) -> None:
        """Let running tasks finish (bounded); queued ones are dropped (their messages are redelivered)."""
        self._stopped = True
        while self._idle:
            try:
                self._idle.pop().wake.release()
            except IndexError:
                break
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))

    def _run(self, worker: _Worker) -> None:
        get = self._tasks.get_nowait
        idle = self._idle
        while not self._stopped:
            try:
                task = get()
            except queue_mod.Empty:
                idle.append(worker)
                try:
                    task = get()  # a submit between the first look and the append woke nobody
                except queue_mod.Empty:
                    if not self._stopped:
                        worker.wake.acquire()  # until a submit (or stop) takes this thread off the stack
                    continue
                try:
                    idle.remove(worker)
                except ValueError:
                    # A submit took this thread off the stack and is about to release it: take that wake-up
                    # now, so the next sleep is a real one.
                    worker.wake.acquire()
            try:
                task()
            except Exception:  # noqa: BLE001
                log.exception("consume_task_failed")
            del task  # not kept alive while the thread sleeps


def reset_retry_topic(msgs: list[MessageExt]) -> None:
    """Messages pulled from the group's retry topic show their original topic (RETRY_TOPIC) to the listener."""
    for m in msgs:
        original = m.properties.get(MessageConst.RETRY_TOPIC)
        if original:
            m.topic = original


def send_message_back(core: ConsumerCore, msg: MessageExt, mq: MessageQueue, delay_level: int,
                      max_reconsume_times: int | None) -> bool:
    """CONSUMER_SEND_MSG_BACK of ``msg`` (pulled from ``mq``) to the master of ``mq``'s broker: the broker
    retries it through ``%RETRY%<group>`` after ``delay_level`` (0: its own choice), or dead-letters it
    (past ``max_reconsume_times``, None: the group's setting, or ``delay_level`` < 0). False when the
    broker did not take it."""
    header = ConsumerSendMsgBackRequestHeader(
        offset=msg.commitlog_offset, group=core.group, delay_level=delay_level, origin_msg_id=msg.msg_id,
        origin_topic=msg.topic, max_reconsume_times=max_reconsume_times)
    try:
        addr = core.instance.find_master_addr(mq)
        # Sent inside the message's process span (when traced): the broker's handling is its child.
        core.instance.api.consumer_send_msg_back(addr, header, 3000, current_traceparent())
        return True
    except MQError as exc:
        log.warning("send_back_failed", group=core.group, msg_id=msg.msg_id, mq=str(mq), error=str(exc))
        return False


def _call_listener(listener: Listener, msgs: list[MessageExt], failed: Any, group: str,
                   trace: ListenerTrace | None = None, sub: SubTrace | None = None) -> Any:
    try:
        return listener(msgs)
    except Exception as exc:  # noqa: BLE001 - a throwing listener means "retry later"
        return _listener_raised(msgs, failed, group, exc, trace, sub)


def _listener_raised(msgs: list[MessageExt], failed: Any, group: str, exc: Exception,
                     trace: ListenerTrace | None = None, sub: SubTrace | None = None) -> Any:
    log.exception("listener_raised", group=group, msg_ids=[m.msg_id for m in msgs][:8])
    if trace is not None:
        trace.raised(exc)
    if sub is not None:
        sub.raised = True
    return failed


@dataclass(slots=True)
class ListenerCall:
    """One listener call in progress: its process span and message trace (either None when off)."""

    trace: ListenerTrace | None
    sub: SubTrace | None

    def close(self) -> None:
        """End the process span (and make the context before it current again)."""
        if self.trace is not None:
            self.trace.finish()


#: What each listener status comes to as the outcome of a CONSUME_MESSAGE_DIRECTLY (RocketMQ's mapping).
_DIRECT_RESULTS: dict[str, CMResult] = {
    ConsumeConcurrentlyStatus.CONSUME_SUCCESS: CMResult.CR_SUCCESS,
    ConsumeConcurrentlyStatus.RECONSUME_LATER: CMResult.CR_LATER,
    ConsumeOrderlyStatus.SUCCESS: CMResult.CR_SUCCESS,
    ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: CMResult.CR_LATER,
}


def consume_directly(listener: Listener, msg: MessageExt, group: str, orderly: bool) -> ConsumeMessageDirectlyResult:
    """Run one message through ``listener`` for an admin (CONSUME_MESSAGE_DIRECTLY), beside regular
    consumption: nothing is sent back, retried or committed, whatever the listener says; the result says
    what it said (CR_RETURN_NULL for no status, CR_THROW_EXCEPTION with the error when it raised)."""
    started = time.monotonic()
    result = ConsumeMessageDirectlyResult(order=orderly)
    log.info("consume_message_directly", group=group, msg_id=msg.msg_id, topic=msg.topic)
    try:
        status = listener([msg])
    except Exception as exc:  # noqa: BLE001 - what the listener raised is the answer
        log.warning("consume_message_directly_raised", group=group, msg_id=msg.msg_id, error=repr(exc))
        result.consume_result = CMResult.CR_THROW_EXCEPTION
        result.remark = f"{type(exc).__name__}: {exc}"
    else:
        outcome = _DIRECT_RESULTS.get(status) if isinstance(status, str) else None
        result.consume_result = CMResult.CR_RETURN_NULL if outcome is None else outcome
        if outcome is None and status is not None:
            result.remark = f"the listener returned {status!r:.80}, not a consume status"
    result.spent_time_mills = int((time.monotonic() - started) * 1000)
    return result


class ConcurrentConsumeService:
    """Hands pulled messages to a pool of consume threads, ``batch_max_size`` at a time, in any order."""

    #: The consumer's message trace hooks (set when it has enable_msg_trace).
    msg_trace: MsgTracer | None = None

    def __init__(self, core: ConsumerCore, listener: Listener, thread_nums: int, batch_max_size: int,
                 max_reconsume_times: int | None, consume_timeout_ms: float) -> None:
        self.core = core
        self.listener = listener
        self.batch_max_size = batch_max_size
        #: Sent with each send-back; None leaves it to the group's retryMaxTimes on the broker.
        self.max_reconsume_times = max_reconsume_times
        self.consume_timeout_ms = consume_timeout_ms
        self.workers = _Workers(f"consume-{core.group}", thread_nums)
        self._expiry_check_s = min(_EXPIRY_CHECK_MAX_S, max(_EXPIRY_CHECK_MIN_S, consume_timeout_ms / 4000.0))
        self._next_expiry_check = time.monotonic() + self._expiry_check_s

    def start(self) -> None:
        self.workers.start()

    def stop(self, timeout_s: float) -> None:
        self.workers.stop(timeout_s)

    def submit(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        n = self.batch_max_size
        mq, pq = req.mq, req.pq
        if mq.topic == self.core.retry_topic:
            reset_retry_topic(msgs)
        if len(msgs) <= n:
            self.workers.submit(lambda: self._consume(mq, pq, msgs))
            return
        chunks = [msgs[i:i + n] for i in range(0, len(msgs), n)]
        # Each listener call still gets at most ``batch_max_size`` messages, but calls share tasks: one
        # task per consume thread is enough to use them all, and when every thread already has work
        # queued, parallelism is saturated anyway. Fewer hand-offs leave more of the interpreter to
        # the listeners.
        size = self.workers.size
        per_task = max(-(-len(chunks) // size), 1 if self.workers.backlog() < size else _PACKED_CALLS)
        self.workers.submit_many([
            (lambda group: lambda: self._consume_each(mq, pq, group))(chunks[i:i + per_task])
            for i in range(0, len(chunks), per_task)])

    def _consume_each(self, mq: MessageQueue, pq: ProcessQueue, chunks: list[list[MessageExt]]) -> None:
        done: list[MessageExt] = []
        core = self.core
        for chunk in chunks:
            if not core.running:
                break  # shutting down: what is left stays held, so the committed offset stops before it
            done += self._consume(mq, pq, chunk, remove=False)
        if done:
            pq.remove_messages(done)  # once per task: one lock and one heap walk for all its calls

    def _consume(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt],
                 remove: bool = True) -> list[MessageExt]:
        """One listener call; returns the messages it settled (removed from ``pq`` unless not ``remove``)."""
        if pq.dropped:
            return []
        call = self.begin_call(mq, msgs)
        try:
            status = _call_listener(self.listener, msgs, ConsumeConcurrentlyStatus.RECONSUME_LATER, self.core.group,
                                    call.trace, call.sub)
            return self._settle(self.core, mq, pq, msgs, self.end_call(call, status), remove)
        finally:
            call.close()

    def begin_call(self, mq: MessageQueue, msgs: list[MessageExt]) -> ListenerCall:
        """Before a listener call: stamp the messages' consume start and start their process span (current
        until the call closes, through the send-back of what failed) and message trace."""
        now_ms = int(time.time() * 1000)
        for m in msgs:
            m.consume_start_time = now_ms
        tracer = self.msg_trace
        return ListenerCall(start_process(self.core.group, mq, msgs), None if tracer is None else tracer.before(msgs))

    def end_call(self, call: ListenerCall, status: Any) -> Any:
        """After a listener call: record its outcome; the status to settle by (RECONSUME_LATER for anything that
        is not a ConsumeConcurrentlyStatus)."""
        if call.sub is not None:
            self.msg_trace.after(call.sub, status, ConsumeConcurrentlyStatus.CONSUME_SUCCESS,  # type: ignore[union-attr]
                                 self.consume_timeout_ms)
        if status is None or not isinstance(status, (str, ConsumeConcurrentlyStatus)):
            log.warning("listener_returned_no_status", group=self.core.group, returned=repr(status))
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if call.trace is not None and status != ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            call.trace.failed(status)
        return status

    def listener_failed(self, call: ListenerCall, msgs: list[MessageExt], exc: Exception) -> Any:
        """A listener call raised (call this where the exception is being handled): logged and recorded; the
    status it counts as (RECONSUME_LATER)."""
        return _listener_raised(msgs, ConsumeConcurrentlyStatus.RECONSUME_LATER, self.core.group, exc, call.trace,
                                call.sub)

    def _settle(self, core: ConsumerCore, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt],
                status: Any, remove: bool) -> list[MessageExt]:
        """After a listener call: send back what failed; returns the messages settled (removed from ``pq``
        unless not ``remove``)."""
        if pq.dropped:
            # The queue went to another client while we consumed: it will redeliver from the last commit.
            return []
        done = msgs
        if status != ConsumeConcurrentlyStatus.CONSUME_SUCCESS and not core.running:
            # A failure that comes back after shutdown began is not sent back: the messages stay held, the
            # offsets persisted at shutdown stop before them, and the group's next owner consumes them again.
            return []
        if status != ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            done = []
            if core.message_model is MessageModel.BROADCASTING:
                for m in msgs:
                    log.warning("broadcast_consume_failed_dropped", group=core.group, msg_id=m.msg_id)
                done = msgs
            else:
                later: list[MessageExt] = []  # the broker did not take them: consumed again here
                for m in msgs:
                    if not pq.holds(m):
                        continue  # the consume timeout already handed it back
                    sent = send_message_back(core, m, mq, 0, self.max_reconsume_times)
                    (done if sent else later).append(m)
                if later:
                    for m in later:
                        m.reconsume_times += 1
                    self._consume_later(mq, pq, later)
        if done and remove:
            pq.remove_messages(done)  # moves pq.committed_offset, which the consumer persists
        return done

    def _consume_later(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Consume ``msgs`` again here after RECONSUME_LOCALLY_DELAY_MS (the broker did not take them back)."""
        self.core.scheduler.call_later(RECONSUME_LOCALLY_DELAY_MS,
                                       lambda: self.workers.submit(lambda: self._reconsume(mq, pq, msgs)))

    def _reconsume(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Consume again, locally, messages the broker did not take back (unless the timeout has since)."""
        held = [m for m in msgs if pq.holds(m)]
        if held:
            self._consume(mq, pq, held)

    # --- consume timeout (RocketMQ's cleanExpiredMsg) ---

    def periodic(self) -> None:
        """Called often by the consumer's task thread: runs the consume-timeout check when it is due."""
        now = time.monotonic()
        if now < self._next_expiry_check or not self.core.started:
            return
        self._next_expiry_check = now + self._expiry_check_s
        if self.core.message_model is MessageModel.BROADCASTING:
            return
        for mq, pq in list(self.core.rebalance.process_queues.items()):
            self.clean_expired(mq, pq)

    def clean_expired(self, mq: MessageQueue, pq: ProcessQueue) -> int:
        """Hand back the messages at the head of ``pq`` whose listener started longer than the consume
        timeout ago: each goes to the retry topic (delay level 3) and leaves the process queue, so the
        queue's offset moves on. One the broker does not take stays, for the next check. Returns how
        many went."""
        handed = 0
        for _ in range(_EXPIRED_PER_CHECK):
            if pq.dropped:
                break
            m = pq.first_message()
            if m is None or not m.consume_start_time:
                break
            if time.time() * 1000 - m.consume_start_time <= self.consume_timeout_ms:
                break
            if not send_message_back(self.core, m, mq, EXPIRED_DELAY_LEVEL, self.max_reconsume_times):
                break
            log.info("consume_timeout_sent_back", group=self.core.group, msg_id=m.msg_id, mq=str(mq),
                     queue_offset=m.queue_offset)
            pq.remove_messages([m])
            handed += 1
        return handed


class OrderlyConsumeService:
    """Consumes each queue on one thread at a time, in offset order, while this client holds its broker lock."""

    #: The consumer's message trace hooks (set when it has enable_msg_trace).
    msg_trace: MsgTracer | None = None

    def __init__(self, core: ConsumerCore, listener: Listener, thread_nums: int, batch_max_size: int,
                 suspend_time_ms: int, max_reconsume_times: int = -1) -> None:
        self.core = core
        self.listener = listener
        self.batch_max_size = batch_max_size
        self.suspend_time_ms = suspend_time_ms
        #: Local retries of a message before it is dead-lettered; -1: retried for ever (RocketMQ's default).
        self.max_reconsume_times = max_reconsume_times
        self.workers = _Workers(f"consume-orderly-{core.group}", thread_nums)

    def start(self) -> None:
        self.workers.start()

    def stop(self, timeout_s: float) -> None:
        self.workers.stop(timeout_s)

    def submit(self, req: PullRequest, msgs: list[MessageExt]) -> None:
        pq = req.pq
        if req.mq.topic == self.core.retry_topic:
            reset_retry_topic(msgs)
        if pq.is_suspended():
            return  # the task scheduled at the end of the pause takes these too
        self._schedule(req.mq, pq, 0)

    def _schedule(self, mq: MessageQueue, pq: ProcessQueue, delay_ms: float) -> None:
        if delay_ms <= 0:
            self.workers.submit(lambda: self._run(mq, pq))
        else:
            self.core.scheduler.call_later(delay_ms, lambda: self.workers.submit(lambda: self._run(mq, pq)))

    def _run(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        if pq.dropped:
            return
        # One task per queue at a time: a second one finding the queue busy leaves.
        if not pq.task_lock.acquire(blocking=False):
            return
        try:
            drained = self._consume_queue(mq, pq)
        finally:
            pq.task_lock.release()
        # Messages that arrived while the lock was being released found the queue busy: take them now.
        if drained and not pq.dropped and pq.msg_count > 0:
            self._schedule(mq, pq, 0)

    def _consume_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        """Consume ``pq`` in order until it is empty (True) or must pause (False)."""
        core = self.core
        clustering = core.message_model is MessageModel.CLUSTERING
        begin = time.monotonic()
        while not pq.dropped and core.running:
            if clustering and (not pq.locked or pq.lock_expired()):
                self._try_lock_later(mq, pq)
                return False
            if time.monotonic() - begin > MAX_TIME_CONSUME_CONTINUOUSLY_S:
                self._schedule(mq, pq, 10)
                return False
            msgs = pq.take_messages(self.batch_max_size)
            if not msgs:
                return True
            with pq.consume_lock:
                if pq.dropped:
                    return False
                # The process span stays current through the dead-lettering of what used up its retries.
                trace = start_process(core.group, mq, msgs)
                tracer = self.msg_trace
                sub = None if tracer is None else tracer.before(msgs)
                try:
                    status = _call_listener(self.listener, msgs, ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT,
                                            core.group, trace, sub)
                    if sub is not None:
                        tracer.after(sub, status, ConsumeOrderlyStatus.SUCCESS)  # type: ignore[union-attr]
                    if status is None or not isinstance(status, (str, ConsumeOrderlyStatus)):
                        log.warning("listener_returned_no_status", group=core.group, returned=repr(status))
                        status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                    if status == ConsumeOrderlyStatus.SUCCESS:
                        # Committed even if the queue was taken away meanwhile: its release waits for
                        # this lock and persists this offset before the next owner may lock the queue.
                        pq.commit()
                        continue
                    if trace is not None:
                        trace.failed(status)
                    again = self._retry_or_dead_letter(mq, msgs)
                finally:
                    if trace is not None:
                        trace.finish()
                if not again:
                    # Every message of the batch is in the dead-letter queue now: the queue moves on.
                    pq.commit()
                    continue
            pq.make_messages_to_consume_again(again)
            pq.suspend_until = time.monotonic() + self.suspend_time_ms / 1000.0
            self._schedule(mq, pq, self.suspend_time_ms)
            return False
        return False

    def _retry_or_dead_letter(self, mq: MessageQueue, msgs: list[MessageExt]) -> list[MessageExt]:
        """After a failed batch: the messages to consume again (RocketMQ's checkReconsumeTimes). One that has
        used up its retries is dead-lettered instead; if the broker does not take it, it is retried too, so
        it is never lost. Dead-lettered ones stay taken and are committed with the next commit."""
        # Broadcasting has no broker retry or dead-letter queue: its messages are retried locally.
        limit = self.max_reconsume_times if self.core.message_model is MessageModel.CLUSTERING else -1
        again = []
        for m in msgs:
            if 0 <= limit <= m.reconsume_times and send_message_back(
                    self.core, m, mq, DEAD_LETTER_DELAY_LEVEL, limit):
                log.warning("orderly_message_dead_lettered", group=self.core.group, msg_id=m.msg_id, mq=str(mq),
                            reconsume_times=m.reconsume_times)
                continue
            m.reconsume_times += 1
            again.append(m)
        return again

    def _try_lock_later(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        def relock() -> None:
            if pq.dropped:
                return
            if mq in self.core.rebalance.lock_batch([mq]):
                pq.locked = True
                pq.last_lock_timestamp = time.monotonic()
                self._schedule(mq, pq, 0)
            else:
                self._schedule(mq, pq, 3000)
        self.core.scheduler.call_later(LOCK_RETRY_DELAY_MS, lambda: self.workers.submit(relock))

