"""Put/get rates for runtime info, sampled once a second, and each group's get rate per topic over the last
minute (RocketMQ's BrokerStats snapshots and its GROUP_GET_NUMS statistics)."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from rocketmesh.runtime.service_thread import ServiceThread


class RateSampler(ServiceThread):
    """Keeps a minute of (time, counters) samples; rates are differences over a window."""

    def __init__(self, counters: Callable[[], dict[str, int]]) -> None:
        super().__init__("RateSampler", 1.0)
        self.counters = counters
        self.samples: collections.deque[tuple[float, dict[str, int]]] = collections.deque(maxlen=62)

    def run_once(self) -> None:
        self.samples.append((time.monotonic(), self.counters()))

    def rate(self, name: str, window_s: float) -> float:
        """Events per second of ``name`` over the last ``window_s`` seconds of samples."""
        if len(self.samples) < 2:
            return 0.0
        t1, last = self.samples[-1]
        first = self.samples[0]
        for t, c in self.samples:
            if t1 - t <= window_s:
                first = (t, c)
                break
        t0, c0 = first
        return (last.get(name, 0) - c0.get(name, 0)) / (t1 - t0) if t1 > t0 else 0.0


class GroupGetRates(ServiceThread):
    """Messages each group pulled from each topic a second, over the last minute (RocketMQ's GROUP_GET_NUMS
    per-minute TPS, which ConsumeStats.consumeTps reports). ``counts`` returns the cumulative pulled count
    by (topic, group); a snapshot is kept every ``interval_s``, enough to span a minute."""

    WINDOW_S = 60.0

    def __init__(self, counts: Callable[[], dict[tuple[str, str], float]], interval_s: float = 10.0) -> None:
        super().__init__("GroupGetRates", interval_s)
        self.counts = counts
        self.samples: collections.deque[tuple[float, dict[tuple[str, str], float]]] = collections.deque(
            maxlen=int(self.WINDOW_S / interval_s) + 1)

    def run_once(self) -> None:
        self.samples.append((time.monotonic(), self.counts()))

    def tps(self, topic: str, group: str) -> float:
        """``group``'s messages a second from ``topic`` between the oldest and newest snapshot kept (0 until
        two are)."""
        if len(self.samples) < 2:
            return 0.0
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        key = (topic, group)
        return (last.get(key, 0.0) - first.get(key, 0.0)) / (t1 - t0) if t1 > t0 else 0.0
