"""ProcessQueue: the messages of one queue pulled but not yet consumed (RocketMQ's ProcessQueue).

Messages are held by queue offset. The offset a consumer may commit is the
smallest offset still held (or one past the largest ever held when none is
left), so a crash re-delivers what was in flight and never skips it.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Iterable

from rocketmesh.client.running_info import ProcessQueueInfo, epoch_ms
from rocketmesh.model.message import MessageExt

#: A queue lock taken from the broker counts as held for this long without renewal (RocketMQ: 30 s).
REBALANCE_LOCK_MAX_LIVE_S = 30.0
#: A pull service that has not pulled a queue for this long considers it idle (RocketMQ: 120 s).
PULL_MAX_IDLE_S = 120.0
_MiB = 1024 * 1024


class HeldOffset:
    """A held message reduced to its queue offset (see :meth:`ProcessQueue.keep_offsets_only`)."""

    __slots__ = ("queue_offset",)
    body = b""

    def __init__(self, queue_offset: int) -> None:
        self.queue_offset = queue_offset


class ProcessQueue:
    """See the module docstring. All methods are thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Offsets arrive in increasing order, so insertion order is offset order.
        #: A holder that needs only offsets keeps HeldOffset stand-ins (see :meth:`keep_offsets_only`).
        self._msgs: dict[int, MessageExt | HeldOffset] = {}
        #: Held offsets, smallest first; entries already consumed are dropped lazily.
        self._heap: list[int] = []
        #: Orderly consumption: messages taken by the consuming thread, not yet committed.
        self._consuming: dict[int, MessageExt] = {}
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = -1
        #: The offset consumption has reached (next to consume); -1 until something was consumed.
        #: Only grows; the consumer copies it to its offset store when it persists.
        self.committed_offset = -1
        self.dropped = False
        self.last_pull_timestamp = time.monotonic()
        self.last_consume_timestamp = time.monotonic()
        #: Orderly: the broker lock is held, and when it was last renewed.
        self.locked = False
        self.last_lock_timestamp = 0.0
        #: Orderly: a consume task for this queue is running or scheduled.
        self.consuming = False
        #: Serialises orderly consumption of this queue with its removal in rebalance.
        self.consume_lock = threading.Lock()
        #: Orderly: held by the one consume task running for this queue.
        self.task_lock = threading.Lock()
        #: Orderly: a failed batch pauses the queue until this monotonic time.
        self.suspend_until = 0.0

    # --- pulled messages ---

    def put_messages(self, msgs: Iterable[MessageExt]) -> bool:
        """Add pulled messages; True when an orderly consumer should start a consume task."""
        with self._lock:
            held = self._msgs
            added = 0
            size = 0
            last = self.queue_offset_max
            heap = self._heap
            in_order = True
            for m in msgs:
                off = m.queue_offset
                if off not in held:
                    held[off] = m
                    # Appending ever larger offsets keeps the heap a heap; anything else re-heapifies.
                    in_order = in_order and off > last
                    heap.append(off)
                    added += 1
                    size += len(m.body)
                if off > last:
                    last = off
            if not in_order:
                heapq.heapify(heap)
            self.queue_offset_max = last
            self.msg_count += added
            self.msg_size += size
            dispatch = False
            if held and not self.consuming:
                self.consuming = True
                dispatch = True
            return dispatch

    def drop_bodies(self, msgs: Iterable[MessageExt]) -> None:
        """Forget the bodies of held messages, for a holder that needs only their headers and properties."""
        with self._lock:
            size = 0
            for m in msgs:
                size += len(m.body)
                m.body = b""
            self.msg_size -= size

    def keep_offsets_only(self, msgs: Iterable[MessageExt]) -> list[HeldOffset]:
        """Hold ``msgs`` (already put) by offset alone, for a holder that needs nothing else of them
        (the scheduler); returns the stand-ins, which :meth:`remove_messages` takes in their place."""
        out = []
        with self._lock:
            held = self._msgs
            size = 0
            for m in msgs:
                off = m.queue_offset
                if held.get(off) is m:
                    size += len(m.body)
                    held[off] = stub = HeldOffset(off)
                    out.append(stub)
            self.msg_size -= size
        return out

    def remove_messages(self, msgs: Iterable[MessageExt | HeldOffset]) -> int:
        """Drop consumed messages; returns the offset now safe to commit, or -1 when nothing was held."""
        with self._lock:
            held = self._msgs
            if not held and self.queue_offset_max < 0:
                return -1
            self.last_consume_timestamp = time.monotonic()
            removed = 0
            size = 0
            for m in msgs:
                if held.pop(m.queue_offset, None) is not None:
                    removed += 1
                    size += len(m.body)
            self.msg_count -= removed
            self.msg_size -= size
            offset = self._min_held() if held else self.queue_offset_max + 1
            if not held:
                self._heap.clear()
            if offset > self.committed_offset:
                self.committed_offset = offset
            return offset

    def advance_committed(self, offset: int) -> None:
        """Nothing is held and the broker filtered out everything below ``offset``: count it consumed."""
        with self._lock:
            if not self._msgs and not self._consuming and offset > self.committed_offset:
                self.committed_offset = offset

    def _min_held(self) -> int:
        heap, held = self._heap, self._msgs
        while heap[0] not in held:
            heapq.heappop(heap)
        return heap[0]

    def first_message(self) -> MessageExt | None:
        """The held message with the smallest offset (the one holding the committed offset back), or None
        (also when only its offset is held)."""
        with self._lock:
            m = self._msgs[self._min_held()] if self._msgs else None
            return m if isinstance(m, MessageExt) else None

    def holds(self, msg: MessageExt) -> bool:
        """``msg`` is still held (not consumed, not removed by the consume timeout)."""
        with self._lock:
            return self._msgs.get(msg.queue_offset) is msg

    def max_span(self) -> int:
        """Largest minus smallest held offset (flow control on out-of-order progress)."""
        with self._lock:
            if not self._msgs:
                return 0
            return self.queue_offset_max - self._min_held()

    def is_empty(self) -> bool:
        with self._lock:
            return not self._msgs and not self._consuming

    def held_offsets(self) -> list[int]:
        with self._lock:
            return list(self._msgs)

    def info(self, commit_offset: int) -> ProcessQueueInfo:
        """This queue's figures as RocketMQ's ProcessQueueInfo reports them, with ``commit_offset`` (what the
        consumer's offset store holds): the held messages ("cached"), those an orderly consumer is consuming
        ("transaction"), the lock, the last pull and consume (epoch ms)."""
        with self._lock:
            held, consuming = self._msgs, self._consuming
            return ProcessQueueInfo(
                commit_offset=commit_offset,
                cached_msg_min_offset=min(held, default=0), cached_msg_max_offset=max(held, default=0),
                cached_msg_count=len(held), cached_msg_size_in_mib=self.msg_size // _MiB,
                transaction_msg_min_offset=min(consuming, default=0),
                transaction_msg_max_offset=max(consuming, default=0), transaction_msg_count=len(consuming),
                locked=self.locked, last_lock_timestamp=epoch_ms(self.last_lock_timestamp), dropped=self.dropped,
                last_pull_timestamp=epoch_ms(self.last_pull_timestamp),
                last_consume_timestamp=epoch_ms(self.last_consume_timestamp))

    def clear(self) -> None:
        """Forget everything held (the queue's offset was reset)."""
        with self._lock:
            self._msgs.clear()
            self._heap.clear()
            self._consuming.clear()
            self.msg_count = 0
            self.msg_size = 0
            self.queue_offset_max = -1

    # --- orderly consumption ---

    def take_messages(self, n: int) -> list[MessageExt]:
        """Move up to ``n`` messages, in offset order, to the consuming set; [] ends the consume task."""
        with self._lock:
            out: list[MessageExt] = []
            held = self._msgs
            while held and len(out) < n:
                off = self._min_held()
                heapq.heappop(self._heap)
                m = held.pop(off)
                # Orderly consumption holds whole messages: only the scheduler keeps offsets alone.
                assert isinstance(m, MessageExt), "an orderly queue holds messages, not offsets"
                self._consuming[off] = m
                out.append(m)
            if not out:
                self.consuming = False
            self.last_consume_timestamp = time.monotonic()
            return out

    def commit(self) -> int:
        """The consuming set was consumed: drop it; returns the offset to commit (-1 when none)."""
        with self._lock:
            if not self._consuming:
                return -1
            last = max(self._consuming)
            size = sum(len(m.body) for m in self._consuming.values())
            self.msg_count -= len(self._consuming)
            self.msg_size -= size
            self._consuming.clear()
            if last + 1 > self.committed_offset:
                self.committed_offset = last + 1
            return last + 1

    def make_messages_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        """Put messages taken by :meth:`take_messages` back, to be taken again in order."""
        with self._lock:
            back = {m.queue_offset: self._consuming.pop(m.queue_offset, m) for m in msgs}
            merged = dict(sorted({**back, **self._msgs}.items()))
            self._msgs = merged
            self._heap = list(merged)

    def is_suspended(self) -> bool:
        return time.monotonic() < self.suspend_until

    def lock_expired(self, now: float | None = None) -> bool:
        return ((now or time.monotonic()) - self.last_lock_timestamp) > REBALANCE_LOCK_MAX_LIVE_S

    def pull_expired(self, now: float | None = None) -> bool:
        return ((now or time.monotonic()) - self.last_pull_timestamp) > PULL_MAX_IDLE_S
