"""Mailbox: how other threads hand work to a socket-owning I/O thread.

ZeroMQ sockets must stay on one thread, so any other thread puts items into
a deque and, at most once per drain, signals an eventfd (a pipe where there
is no eventfd) that the I/O thread polls next to its sockets. Under load
most ``put`` calls see a signal already pending and cost one deque append.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    """A multi-producer, single-consumer queue with a pollable file descriptor."""

    def __init__(self) -> None:
        self._items: collections.deque[T] = collections.deque()
        # True from the first put after a drain until the next drain: further
        # puts need not signal again.
        self._signalled = False
        if hasattr(os, "eventfd"):
            self._rfd = self._wfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # pragma: no cover - non-Linux
            self._rfd, self._wfd = os.pipe()
            os.set_blocking(self._rfd, False)
        self._closed = False

    @property
    def fd(self) -> int:
        """The descriptor to poll for readability."""
        return self._rfd

    def put(self, item: T) -> None:
        """Append ``item`` and wake the consumer if no wake-up is pending (any thread)."""
        self._items.append(item)
        if not self._signalled:
            self._signalled = True
            self.wake()

    def wake(self) -> None:
        """Make the descriptor readable (to interrupt a poll)."""
        if self._closed:
            return
        try:
            os.write(self._wfd, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except (BlockingIOError, OSError):
            # A full pipe or a saturated counter is still readable, which is
            # all a wake-up needs.
            pass

    def drain(self) -> Iterator[T]:
        """Yield every queued item (consumer thread only)."""
        # Read the descriptor first, then clear the flag, then pop. Clearing
        # first would lose a wake-up: os.read drops the GIL, so a put could set
        # the flag and signal in between, the read would swallow that signal,
        # and the flag would stay set with nobody left to signal later puts.
        try:
            os.read(self._rfd, 4096)
        except (BlockingIOError, OSError):
            pass
        self._signalled = False
        popleft = self._items.popleft
        while True:
            try:
                yield popleft()
            except IndexError:
                return

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> None:
        """Release the descriptors."""
        if self._closed:
            return
        self._closed = True
        for fd in {self._rfd, self._wfd}:
            try:
                os.close(fd)
            except OSError:
                pass
