"""What the push and the pull consumer share: subscriptions, rebalance, offsets, and the pull loop.

Each queue this client consumes has one pull in flight at a time. A pull is
long-polled by the broker (held up to ``broker_suspend_max_time_ms`` when
there is nothing new); its messages go to the front-end (a consume service
or the poll cache) and the next pull is sent at once, or later under flow
control. A scheduler thread sends first pulls and delayed ones; a response is
handled on the remoting I/O thread as soon as it is read (decoded, handed to
the front-end, the next pull queued), so the ``deliver`` and ``can_pull``
hooks must never block.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rocketmesh.client.consumer.allocate import AllocateStrategy
from rocketmesh.client.consumer.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from rocketmesh.client.consumer.options import ConsumerOptions, PushConsumerOptions, option_properties
from rocketmesh.client.consumer.process_queue import ProcessQueue
from rocketmesh.client.consumer.pull_api import PullAPI, build_sys_flag
from rocketmesh.client.consumer.rebalance import Rebalance, subscribe_queues
from rocketmesh.client.consumer.types import ConsumeFromWhere, MessageModel, PullResult, PullStatus
from rocketmesh.client.errors import MQBrokerError, MQClientError, MQError
from rocketmesh.client.instance import ClientInstance
from rocketmesh.client.running_info import (
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_THREADPOOL_CORE_SIZE,
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
)
from rocketmesh.client.trace.tracing import start_receive
from rocketmesh.client.validators import check_group, check_topic
from rocketmesh.filter import ExpressionType, FilterSyntaxError, SubscriptionData, build_subscription
from rocketmesh.model.message import MessageConst, MessageExt, MessageQueue
from rocketmesh.model.topics import RETRY_GROUP_TOPIC_PREFIX, retry_topic, validate_topic_name
from rocketmesh.remoting import ResponseCode
from rocketmesh.runtime.log import get_logger

log = get_logger("client", component="consumer")

#: Pause before pulling a queue again under flow control, after an error, after an illegal offset (ms).
PULL_DELAY_WHEN_FLOW_CONTROL_MS = 50
PULL_DELAY_WHEN_EXCEPTION_MS = 3000
PULL_DELAY_WHEN_SUSPENDED_MS = 1000
#: RocketMQ's offset-store directory for broadcasting consumers is ~/.rocketmq_offsets.
DEFAULT_OFFSET_STORE_DIR = os.path.join(os.path.expanduser("~"), ".rocketmesh_offsets")


def _nothing(*_: Any) -> None:
    """The default of an optional hook."""


@dataclass(frozen=True)
class ConsumerHooks:
    """What a consumer built on the core supplies, given to the core when it is made.

    ``deliver(request, messages)``: the messages are in the queue's ProcessQueue; hand them on.
    ``can_pull(request) -> delay_ms``: 0 to pull now, else how long to wait (flow control).
    ``on_queue_removed(mq, pq)``: a queue went to another client (or the consumer stops).
    ``periodic()``: called often from the core's task thread.
    All these run on client threads and must not block.
    ``consume_directly(msg)``: run one message through the listener for an admin (CONSUME_MESSAGE_DIRECTLY);
    None for a consumer without a listener. It may block: it runs on a thread of its own.
    """

    deliver: Callable[[PullRequest, list[MessageExt]], None]
    can_pull: Callable[[PullRequest], float]
    on_queue_removed: Callable[[MessageQueue, ProcessQueue], None] = _nothing
    periodic: Callable[[], None] = _nothing
    consume_directly: Callable[[MessageExt], ConsumeMessageDirectlyResult] | None = None


def make_subscription(topic: str, expression: str | None = "*", sql: str | None = None, *,
                      system: bool = False) -> SubscriptionData:
    """A subscription of ``topic`` by tags (``"TagA || TagB"``, ``"*"``) or by a SQL92 expression.

    ``system`` admits system topics (for the mesh's own services, such as the scheduler).
    Raises MQClientError (SUBSCRIPTION_PARSE_FAILED) for an illegal topic or an expression that does not parse.
    """
    if system:
        why = validate_topic_name(topic) if isinstance(topic, str) else "the topic must be a string"
        if why is not None:
            raise MQClientError(f"the specified topic is invalid: {why}", ResponseCode.MESSAGE_ILLEGAL)
    else:
        check_topic(topic)
    try:
        if sql is not None:
            return build_subscription(topic, sql, ExpressionType.SQL92)
        return build_subscription(topic, expression, ExpressionType.TAG)
    except (FilterSyntaxError, ValueError) as exc:
        raise MQClientError(f"subscription of {topic!r} failed: {exc}", ResponseCode.SUBSCRIPTION_PARSE_FAILED) from exc


@dataclass(eq=False)
class PullRequest:
    """The pull state of one assigned queue."""

    mq: MessageQueue
    pq: ProcessQueue
    next_offset: int


class _Scheduler:
    """One thread running callables at due times (pulls now and later, retries after a pause)."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[[], object]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def call_later(self, delay_ms: float, fn: Callable[[], object]) -> None:
        due = time.monotonic() + delay_ms / 1000.0
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (due, next(self._seq), fn))
            if self._heap[0][2] is fn:
                self._cond.notify()

    def call_soon(self, fn: Callable[[], object]) -> None:
        self.call_later(0, fn)

    def _run(self) -> None:
        heap = self._heap
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    if heap:
                        wait = heap[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                batch = []
                now = time.monotonic()
                while heap and heap[0][0] <= now:
                    batch.append(heapq.heappop(heap)[2])
            for fn in batch:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - one failed task must not stop the others
                    log.exception("scheduled_task_failed")


@dataclass(frozen=True)
class _Session:
    """What a consumer's ``start()`` builds: its share of the client instance and what works through it."""

    instance: ClientInstance
    offset_store: OffsetStore
    rebalance: Rebalance
    pull_api: PullAPI


class ConsumerCore:
    """The machinery behind :class:`PushConsumer`, :class:`PullConsumer` and the system groups of the
    scheduler and the txn-checker (see the module docstring): settled by its ``options``, told what to
    do with what it pulls by its ``hooks``.

    ``consume_type`` is what heartbeats report (CONSUME_PASSIVELY: a listener is pushed messages;
    CONSUME_ACTIVELY: the application pulls). ``auto_commit``: the core copies consumption progress
    to the offset store on its own (periodically, with pulls, when a queue goes, on shutdown), as the
    push consumer wants; a front-end that commits itself (the PullConsumer) turns it off.
    """

    def __init__(self, group: str, namesrv: Any, options: ConsumerOptions, hooks: ConsumerHooks, *,
                 orderly: bool = False, consume_type: str = "CONSUME_PASSIVELY", auto_commit: bool = True,
                 receive_spans: bool = False) -> None:
        check_group(group)
        self.group = group
        #: Trace each pull as a ``receive <topic>`` span (a PullConsumer's; a push consumer's messages have
        #: their process spans, and its long polls would only add noise).
        self.receive_spans = receive_spans
        #: ``%RETRY%<group>``: where the broker puts the group's failed messages for another try.
        self.retry_topic = retry_topic(group)
        self.options = options
        self.hooks = hooks
        self.consume_type = consume_type
        self.message_model: MessageModel = options.message_model  # type: ignore[assignment]
        self.consume_from: ConsumeFromWhere = options.consume_from  # type: ignore[assignment]
        self.consume_timestamp: int = options.consume_timestamp  # type: ignore[assignment]
        self.allocate: AllocateStrategy = options.allocate  # type: ignore[assignment]
        self.orderly = orderly
        self.pull_batch_size = options.pull_batch_size
        self.pull_interval_ms = options.pull_interval_ms
        self.broker_suspend_max_time_ms = options.broker_suspend_max_time_ms
        self.consumer_timeout_ms_when_suspend = options.consumer_timeout_ms_when_suspend
        self.persist_interval_s = options.persist_consumer_offset_interval_ms / 1000.0
        self.rebalance_interval_s = options.rebalance_interval_ms / 1000.0
        self.offset_store_dir = options.offset_store_dir or DEFAULT_OFFSET_STORE_DIR
        self.namesrv = namesrv
        self.instance_options = options.instance_options()
        self.subscriptions: dict[str, SubscriptionData] = {}
        #: What ``start()`` builds; None before it.
        self._session: _Session | None = None
        self.scheduler = _Scheduler(f"pull-{group}")
        self.running = False
        self.paused = False
        #: False when queues are assigned by hand (PullConsumer.assign): no rebalance then.
        self.use_rebalance = True
        self.auto_commit = auto_commit
        self._tasks: threading.Thread | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._rebalance_requested = True
        #: Pull requests by queue, for seeks and resets.
        self.requests: dict[MessageQueue, PullRequest] = {}
        #: When ``start()`` last succeeded (epoch ms).
        self.start_timestamp = 0

    # --- what start() built ---

    @property
    def started(self) -> bool:
        """``start()`` built the client instance, offset store and rebalance (they stay after a shutdown)."""
        return self._session is not None

    def _live(self) -> _Session:
        if self._session is None:
            raise MQClientError(f"the consumer of group {self.group} is not started")
        return self._session

    @property
    def instance(self) -> ClientInstance:
        """The shared client instance (raises MQClientError before ``start()``)."""
        return self._live().instance

    @property
    def offset_store(self) -> OffsetStore:
        return self._live().offset_store

    @property
    def rebalance(self) -> Rebalance:
        return self._live().rebalance

    @property
    def pull_api(self) -> PullAPI:
        return self._live().pull_api

    # --- subscriptions ---

    def subscribe(self, topic: str, expression: str | None = "*", sql: str | None = None, *,
                  system: bool = False) -> SubscriptionData:
        """Subscribe ``topic`` (see :func:`make_subscription`); a running consumer rebalances at once."""
        sub = make_subscription(topic, expression, sql, system=system)
        self.subscriptions[topic] = sub
        if self._session is not None:
            self._session.rebalance.subscriptions[topic] = sub
            self._follow_topic(topic)
            self._session.instance.send_heartbeat_to_all_brokers()
            self.rebalance_now()
        return sub

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)
        if self._session is not None:
            self._session.rebalance.subscriptions.pop(topic, None)
            self.rebalance_now()

    def heartbeat_entry(self) -> dict[str, Any]:
        """This group's entry of the HEARTBEAT body's consumerDataSet."""
        return {"groupName": self.group, "consumeType": self.consume_type,
                "messageModel": self.message_model.value, "consumeFromWhere": self.consume_from.value,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()], "unitMode": False}

    # --- what admins ask of a running consumer ---

    def running_info(self) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO: the settings, subscriptions and each held queue's figures (RocketMQ's
        ConsumerRunningInfo; the client instance adds what it knows)."""
        props = {"consumerGroup": self.group, **option_properties(self.options),
                 PROP_CONSUME_TYPE: self.consume_type, PROP_CONSUME_ORDERLY: str(self.orderly).lower(),
                 PROP_CONSUMER_START_TIMESTAMP: str(self.start_timestamp)}
        if isinstance(self.options, PushConsumerOptions):
            props[PROP_THREADPOOL_CORE_SIZE] = str(self.options.consume_thread_nums)
        info = ConsumerRunningInfo(props, list(self.subscriptions.values()))
        session = self._session
        if session is not None:
            store = session.offset_store
            for mq, pq in list(session.rebalance.process_queues.items()):
                stored = store.read(mq, ReadOffsetType.READ_FROM_MEMORY)
                info.mq_table[mq] = pq.info(max(stored, pq.committed_offset) if self.auto_commit else stored)
        return info

    def consume_message_directly(self, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult | None:
        """CONSUME_MESSAGE_DIRECTLY: ``msg`` (stored on ``broker_name``) through the listener; None when this
        consumer has none (a pull consumer)."""
        consume = self.hooks.consume_directly
        if consume is None:
            return None
        if msg.topic == self.retry_topic:
            original = msg.properties.get(MessageConst.RETRY_TOPIC)
            if original:
                msg.topic = original
        return consume(msg)

    # --- life cycle ---

    def start(self) -> None:
        if self.running:
            raise MQClientError("the consumer is already running")
        inst = ClientInstance.acquire(self.namesrv, **self.instance_options)
        try:
            offset_store: OffsetStore
            if self.message_model is MessageModel.BROADCASTING:
                offset_store = LocalFileOffsetStore(self.offset_store_dir, inst.client_id, self.group)
            else:
                offset_store = RemoteBrokerOffsetStore(inst, self.group)
            offset_store.load()
            rebalance = Rebalance(inst, self.group, self.message_model, self.allocate, self.orderly,
                                  self._on_queue_added, self._on_queue_removed)
            rebalance.subscriptions.update(self.subscriptions)
            self._session = _Session(inst, offset_store, rebalance, PullAPI(inst, self.group))
            inst.register_consumer(self.group, self.heartbeat_entry, self)
            for topic in self.subscriptions:
                self._follow_topic(topic)
            self._check_client_in_broker()
            inst.send_heartbeat_to_all_brokers()
        except BaseException:
            inst.unregister_consumer(self.group)
            inst.release()
            self._session = None
            raise
        self.running = True
        self.start_timestamp = int(time.time() * 1000)
        self.scheduler.start()
        self._tasks = threading.Thread(target=self._tasks_loop, name=f"consumer-tasks-{self.group}", daemon=True)
        self._tasks.start()

    def _follow_topic(self, topic: str) -> None:
        """Keep ``topic``'s route fresh from now on; fetch it now, and warn when no name server has one."""
        inst = self.instance
        inst.add_topic(topic)
        try:
            inst.update_topic_route(topic)
        except MQError as exc:
            log.warning("route_unavailable", topic=topic, error=str(exc))
            return
        if topic != self.retry_topic and not subscribe_queues(inst, topic):
            log.warning(f"topic {topic} does not exist: no name server has a route for it. The consumer "
                        f"waits until it is created (rocketmesh admin update-topic -t {topic}, or a first "
                        "send with autoCreateTopicEnable)", group=self.group, topic=topic)

    def _check_client_in_broker(self) -> None:
        """A SQL92 subscription must be one the brokers can run: ask them now, fail start otherwise."""
        inst = self.instance
        for sub in self.subscriptions.values():
            if sub.expression_type is ExpressionType.TAG:
                continue
            for name in sorted({mq.broker_name for mq in self._topic_queues(sub.topic)}):
                addr = inst.master_addr(name)
                if addr is None:
                    continue
                try:
                    inst.api.check_client_config(addr, self.group, sub.to_json())
                except MQBrokerError as exc:
                    raise MQClientError(f"the broker {name} cannot serve the subscription {sub.sub_string!r} of "
                                        f"{sub.topic}: {exc.remark}", exc.response_code) from exc

    def _topic_queues(self, topic: str) -> list[MessageQueue]:
        return subscribe_queues(self.instance, topic)

    def shutdown(self) -> None:
        """Stop pulling, persist offsets, release queue locks, leave the group (bounded)."""
        if not self.running:
            return
        self.running = False
        self._stop.set()
        self._wake.set()
        self.scheduler.stop()
        if self._tasks is not None:
            self._tasks.join(5.0)

    def finish_shutdown(self) -> None:
        """After the front-end drained what it holds: offsets out, locks released, unregister."""
        session = self._session
        if session is None:
            return
        try:
            if self.auto_commit:
                self.persist_offsets(session.rebalance.assigned())
            if self.orderly and self.message_model is MessageModel.CLUSTERING:
                session.rebalance.unlock_all()
        finally:
            session.instance.unregister_consumer(self.group)
            session.instance.release()

    def sync_offsets(self) -> None:
        """Copy how far each queue's consumption got into the offset store (memory)."""
        for mq, pq in list(self.rebalance.process_queues.items()):
            if pq.committed_offset >= 0 and not pq.dropped:
                self.offset_store.update(mq, pq.committed_offset, False)

    def persist_offsets(self, mqs: Sequence[MessageQueue] | None = None) -> None:
        session = self._session
        if session is None:
            return
        if self.auto_commit:
            self.sync_offsets()
        try:
            session.offset_store.persist_all(session.rebalance.assigned() if mqs is None else mqs)
        except Exception:  # noqa: BLE001
            log.exception("persist_offsets_failed", group=self.group)

    # --- background: rebalance, offsets, locks ---

    def rebalance_now(self) -> None:
        self._rebalance_requested = True
        self._wake.set()

    def _tasks_loop(self) -> None:
        next_rebalance = 0.0
        next_persist = time.monotonic() + self.persist_interval_s
        next_lock = time.monotonic() + 20.0
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                if self.use_rebalance and (self._rebalance_requested or now >= next_rebalance):
                    self._rebalance_requested = False
                    self.rebalance.do_rebalance()
                    soon = self.rebalance.retry_soon
                    next_rebalance = now + (1.0 if soon else self.rebalance_interval_s)
                if now >= next_persist:
                    next_persist = now + self.persist_interval_s
                    self.persist_offsets()
                if self.orderly and self.message_model is MessageModel.CLUSTERING and now >= next_lock:
                    next_lock = now + 20.0
                    self.rebalance.lock_all()
                self.hooks.periodic()
            except Exception:  # noqa: BLE001
                log.exception("consumer_task_failed", group=self.group)
            wait = min(next_rebalance if self.use_rebalance else next_persist, next_persist) - time.monotonic()
            self._wake.wait(max(0.01, min(wait, 1.0)))
            self._wake.clear()

    # --- queues coming and going ---

    def _on_queue_added(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        offset = self.compute_pull_from_where(mq)
        if offset < 0:
            log.warning("start_offset_unknown", group=self.group, mq=str(mq))
            return False
        req = PullRequest(mq, pq, offset)
        self.requests[mq] = req
        log.info("queue_assigned", group=self.group, mq=str(mq), offset=offset, client_id=self.instance.client_id)
        self.scheduler.call_soon(lambda: self.pull(req))
        return True

    def _on_queue_removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.requests.pop(mq, None)
        self.hooks.on_queue_removed(mq, pq)
        offset_store = self.offset_store
        if self.auto_commit and pq.committed_offset >= 0:
            offset_store.update(mq, pq.committed_offset, False)
        try:
            offset_store.persist(mq)
        except MQError as exc:
            log.warning("persist_offset_failed", mq=str(mq), error=str(exc))
        offset_store.remove(mq)
        log.info("queue_dropped", group=self.group, mq=str(mq), client_id=self.instance.client_id)

    def compute_pull_from_where(self, mq: MessageQueue) -> int:
        """Where consumption of a newly assigned queue starts (RocketMQ's computePullFromWhere); -1 unknown."""
        last = self.offset_store.read(mq, ReadOffsetType.READ_FROM_STORE)
        if last >= 0:
            return last
        if last != -1:
            return -1
        retry = mq.topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        try:
            if self.consume_from is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
                return 0
            if self.consume_from is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP and not retry:
                return self.search_offset(mq, self.consume_timestamp)
            return 0 if retry else self.max_offset(mq)
        except MQError as exc:
            log.warning("compute_pull_from_where_failed", mq=str(mq), error=str(exc))
            return -1

    def max_offset(self, mq: MessageQueue) -> int:
        return self.instance.api.get_max_offset(self.instance.find_master_addr(mq), mq)

    def min_offset(self, mq: MessageQueue) -> int:
        return self.instance.api.get_min_offset(self.instance.find_master_addr(mq), mq)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self.instance.api.search_offset(self.instance.find_master_addr(mq), mq, timestamp_ms)

    # --- pulling ---

    def pull(self, req: PullRequest) -> None:
        """Send the next pull of ``req``'s queue (on the scheduler thread, or on the remoting I/O thread
        from the previous pull's answer: nothing here may block)."""
        pq = req.pq
        if pq.dropped or not self.running:
            return
        pq.last_pull_timestamp = time.monotonic()
        if self.paused:
            self.scheduler.call_later(PULL_DELAY_WHEN_SUSPENDED_MS, lambda: self.pull(req))
            return
        delay = self.hooks.can_pull(req)
        if delay > 0:
            self.scheduler.call_later(delay, lambda: self.pull(req))
            return
        sub = self.subscriptions.get(req.mq.topic) or self._assigned_subscription(req.mq.topic)
        commit_offset = 0
        if self.message_model is MessageModel.CLUSTERING and self.auto_commit:
            commit_offset = pq.committed_offset
            if commit_offset < 0:
                commit_offset = self.offset_store.read(req.mq, ReadOffsetType.READ_FROM_MEMORY)
        sys_flag = build_sys_flag(commit_offset > 0, True, False)
        offset = req.next_offset

        early = [False]

        def on_found(next_offset: int) -> None:
            # Pipelining: the next pull goes out while this one's messages are decoded and delivered.
            if pq.dropped or not self.running or self.pull_interval_ms > 0:
                return
            req.next_offset = next_offset
            early[0] = True
            self.pull(req)

        receive = start_receive(self.group, req.mq) if self.receive_spans else None

        def on_result(result: PullResult | None, error: BaseException | None) -> None:
            if receive is not None:
                receive.finish(None if result is None else result.messages, error)
            self._on_pulled(req, offset, result, error, early[0])

        try:
            self.pull_api.pull_async(req.mq, sub, offset, self.pull_batch_size, sys_flag=sys_flag,
                                     commit_offset=max(commit_offset, 0),
                                     suspend_timeout_ms=self.broker_suspend_max_time_ms,
                                     timeout_ms=self.consumer_timeout_ms_when_suspend, callback=on_result,
                                     on_found=on_found, traceparent=None if receive is None else receive.traceparent)
        except Exception as exc:  # noqa: BLE001 - e.g. a route look-up refused on the I/O thread: retry later
            if receive is not None:
                receive.finish(None, exc)
            log.warning("pull_failed", mq=str(req.mq), error=str(exc))
            self.scheduler.call_later(PULL_DELAY_WHEN_EXCEPTION_MS, lambda: self.pull(req))

    def _assigned_subscription(self, topic: str) -> SubscriptionData:
        sub = build_subscription(topic, "*")
        self.subscriptions[topic] = sub
        return sub

    def _on_pulled(self, req: PullRequest, offset: int, result: PullResult | None,
                   error: BaseException | None, next_sent: bool = False) -> None:
        pq = req.pq
        if pq.dropped or not self.running:
            return
        if error is not None or result is None:
            if self.running:
                log.warning("pull_failed", mq=str(req.mq), error=str(error))
            # The broker may be gone (its slave then serves the queue): look at the route again soon.
            self.instance.request_route_refresh(req.mq.topic)
            self.scheduler.call_later(PULL_DELAY_WHEN_EXCEPTION_MS, lambda: self.pull(req))
            return
        status = result.status
        if status is PullStatus.FOUND:
            msgs = result.messages
            if msgs:
                pq.put_messages(msgs)
                self.hooks.deliver(req, msgs)
            else:
                pq.advance_committed(result.next_begin_offset)
            if next_sent:
                return
            req.next_offset = result.next_begin_offset
            if self.pull_interval_ms > 0:
                self.scheduler.call_later(self.pull_interval_ms, lambda: self.pull(req))
            else:
                self.pull(req)
            return
        if status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            req.next_offset = result.next_begin_offset
            # With nothing in flight, the stretch the broker filtered out counts as consumed.
            pq.advance_committed(req.next_offset)
            self.pull(req)
            return
        # OFFSET_ILLEGAL: start over from where the broker says, after a pause.
        log.warning("pull_offset_illegal", mq=str(req.mq), offset=offset, next=result.next_begin_offset)
        req.next_offset = result.next_begin_offset
        pq.dropped = True

        def fix() -> None:
            self.offset_store.update(req.mq, req.next_offset, False)
            try:
                self.offset_store.persist(req.mq)
            except MQError:
                pass
            with self.rebalance._lock:
                if self.rebalance.process_queues.get(req.mq) is pq:
                    self.rebalance.process_queues.pop(req.mq, None)
                    self.requests.pop(req.mq, None)
            self.rebalance_now()
        self.scheduler.call_later(PULL_DELAY_WHEN_EXCEPTION_MS * 3, fix)

    def restart_queue(self, mq: MessageQueue, offset: int) -> None:
        """Pull ``mq`` from ``offset`` with a fresh ProcessQueue; the old one is dropped with what it held."""
        with self.rebalance._lock:
            old = self.rebalance.process_queues.get(mq)
            if old is None:
                raise MQClientError(f"the message queue {mq} is not assigned to this consumer")
            old.dropped = True
            pq = ProcessQueue()
            pq.committed_offset = offset
            self.rebalance.process_queues[mq] = pq
            req = PullRequest(mq, pq, offset)
            self.requests[mq] = req
        self.scheduler.call_soon(lambda: self.pull(req))

    # --- offsets moved from outside ---

    def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: start the queues of ``topic`` over at ``offsets``."""
        if self._session is None:
            return
        with self.rebalance._lock:
            for mq, off in offsets.items():
                self.offset_store.update(mq, off, False)
                pq = self.rebalance.process_queues.pop(mq, None)
                self.requests.pop(mq, None)
                if pq is not None:
                    pq.dropped = True
                    pq.clear()
                    self.hooks.on_queue_removed(mq, pq)
        self.persist_offsets(list(offsets))
        self.rebalance_now()
