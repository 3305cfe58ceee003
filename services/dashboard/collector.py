"""The background sampler behind the charts and the sorted lists.

Every ``collectIntervalMs`` one round asks each name server for the cluster, each broker for its runtime
figures (in/out TPS, commitlog end, disk, replication) and each master for every group's progress in
one request (GET_BROKER_CONSUME_STATS), so that a page listing a thousand groups by lag costs no request
of its own. A round's result is a :class:`Snapshot`, replaced whole (readers take the reference and need
no lock); the last ``historyMinutes`` of rates and lags are kept for the charts.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocketmesh.client import Admin, MQError
from rocketmesh.client.results import ConsumeStats, OffsetWrapper
from rocketmesh.runtime.log import get_logger

from .kinds import TopicKind, topic_kind

log = get_logger("dashboard.collector")


def queue_lag(w: OffsetWrapper) -> int:
    """Messages of a queue the group has not consumed: never negative, and a queue with no committed offset
    (-1) counts from 0 (rocketmq-dashboard shows such queues as -1 or a negative lag)."""
    return max(0, w.broker_offset - max(0, w.consumer_offset))


def group_lag(stats: ConsumeStats) -> int:
    """A group's lag over the queues of ``stats`` (see :func:`queue_lag`)."""
    return sum(queue_lag(w) for w in stats.offset_table.values())


def first_rate(text: Any) -> float:
    """The first figure of a runtime-info rate (``"12.50 10.00 9.80"``: the last 10 s, 60 s, 600 s)."""
    try:
        return float(str(text).split()[0])
    except (IndexError, ValueError):
        return 0.0


