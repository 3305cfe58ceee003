"""Helpers for the store fault cases (disk full, soak): a small filesystem, and a look at a service
process's memory and open files. Traffic and consumers come from faultload.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` ("16m") mounted at ``mount_point`` for the block; always unmounted after.

    Mounting needs root. A machine that cannot mount fails the test with the reason: a fault case that
    silently did not run proves nothing.
    """
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        why = (f"cannot mount a {size} tmpfs at {mount_point} (uid {os.getuid()}): "
               f"{done.stderr.strip() or done.returncode}; the disk-full case needs root (or CAP_SYS_ADMIN)")
        pytest.fail(why)
    try:
        yield mount_point
    finally:
        # A process still holding a file there must not leave the mount behind: lazy unmount then.
        if subprocess.run(["umount", str(mount_point)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of the process from /proc/PID/status, KiB: VmRSS (resident set), RssAnon (its
    anonymous part: the heap, where a leak shows) or RssFile (mapped file pages, the store's files)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def open_fds(pid: int, outside: Path | None = None) -> int:
    """How many files the process has open (``outside``: not counting those under that folder)."""
    fd_dir = f"/proc/{pid}/fd"
    names = os.listdir(fd_dir)
    if outside is None:
        return len(names)
    prefix = str(outside.resolve()) + os.sep
    count = 0
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:  # closed meanwhile
            continue
        count += not target.startswith(prefix)
    return count
