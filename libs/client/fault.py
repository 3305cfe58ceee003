"""Latency fault tolerance: keep sends away from brokers that were slow or failed.

RocketMQ's MQFaultStrategy and LatencyFaultToleranceImpl. After each send
the producer reports the broker's latency; a latency at or above a step of
``LATENCY_MAX_MS`` makes the broker "not available" for the matching
``NOT_AVAILABLE_DURATION_MS``. A failed send counts as 30 s of latency
(``isolation``), which benches the broker for the longest step. Queue choice
then prefers brokers that are available.

One addition to RocketMQ: brokers found unreachable (no connection, a failed
heartbeat) are kept in a separate table that queue choice honours even with
latency fault tolerance off. RocketMQ gets this for free from TCP (a refused
connection fails at once); over ZeroMQ a dead peer only shows as a request
that times out, so without it every other send would wait out part of its
timeout on a broker known to be down.

A bench that a send failing on the way (no connection, no answer) caused is
lifted once a heartbeat reaches the broker again (``mark_reached``), as
RocketMQ 5's fault detector does for brokers it marked unreachable: RocketMQ 4
benches such a broker for ten minutes, so a broker paused past the send timeout
and then resumed would get no sends from that producer for as long. A broker
that answered with an error stays benched for its time.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocketmesh.client.route import TopicPublishInfo
from rocketmesh.model.message import MessageQueue

#: Latency thresholds (ms), RocketMQ's MQFaultStrategy.latencyMax.
LATENCY_MAX_MS: tuple[int, ...] = (50, 100, 550, 1000, 2000, 3000, 15000)
#: How long (ms) a broker is avoided after a latency at each threshold, RocketMQ's notAvailableDuration.
NOT_AVAILABLE_DURATION_MS: tuple[int, ...] = (0, 0, 30000, 60000, 120000, 180000, 600000)
#: The latency a failed send is reported as.
ISOLATION_LATENCY_MS = 30000
#: How long a broker found unreachable is skipped unless a heartbeat reaches it sooner.
UNREACHABLE_DURATION_MS = 30000

Clock = Callable[[], float]


def _now_ms() -> float:
    return time.monotonic() * 1000.0


def compute_not_available_duration(latency_ms: float) -> int:
    """The not-available duration (ms) for a send that took ``latency_ms``."""
    for i in range(len(LATENCY_MAX_MS) - 1, -1, -1):
        if latency_ms >= LATENCY_MAX_MS[i]:
            return NOT_AVAILABLE_DURATION_MS[i]
    return 0


@dataclass(slots=True)
class FaultItem:
    """One broker's last reported latency and when it is available again."""

    name: str
    current_latency: float
    start_timestamp: float
    #: When a send that failed on the way (the broker out of reach) benched it (clock ms); 0 when a slow or
    #: error answer did.
    failed_at: float = 0.0

    def is_available(self, now_ms: float) -> bool:
        """True once the bench time is over."""
        return now_ms >= self.start_timestamp


class LatencyFaultTolerance:
    """broker name -> FaultItem (RocketMQ's LatencyFaultToleranceImpl). Thread-safe."""

    def __init__(self, clock: Clock = _now_ms) -> None:
        self._clock = clock
        self._items: dict[str, FaultItem] = {}
        self._lock = threading.Lock()
        self._which_item_worst = 0
        self._reached: dict[str, float] = {}

    def update_fault_item(self, name: str, current_latency: float, not_available_duration: float,
                          failed: bool = False) -> None:
        """Record a latency and bench ``name`` for ``not_available_duration`` ms from now (``failed``: a send
        to it failed, rather than answered slowly)."""
        now = self._clock()
        start = now + not_available_duration
        failed_at = now if failed else 0.0
        with self._lock:
            item = self._items.get(name)
            if item is None:
                self._items[name] = FaultItem(name, current_latency, start, failed_at)
            else:
                item.current_latency = current_latency
                item.start_timestamp = start
                item.failed_at = failed_at

    def mark_reached(self, name: str) -> None:
        """A request (a heartbeat) reached ``name`` and was answered just now."""
        self._reached[name] = self._clock()

    def reached_at(self, name: str) -> float:
        """When ``name`` was last reached (clock ms), 0 when never."""
        return self._reached.get(name, 0.0)

    def failed_before(self, name: str, t: float) -> bool:
        """True when ``name`` is benched because a send to it failed before ``t`` (clock ms)."""
        item = self._items.get(name)
        return item is not None and 0 < item.failed_at < t

    def is_available(self, name: str) -> bool:
        """True when ``name`` has no entry or its bench time is over."""
        item = self._items.get(name)
        return item is None or item.is_available(self._clock())

    def remove(self, name: str) -> None:
        """Forget ``name``: it is available again."""
        with self._lock:
            self._items.pop(name, None)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def pick_one_at_least(self) -> str | None:
        """The least bad broker on record: from the better half by (available, latency, start), or None."""
        now = self._clock()
        with self._lock:
            items = list(self._items.values())
            if not items:
                return None
            random.shuffle(items)
            items.sort(key=lambda it: (not it.is_available(now), it.current_latency, it.start_timestamp))
            half = len(items) // 2
            if half <= 0:
                return items[0].name
            i = self._which_item_worst % half
            self._which_item_worst += 1
            return items[i].name