@dataclass(frozen=True)
class BrokerSample:
    """One broker process as its runtime info showed it (``error`` when it did not answer)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    info: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def role(self) -> str:
        """ASYNC_MASTER, SYNC_MASTER or SLAVE (the id's role when the broker did not answer)."""
        return str(self.info.get("brokerRole") or ("MASTER" if self.broker_id == 0 else "SLAVE"))

    @property
    def in_tps(self) -> float:
        """Messages stored a second, over the last 10 s."""
        return first_rate(self.info.get("putTps"))

    @property
    def out_tps(self) -> float:
        """Messages delivered a second, over the last 10 s."""
        return first_rate(self.info.get("getTransferedTps"))


@dataclass(frozen=True)
class GroupSample:
    """A consumer group's progress summed over the masters: messages behind and consumed a second."""

    group: str
    lag: int
    tps: float
    topics: tuple[str, ...]
    #: The group's subscription group config (RocketMQ's fields) on the first master that has one.
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """What one round found."""

    at_ms: int
    namesrvs: dict[str, str]
    brokers: tuple[BrokerSample, ...]
    topic_counts: dict[str, int]
    groups: dict[str, GroupSample]
    errors: tuple[str, ...] = ()

    @property
    def in_tps(self) -> float:
        """All masters' stored messages a second."""
        return sum(b.in_tps for b in self.brokers if b.broker_id == 0)

    @property
    def out_tps(self) -> float:
        """All brokers' delivered messages a second."""
        return sum(b.out_tps for b in self.brokers)


EMPTY = Snapshot(0, {}, (), {}, {})


class History:
    """The rates and each group's lag at each round of the last ``keep`` rounds."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.times: deque[int] = deque(maxlen=keep)
        self.in_tps: deque[float] = deque(maxlen=keep)
        self.out_tps: deque[float] = deque(maxlen=keep)
        # Compact per-group series (8 bytes a point): a thousand groups over 30 minutes is 3 MB.
        self._lags: dict[str, array[int]] = {}
        self._lock = threading.Lock()

    def add(self, snap: Snapshot) -> None:
        """Record one round."""
        with self._lock:
            self.times.append(snap.at_ms)
            self.in_tps.append(snap.in_tps)
            self.out_tps.append(snap.out_tps)
            n = len(self.times)
            for name in list(self._lags):
                if name not in snap.groups:
                    del self._lags[name]
            for name, g in snap.groups.items():
                series = self._lags.get(name)
                if series is None:
                    series = self._lags[name] = array("q", [-1] * (n - 1))  # -1: not known then
                series.append(g.lag)
                if len(series) > n:
                    del series[: len(series) - n]

    def rates(self) -> tuple[list[int], list[float], list[float]]:
        """(times, in, out) of the rounds kept."""
        with self._lock:
            return list(self.times), list(self.in_tps), list(self.out_tps)

    def lag(self, group: str) -> tuple[list[int], list[int]]:
        """(times, lag) of ``group``, the rounds it was known in."""
        with self._lock:
            series = self._lags.get(group)
            if series is None:
                return [], []
            pairs = [(t, v) for t, v in zip(list(self.times)[-len(series):], series, strict=False) if v >= 0]
        return [t for t, _ in pairs], [v for _, v in pairs]


class Collector:
    """Samples the mesh on a thread of its own, as the account ``admin()`` returns (None: not yet)."""

    def __init__(self, namesrv_addrs: list[str], admin: Callable[[], Admin | None], interval_s: float,
                 history_minutes: int) -> None:
        self.namesrv_addrs = namesrv_addrs
        self._admin = admin
        self.interval_s = interval_s
        self.snapshot: Snapshot = EMPTY
        self.history = History(max(2, int(history_minutes * 60 / interval_s)))
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-collector", daemon=True)

    def start(self) -> None:
        """Begin sampling (the first round at once)."""
        self._thread.start()

    def refresh(self) -> None:
        """Sample now instead of at the next interval (after a change made from a page)."""
        self._wake.set()

    def stop(self) -> None:
        """Stop sampling (waits for a round under way, bounded by its requests' timeouts)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            admin = self._admin()
            if admin is not None:
                try:
                    snap = self.collect(admin)
                except Exception as exc:  # noqa: BLE001 - a round that fails is logged; the next one tries again
                    log.warning("collect_failed", error=str(exc))
                else:
                    self.snapshot = snap
                    self.history.add(snap)
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def collect(self, admin: Admin) -> Snapshot:
        """One round (see the module docstring)."""
        errors: list[str] = []
        namesrvs: dict[str, str] = {}
        for addr in self.namesrv_addrs:
            try:
                admin.api.get_broker_cluster_info(admin.timeout_ms, addr=addr)
                namesrvs[addr] = "up"
            except MQError as exc:
                namesrvs[addr] = f"down: {exc}"
        brokers: list[BrokerSample] = []
        groups: dict[str, GroupSample] = {}
        topic_counts: dict[str, int] = {kind.value: 0 for kind in TopicKind}
        try:
            cluster = admin.cluster_info()
        except MQError as exc:
            errors.append(f"cluster: {exc}")
            return Snapshot(_now_ms(), namesrvs, (), topic_counts, {}, tuple(errors))
        for b in sorted(cluster.brokers(), key=lambda b: (b.cluster, b.broker_name, b.broker_id)):
            try:
                brokers.append(BrokerSample(b.cluster, b.broker_name, b.broker_id, b.addr,
                                            admin.broker_runtime_info(b.addr)))
            except MQError as exc:
                brokers.append(BrokerSample(b.cluster, b.broker_name, b.broker_id, b.addr, error=str(exc)))
                continue
            if b.is_master:
                try:
                    self._add_groups(admin, b.addr, groups)
                except MQError as exc:
                    errors.append(f"groups of {b.addr}: {exc}")
        try:
            for t in admin.topic_list():
                topic_counts[topic_kind(t).value] += 1
        except MQError as exc:
            errors.append(f"topics: {exc}")
        return Snapshot(_now_ms(), namesrvs, tuple(brokers), topic_counts, groups, tuple(errors))


    @staticmethod
    def _add_groups(admin: Admin, addr: str, groups: dict[str, GroupSample]) -> None:
        """Add the master ``addr``'s groups: their configs, and their progress summed over the masters."""
        for name, group_config in admin.subscription_groups(addr).items():
            if name not in groups:
                groups[name] = GroupSample(name, 0, 0.0, (), dict(group_config))
        listing = admin.broker_consume_stats(addr)
        for name in listing.consume_stats:
            stats = listing.group_stats(name)
            seen = groups.get(name)
            lag, tps, topics = group_lag(stats), stats.consume_tps, {mq.topic for mq in stats.offset_table}
            config: dict[str, Any] = {}
            if seen is not None:
                lag, tps, topics, config = lag + seen.lag, tps + seen.tps, topics | set(seen.topics), seen.config
            groups[name] = GroupSample(name, lag, tps, tuple(sorted(topics)), config)


def _now_ms() -> int:
    return int(time.time() * 1000)
