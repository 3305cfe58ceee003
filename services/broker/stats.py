"""Put/get rates for runtime info, sampled once a second (RocketMQ's BrokerStats snapshots)."""

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
