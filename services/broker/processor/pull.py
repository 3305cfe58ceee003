"""PULL_MESSAGE: checks, the filtered read, and long polling (RocketMQ's PullMessageProcessor and
PullRequestHoldService).

A pull that finds nothing new is held, not answered, when the client allows
it (``PullSysFlag.SUSPEND``). One thing wakes it: the store's arriving
listener, which a put calls on the putting thread once its messages are
readable; the held pulls of the queues it grew are run again and answered. A
pull whose new messages all fail its filter keeps waiting from the later
offset, so a selective consumer is not sent round trips for messages it does
not want. A pull is held only after one more look at its queue's end, so a put
that lands between the read and the hold is not missed. The hold thread only
answers pulls whose deadline came (long polling: the client's suspend timeout;
short polling: ``shortPollingTimeMills``). Nothing spins while a pull waits.
"""

from __future__ import annotations

import heapq
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rocketmesh.broker.message_filter import filter_for
from rocketmesh.broker.metrics import BrokerMetrics
from rocketmesh.broker.store import GetMessageStatus
from rocketmesh.filter import FilterSyntaxError
from rocketmesh.model.route import MASTER_ID, Perm
from rocketmesh.remoting import RemotingCommand, RequestContext, ResponseCode, response_to
from rocketmesh.remoting.protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
)
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.broker.parts import BrokerParts

log = get_logger("broker", component="pull")

#: Store read outcome -> response code, as RocketMQ answers them.
_CODES = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}
#: A woken pull that still has nothing for its filter keeps waiting (from past what it skipped).
_KEEP_HOLDING = (GetMessageStatus.NO_MATCHED_MESSAGE.value, GetMessageStatus.OFFSET_OVERFLOW_ONE.value)
#: Smallest size of the deadline heap at which it is rebuilt without answered pulls.
_COMPACT_MIN = 1024


@dataclass(eq=False)
class _HeldPull:
    """A pull waiting for its queue to grow."""

    request: RemotingCommand
    ctx: RequestContext
    header: PullMessageRequestHeader
    #: Offset the next read starts at (moves past messages the filter refused while held).
    offset: int
    deadline: float
    done: bool = field(default=False)


