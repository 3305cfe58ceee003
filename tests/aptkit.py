"""Debian packages a test needs from the system (a Docker engine, a headless Chromium), installed by the test
itself when it runs as root with apt-get, so that the README's test command passes on a fresh machine.

One install at a time, machine-wide (a file lock): two pytest workers would otherwise fight over dpkg's lock.
The package lists are refreshed only when the install fails without it (a fresh image has none; a warm one
saves the minute)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from typing import NoReturn

import pytest

LOCK = "/tmp/rocketmesh-apt.lock"


def unavailable(line: str) -> NoReturn:
    """What a test needs from the system cannot be had here: fail with ``line``, which says what is missing (the
    README's test command, run as root, installs all of it)."""
    pytest.fail(line, pytrace=False)


def can_install() -> bool:
    """Root, with apt-get: this process can install what is missing."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get") is not None


def apt_install(*packages: str, timeout_s: float = 900) -> None:
    """Install ``packages`` (AssertionError with apt-get's output when that fails)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def run(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)

    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = run("apt-get", "install", "-y", "-q", *packages)
        if done.returncode != 0:
            run("apt-get", "update", "-q")
            done = run("apt-get", "install", "-y", "-q", *packages)
        if done.returncode != 0:
            raise AssertionError(f"apt-get install {' '.join(packages)} exited {done.returncode}:\n"
                                 f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
