"""Soak: steady traffic through namesrv + broker + scheduler, some of it delayed, with a push consumer.

Every service process's resident memory (VmRSS, and its anonymous part RssAnon) and open file count are
sampled throughout; after a warm-up they must stay flat (anonymous RSS growth under RSS_GROWTH_MAX, open
files at most FD_GROWTH_MAX more). VmRSS is recorded but not bounded: it also counts the pages of the
store's mapped files a process has touched (the broker's commitlog and consume queues), which grow
with the data stored and are page cache the kernel reclaims, not a leak. Likewise the files a process has
open in the store folder are counted apart: a mapped file stays open (twice: its descriptor and the
mapping's) until it expires, as RocketMQ keeps its mapped files, so they grow with the files stored. The
consumer's lag stays bounded, and every acknowledged message is consumed in the end. The CI run is
about a minute; ROCKETMESH_LONG_FAULTS=1 runs ten.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from faultload import Deliveries, start_consumer
from storefaultkit import open_fds, rss_kib

from procs import BrokerProcess, NamesrvProcess, SchedulerProcess, wait_for
from rocketmesh import Message, Producer

#: Minutes of tests: scheduled first (tests/conftest.py).
pytestmark = pytest.mark.heavy

TOPIC = "SoakTopic"
PRODUCERS = 2
#: Messages a second per producer; every DELAY_EVERY-th is delayed (level 1, one second).
RATE = 100
DELAY_EVERY = 10
SAMPLE_EVERY_S = 2.0
#: Flat after warm-up: RSS may grow by at most this fraction, open files by at most this many.
RSS_GROWTH_MAX = 0.20
FD_GROWTH_MAX = 8
#: The consumer may be at most this many messages behind the acknowledged sends (two seconds of
#: traffic, beyond the one-second delay of the delayed ones).
LAG_MAX = PRODUCERS * RATE * 3
LEVELS = "1s 2s 3s"


@dataclass
class Samples:
    """RSS and anonymous RSS (KiB) and open files per process, one list entry per sample."""

    rss: dict[str, list[int]] = field(default_factory=dict)
    anon: dict[str, list[int]] = field(default_factory=dict)
    #: Open files outside the store folder (where a leak would show).
    fds: dict[str, list[int]] = field(default_factory=dict)
    #: Open files in the store folder (its mapped files).
    store_fds: dict[str, list[int]] = field(default_factory=dict)
    lag: list[int] = field(default_factory=list)

    def take(self, pids: dict[str, int], lag: int, store_dir: Path) -> None:
        for name, pid in pids.items():
            self.rss.setdefault(name, []).append(rss_kib(pid))
            self.anon.setdefault(name, []).append(rss_kib(pid, "RssAnon"))
            outside = open_fds(pid, outside=store_dir)
            self.fds.setdefault(name, []).append(outside)
            self.store_fds.setdefault(name, []).append(open_fds(pid) - outside)
        self.lag.append(lag)


def steady_sender(producer: Producer, prefix: str, stop: threading.Event, acked: list[str],
                  errors: list[str]) -> Callable[[], None]:
    """A loop that sends RATE messages a second (bodies ``prefix<i>-`` x 16) until ``stop``."""

    def run() -> None:
        i = 0
        start = time.monotonic()
        while not stop.is_set():
            m = Message(TOPIC, f"{prefix}{i}-".encode() * 16)
            if i % DELAY_EVERY == 0:
                m.delay_level = 1
            try:
                producer.send(m)
                acked.append(f"{prefix}{i}-" * 16)
            except Exception as exc:  # noqa: BLE001 - counted; the soak asserts there are none
                errors.append(f"{prefix}{i}: {exc}")
            i += 1
            ahead = start + i / RATE - time.monotonic()
            if ahead > 0:
                stop.wait(ahead)
    return run


def test_steady_traffic_keeps_memory_files_and_lag_flat(
        namesrv: NamesrvProcess, start_broker: Callable[..., BrokerProcess],
        start_scheduler: Callable[..., SchedulerProcess], reliability) -> None:
    duration = 600.0 if reliability.long else 60.0
    warmup = 60.0 if reliability.long else 20.0
    broker = start_broker(namesrv.addr, messageDelayLevel=LEVELS, defaultTopicQueueNums=4)
    scheduler = start_scheduler(namesrv.addr, rebalanceIntervalMs=1000, heartbeatBrokerIntervalMs=1000,
                                pollNameServerIntervalMs=1000)
    got = Deliveries()
    consumer = start_consumer(namesrv.addr, "soak-readers", TOPIC, got)
    acked: list[str] = []
    errors: list[str] = []
    stop = threading.Event()
    producers = [Producer(f"soak-producer{i}", namesrv.addr, instance_name=f"soak{i}") for i in range(PRODUCERS)]
    threads = [threading.Thread(target=steady_sender(p.start(), f"s{i}-", stop, acked, errors), daemon=True)
               for i, p in enumerate(producers)]
    samples = Samples()
    warm_index = 0
    try:
        for t in threads:
            t.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < duration:
            time.sleep(SAMPLE_EVERY_S)
            pids = {"namesrv": namesrv.pid, "broker": broker.pid, "scheduler": scheduler.pid}
            samples.take(pids, len(acked) - len(got.count), broker.store_dir)
            if time.monotonic() - t0 < warmup:
                warm_index = len(samples.lag)
            assert broker.alive and scheduler.alive and namesrv.alive
        stop.set()
        for t in threads:
            t.join(10)
        wait_for(lambda: not got.missing(acked), 30, "every acknowledged message consumed after the soak")
    finally:
        stop.set()
        consumer.shutdown()
        for p in producers:
            p.shutdown()
    figures = []
    growth = {}
    for name, rss in samples.rss.items():
        anon, fds = samples.anon[name], samples.fds[name]
        w = warm_index - 1
        growth[name] = ((anon[-1] - anon[w]) / anon[w], fds[-1] - fds[w])
        figures.append(f"{name} RSS {rss[w] / 1024:.1f}->{rss[-1] / 1024:.1f} MiB "
                       f"(anon {anon[w] / 1024:.1f}->{anon[-1] / 1024:.1f}, {growth[name][0]:+.1%}), "
                       f"fds {fds[w]}->{fds[-1]} (store files {samples.store_fds[name][w]}->"
                       f"{samples.store_fds[name][-1]})")
    max_lag = max(samples.lag[warm_index:])
    lost = len(got.missing(acked))
    reliability.fault(f"soak: {duration:.0f} s steady traffic ({PRODUCERS}x{RATE} msg/s, 1 in {DELAY_EVERY} "
                      "delayed) through namesrv + broker + scheduler", cycles=1,
                      sent=len(acked) + len(errors), acknowledged=len(acked), lost=lost,
                      duplicated=got.duplicated(),
                      note=f"after {warmup:.0f} s warm-up: " + "; ".join(figures) +
                           f"; consumer lag max {max_lag} messages (bound {LAG_MAX}); "
                           f"tolerance anon RSS +{RSS_GROWTH_MAX:.0%}, fds +{FD_GROWTH_MAX}")
    assert not errors, errors[:5]
    assert lost == 0
    assert max_lag <= LAG_MAX, samples.lag
    for name, (rss_growth, fd_growth) in growth.items():
        assert rss_growth < RSS_GROWTH_MAX, \
            f"{name} anonymous RSS grew {rss_growth:.1%} after warm-up: {samples.anon[name]}"
        assert fd_growth <= FD_GROWTH_MAX, f"{name} open files grew by {fd_growth}: {samples.fds[name]}"
