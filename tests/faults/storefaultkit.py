"""Helpers for the store fault cases (disk full, corrupt files, soak): a small filesystem, a consumer
that counts what it got, and a look at a service process's memory and open files."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import pytest

from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.model.message import MessageExt

#: Client intervals short enough that a consumer finds its queues within a second or two.
FAST_CLIENT = dict(heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000,
                   persist_consumer_offset_interval_ms=1000)


@contextlib.contextmanager
def tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` ("16m") mounted at ``mount_point`` for the block; always unmounted after.

    Mounting needs root. Under CI=true a machine that cannot mount fails the test (a fault case that
    silently did not run proves nothing); elsewhere the case is skipped with the reason.
    """
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        why = (f"cannot mount a {size} tmpfs at {mount_point} (uid {os.getuid()}): "
               f"{done.stderr.strip() or done.returncode}; the disk-full case needs root (or CAP_SYS_ADMIN)")
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield mount_point
    finally:
        # A process still holding a file there must not leave the mount behind: lazy unmount then.
        if subprocess.run(["umount", str(mount_point)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)


class Collector:
    """A push consumer's listener that keeps every message it is given (counted by key, for duplicates)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.keys: Counter[str] = Counter()
        self.bodies: list[bytes] = []

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with self.lock:
            for m in msgs:
                self.keys[m.keys or ""] += 1
                self.bodies.append(m.body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def count(self) -> int:
        with self.lock:
            return sum(self.keys.values())

    def missing(self, keys: Iterable[str]) -> list[str]:
        with self.lock:
            return [k for k in keys if not self.keys[k]]

    def duplicated(self) -> int:
        with self.lock:
            return sum(n - 1 for n in self.keys.values() if n > 1)


def push_consumer(namesrv: str, group: str, topic: str, listener: Collector, **settings: object) -> PushConsumer:
    """A started clustering push consumer of ``topic`` from its first offset."""
    c = PushConsumer(group, namesrv, instance_name=group, consume_from="CONSUME_FROM_FIRST_OFFSET",
                     **{**FAST_CLIENT, **settings})
    c.subscribe(topic, "*")
    c.register_listener(listener)
    return c.start()


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of the process from /proc/PID/status, KiB: VmRSS (resident set), RssAnon (its
    anonymous part: the heap, where a leak shows) or RssFile (mapped file pages, the store's files)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def open_fds(pid: int) -> int:
    """How many files the process has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))