class PullMessageProcessor:
    """Answers PULL_MESSAGE; holds pulls that find nothing (see the module docstring)."""

    def __init__(self, broker: BrokerParts, metrics: BrokerMetrics) -> None:
        self.broker = broker
        self.metrics = metrics
        self.store = broker.store
        cfg = broker.config
        self.long_polling = cfg.long_polling_enable
        self.short_polling_s = cfg.short_polling_time_mills / 1000.0
        self._held: dict[tuple[str, int], list[_HeldPull]] = {}
        self._deadlines: list[tuple[float, int, _HeldPull]] = []
        #: The deadline heap is rebuilt without answered pulls when it grows past this.
        self._compact_at = _COMPACT_MIN
        self._seq = 0
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stopped = False
        self._thread = threading.Thread(target=self._deadline_loop, name="PullRequestHoldService", daemon=True)

    def start(self) -> None:
        self.store.register_arriving_listener(self.on_arriving)
        self._thread.start()

    def stop(self) -> None:
        """Answer every held pull now (PULL_NOT_FOUND with its offsets) and stop the hold thread."""
        with self._cond:
            self._stopped = True
            held = [h for hs in self._held.values() for h in hs]
            self._held.clear()
            self._deadlines.clear()
            self._cond.notify_all()
        for h in held:
            self._answer(h)
        self._thread.join(2.0)

    @property
    def held_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._held.values())

    # --- requests ---

    def handle(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand | None:
        """PULL_MESSAGE (register it guarded: a bad header raises HeaderError)."""
        header = PullMessageRequestHeader.from_ext(req.ext)
        if "subscription" not in req.ext:
            # RocketMQ's Java push consumers leave the expression out of their pulls: the broker filters by the
            # subscription their heartbeats registered, as RocketMQ's does.
            sub = self.broker.clients.subscription(header.consumer_group, header.topic)
            if sub is None:
                return response_to(req, ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                   f"the consumer's subscription not exist: group {header.consumer_group} has "
                                   f"registered no subscription of topic {header.topic} (send a heartbeat first)")
            header.subscription = str(sub.get("subString") or "*")
            header.expression_type = str(sub.get("expressionType") or "TAG")
        resp = self._process(req, header, header.queue_offset, allow_suspend=True, ctx=ctx)
        if resp is None:
            return None
        if header.sys_flag & PullSysFlag.COMMIT_OFFSET and not self.broker.is_slave:
            try:
                self.broker.offsets.commit_offset(ctx.remote, header.consumer_group, header.topic,
                                                  header.queue_id, header.commit_offset)
            except ValueError as exc:
                log.warning("commit_offset_refused", group=header.consumer_group, error=str(exc))
        return resp

    def _process(self, req: RemotingCommand, h: PullMessageRequestHeader, offset: int, allow_suspend: bool,
                 ctx: RequestContext | None = None) -> RemotingCommand | None:
        """The response for a pull from ``offset``; None when the pull was held."""
        broker = self.broker
        if not Perm.is_readable(broker.config.broker_permission):
            return response_to(req, ResponseCode.NO_PERMISSION,
                               f"the broker[{broker.config.broker_name}] pulling message is forbidden")
        group_cfg = broker.subscription_groups.find(h.consumer_group)
        if group_cfg is None:
            return response_to(req, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                               f"subscription group [{h.consumer_group}] does not exist")
        if not group_cfg.consume_enable:
            return response_to(req, ResponseCode.NO_PERMISSION,
                               f"subscription group no permission, {h.consumer_group}")
        topic_cfg = broker.topics.get(h.topic)
        if topic_cfg is None:
            return response_to(req, ResponseCode.TOPIC_NOT_EXIST,
                               f"topic[{h.topic}] not exist, apply first please!")
        if not topic_cfg.readable:
            return response_to(req, ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if not 0 <= h.queue_id < topic_cfg.read_queue_nums:
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                               f"topicConfig.readQueueNums:[{topic_cfg.read_queue_nums}]")
        if h.expression_type != "TAG" and not broker.config.enable_property_filter:
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"The broker does not support consumer to filter message by {h.expression_type} "
                               "(set enablePropertyFilter=true)")
        try:
            message_filter = filter_for(h.subscription, h.expression_type)
        except FilterSyntaxError as exc:
            return response_to(req, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                               f"parse the consumer's subscription failed: {exc}")
        max_nums = max(1, min(h.max_msg_nums, broker.config.max_pull_msg_nums))
        try:
            result = self.store.get_message(h.consumer_group, h.topic, h.queue_id, offset, max_nums, message_filter)
        except ValueError:
            # A read racing the expiry of the file it reads sees the mapping closed.
            result = None
        if result is None:
            store = self.store
            ext = PullMessageResponseHeader(offset, store.get_min_offset_in_queue(h.topic, h.queue_id),
                                            store.get_max_offset_in_queue(h.topic, h.queue_id)).to_ext()
            return response_to(req, ResponseCode.PULL_RETRY_IMMEDIATELY, "message was removing", ext)
        status = result.status
        if status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE):
            # An empty queue asked from a non-zero offset: the client's offset is wrong, fix it.
            code = ResponseCode.PULL_OFFSET_MOVED if offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _CODES[status]
        suspend = allow_suspend and h.sys_flag & PullSysFlag.SUSPEND
        if code == ResponseCode.PULL_NOT_FOUND and suspend and ctx is not None:
            timeout_ms = h.suspend_timeout_millis if self.long_polling else self.short_polling_s * 1000
            if timeout_ms > 0:
                self._hold(_HeldPull(req, ctx, h, offset, time.monotonic() + timeout_ms / 1000.0))
                return None
        suggest = MASTER_ID
        if broker.config.slave_read_enable and self.store.suggest_pulling_from_slave(result):
            suggest = group_cfg.which_broker_when_consume_slowly
        ext = PullMessageResponseHeader(result.next_begin_offset, result.min_offset, result.max_offset,
                                        suggest).to_ext()
        if code == ResponseCode.SUCCESS:
            body = b"".join(result.records)
            self.metrics.pulled(h.consumer_group, h.topic, h.queue_id, result.next_begin_offset,
                                  len(result.records), len(body))
            return response_to(req, code, None, ext, body)
        return response_to(req, code, status.value, ext)

    # --- long polling ---

    def _hold(self, held: _HeldPull) -> None:
        key = (held.header.topic, held.header.queue_id)
        with self._cond:
            stopped = self._stopped
            if not stopped:
                self._held.setdefault(key, []).append(held)
                self._seq += 1
                if len(self._deadlines) >= self._compact_at:
                    self._compact_deadlines()
                heapq.heappush(self._deadlines, (held.deadline, self._seq, held))
                if self._deadlines[0][2] is held:
                    self._cond.notify()
        if stopped:
            self._answer(held)
            return
        # A message may have been stored between the read and the hold: look once more. (A put after the
        # hold finds it held and wakes it; so did every earlier hold at this queue for itself.)
        end = self.store.get_max_offset_in_queue(*key)
        if end > held.offset:
            self._wake_queue(key, end)

    def _compact_deadlines(self) -> None:
        # Answered pulls stay in the heap until their deadline comes up (15 s by default); at thousands
        # of pulls a second that is tens of thousands of dead requests kept alive, which the garbage
        # collector then walks. Dropping them when the heap has doubled keeps this O(1) per pull.
        live = [e for e in self._deadlines if not e[2].done]
        heapq.heapify(live)
        self._deadlines = live
        self._compact_at = max(_COMPACT_MIN, 2 * len(live))

    def on_arriving(self, grown: list[tuple[str, int, int]]) -> None:
        """The store's arriving listener, on the putting thread: run again the pulls held at the queues
        a put just grew. Costs one dictionary look-up per queue while nothing is held."""
        held_table = self._held
        if not held_table:
            return
        for topic, queue_id, max_offset in grown:
            if (topic, queue_id) in held_table:
                self._wake_queue((topic, queue_id), max_offset)

    def _wake_queue(self, key: tuple[str, int], max_offset: int) -> None:
        """Run again the pulls held at ``key`` that wait below ``max_offset``."""
        with self._lock:
            hs = self._held.get(key)
            if not hs:
                return
            ready = [h for h in hs if h.offset < max_offset]
            if not ready:
                return
            rest = [h for h in hs if h.offset >= max_offset]
            if rest:
                self._held[key] = rest
            else:
                del self._held[key]
        for h in ready:
            self._wake(h)

    def _wake(self, held: _HeldPull) -> None:
        """Run a held pull again: answer it, or keep holding from past what the filter refused."""
        if held.done:
            return
        resp = self._process(held.request, held.header, held.offset, allow_suspend=False)
        keep_holding = False
        if resp is not None and resp.remark in _KEEP_HOLDING and time.monotonic() < held.deadline:
            next_offset = PullMessageResponseHeader.from_ext(resp.ext).next_begin_offset
            keep_holding = next_offset >= held.offset
        if keep_holding:
            held.offset = next_offset
            key = (held.header.topic, held.header.queue_id)
            with self._lock:
                if not self._stopped:
                    self._held.setdefault(key, []).append(held)
                    resp = None
            if resp is None:
                # As in _hold: a put may have come between this read and the hold.
                end = self.store.get_max_offset_in_queue(*key)
                if end > held.offset:
                    self._wake_queue(key, end)
                return
        self._respond(held, resp)

    def _answer(self, held: _HeldPull) -> None:
        """Answer a held pull with whatever its queue holds now (deadline or shutdown)."""
        if held.done:
            return
        self._respond(held, self._process(held.request, held.header, held.offset, allow_suspend=False))

    def _respond(self, held: _HeldPull, resp: RemotingCommand | None) -> None:
        held.done = True
        if resp is not None:
            held.ctx.respond(resp)

    def _deadline_loop(self) -> None:
        """Answer each held pull whose deadline came, with whatever its queue holds then."""
        while True:
            expired: list[_HeldPull] = []
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                while self._deadlines and (self._deadlines[0][2].done or self._deadlines[0][0] <= now):
                    _, _, h = heapq.heappop(self._deadlines)
                    if h.done:
                        continue
                    hs = self._held.get((h.header.topic, h.header.queue_id))
                    if hs is not None and h in hs:
                        hs.remove(h)
                        if not hs:
                            del self._held[(h.header.topic, h.header.queue_id)]
                    expired.append(h)
                if not expired:
                    self._cond.wait(self._deadlines[0][0] - now if self._deadlines else None)
                    continue
            for h in expired:
                try:
                    self._answer(h)
                except Exception:  # noqa: BLE001 - one bad pull must not stop the hold service
                    log.exception("held_pull_answer_failed", topic=h.header.topic)