class MQFaultStrategy:
    """Queue choice for a producer, with or without latency fault tolerance.

    ``unreachable`` is the table of brokers known to be down, usually the
    client instance's (shared by its producers and fed by its heartbeats).
    """

    def __init__(
        self,
        send_latency_fault_enable: bool = False,
        *,
        unreachable: LatencyFaultTolerance | None = None,
        clock: Clock = _now_ms,
    ) -> None:
        self.send_latency_fault_enable = send_latency_fault_enable
        self.latency = LatencyFaultTolerance(clock)
        self.unreachable = unreachable if unreachable is not None else LatencyFaultTolerance(clock)

    def update_fault_item(self, broker_name: str, current_latency: float, isolation: bool,
                          reachable: bool = True) -> None:
        """Report a send's latency (``isolation``: it failed; ``reachable``: the broker answered, with an
        error, rather than the request failing on the way) when fault tolerance is on. Only a bench for an
        unreachable broker is lifted by a heartbeat that reaches it: a broker that answers sends with errors
        answers heartbeats too."""
        if self.send_latency_fault_enable:
            latency = ISOLATION_LATENCY_MS if isolation else current_latency
            self.latency.update_fault_item(broker_name, current_latency, compute_not_available_duration(latency),
                                           failed=isolation and not reachable)

    def _available(self, broker_name: str) -> bool:
        """Not benched, or benched for a failure and reached by a heartbeat since (the bench is lifted)."""
        if self.latency.is_available(broker_name):
            return True
        if self.latency.failed_before(broker_name, self.unreachable.reached_at(broker_name)):
            self.latency.remove(broker_name)
            return True
        return False

    def mark_unreachable(self, broker_name: str, duration_ms: float = UNREACHABLE_DURATION_MS) -> None:
        """Skip ``broker_name`` for ``duration_ms`` (no connection to it came up)."""
        self.unreachable.update_fault_item(broker_name, ISOLATION_LATENCY_MS, duration_ms)

    def select_one_message_queue(self, tp: TopicPublishInfo, last_broker_name: str | None = None) -> MessageQueue:
        """The queue for the next attempt of a send; ``last_broker_name`` is the broker of a failed attempt."""
        if self.send_latency_fault_enable:
            return self._select_latency_aware(tp, last_broker_name)
        if len(self.unreachable):
            mq = self._select_reachable(tp, last_broker_name)
            if mq is not None:
                return mq
        return tp.select_one(last_broker_name)

    def _select_reachable(self, tp: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue | None:
        mqs = tp.message_queues
        n = len(mqs)
        if n == 0:
            return None
        reachable = self.unreachable.is_available
        fallback = None
        for _ in range(n):
            mq = mqs[tp.next_index() % n]
            if reachable(mq.broker_name):
                if mq.broker_name != last_broker_name:
                    return mq
                if fallback is None:
                    fallback = mq
        return fallback

    def _select_latency_aware(self, tp: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue:
        mqs = tp.message_queues
        n = len(mqs)
        available = self._available
        reachable = self.unreachable.is_available
        index = tp.next_index()
        for i in range(n):
            mq = mqs[(index + i) % n]
            if available(mq.broker_name) and reachable(mq.broker_name):
                return mq
        not_best = self.latency.pick_one_at_least()
        if not_best is not None:
            write_queue_nums = tp.write_queue_nums(not_best)
            if write_queue_nums > 0:
                return MessageQueue(tp.topic, not_best, tp.next_index() % write_queue_nums)
            self.latency.remove(not_best)
        return tp.select_one(last_broker_name)
