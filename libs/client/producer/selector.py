"""Queue selectors for ordered sends (RocketMQ's MessageQueueSelector and its stock implementations).

A selector picks the queue of a send from the topic's write queues, the
message and a caller's ``arg`` (an order id, say): messages with the same
``arg`` go to the same queue and so are consumed in the order sent.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from rocketmesh.model.codec import java_string_hash
from rocketmesh.model.message import Message, MessageQueue


@runtime_checkable
class MessageQueueSelector(Protocol):
    """Picks one of ``mqs`` for ``msg``; a plain function of the same signature works too."""

    def select(self, mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        """The queue for ``msg`` among ``mqs`` (never empty)."""
        ...


def stable_hash(arg: Any) -> int:
    """A hash of ``arg`` that is the same in every process (Python's ``hash(str)`` is salted).

    For strings and integers it is Java's ``hashCode`` (String, Integer, Long),
    so an order id maps to the same queue index as with RocketMQ's Java
    SelectMessageQueueByHash. Bytes hash by CRC32; anything else by the Java
    hash of ``str(arg)``.
    """
    if isinstance(arg, bool):
        return 1231 if arg else 1237  # Boolean.hashCode
    if isinstance(arg, int):
        if -(1 << 31) <= arg < (1 << 31):
            return arg
        v = arg & 0xFFFFFFFFFFFFFFFF
        h = (v ^ (v >> 32)) & 0xFFFFFFFF  # Long.hashCode
        return h - (1 << 32) if h & 0x80000000 else h
    if isinstance(arg, str):
        return java_string_hash(arg)
    if isinstance(arg, (bytes, bytearray, memoryview)):
        return zlib.crc32(arg)
    return java_string_hash(str(arg))


class SelectMessageQueueByHash:
    """The queue at ``|stable_hash(arg)| mod len(mqs)``."""

    def select(self, mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        """``mqs[|stable_hash(arg)| % len(mqs)]``."""
        return mqs[abs(stable_hash(arg)) % len(mqs)]


class SelectMessageQueueByRandom:
    """A random queue (``arg`` is ignored)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def select(self, mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        """Any one of ``mqs``."""
        return mqs[self._rng.randrange(len(mqs))]
