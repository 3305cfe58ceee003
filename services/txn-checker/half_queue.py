"""HalfQueue: what a checker knows of one half queue it owns, and of the op queue paired with it.

Half messages arrive from the pulls (in queue order) and stay pending until
settled: an op names their offset (decided), or a check settled them (the
broker asked a producer and stored a copy, found the transaction decided, or
gave the message up). The half queue's committed offset is the smallest
offset still pending, so a restarted checker reads from there.

Ops are read from the op queue's committed offset. An op is done once the
half offset it names is below the half queue's committed offset; the op
queue's committed offset is the smallest op offset not done yet (RocketMQ's
calculateOpOffset, without needing the ops in order).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from rocketmesh.model.message import MessageConst, MessageExt, MessageQueue


def immunity_ms(msg: MessageExt, transaction_timeout_ms: int) -> int:
    """How long after its birth ``msg`` is left alone: CHECK_IMMUNITY_TIME_IN_SECONDS when it is a
    non-negative number, else the checker's transactionTimeOut (RocketMQ's getImmunityTime)."""
    raw = msg.properties.get(MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS)
    if raw is None:
        return transaction_timeout_ms
    try:
        seconds = int(raw.strip())
    except ValueError:
        return transaction_timeout_ms
    return transaction_timeout_ms if seconds < 0 else seconds * 1000


class HalfQueue:
    """See the module docstring. Thread-safe: pulls add, the check pass reads and settles."""

    def __init__(self, mq: MessageQueue, op_mq: MessageQueue, start_offset: int) -> None:
        self.mq = mq
        self.op_mq = op_mq
        #: Where the half queue was taken up: the committed offset until something was pulled.
        self.start_offset = start_offset
        #: The next op offset to read; None until the op queue's committed offset was fetched.
        self.op_next: int | None = None
        #: The op offset last committed to the broker.
        self.op_committed: int | None = None
        #: Set when the queue went to another replica: stop committing for it.
        self.removed = False
        self._lock = threading.Lock()
        #: half offset -> (message, monotonic time it arrived here); offsets come in increasing order.
        self._pending: dict[int, tuple[MessageExt, float]] = {}
        #: half offset -> smallest op offset naming it, for ops not done yet.
        self._ops: dict[int, int] = {}

    # --- input ---

    def add_halves(self, msgs: Iterable[MessageExt], arrived: float) -> None:
        with self._lock:
            for m in msgs:
                self._pending.setdefault(m.queue_offset, (m, arrived))

    def add_ops(self, ops: Iterable[MessageExt], half_base: int) -> int:
        """Record ops (body: the decided half offset); those naming offsets below ``half_base`` are done
        already. Returns how many ops were read."""
        n = 0
        with self._lock:
            for op in ops:
                n += 1
                try:
                    half_offset = int(op.body.decode().strip())
                except (UnicodeDecodeError, ValueError):
                    continue  # not an op this checker understands: nothing to wait for
                if half_offset < half_base:
                    continue
                known = self._ops.get(half_offset)
                if known is None or op.queue_offset < known:
                    self._ops[half_offset] = op.queue_offset
        return n

    # --- the check pass ---

    def take_decided(self) -> list[MessageExt]:
        """Pending halves an op names: they are settled (removed here; the caller drops them from the pull)."""
        with self._lock:
            ops = self._ops
            decided = [off for off in self._pending if off in ops]
            return [self._pending.pop(off)[0] for off in decided]

    def due(self, now_ms: int, pass_started: float, transaction_timeout_ms: int) -> list[MessageExt]:
        """Pending halves to check now: arrived before this pass began (a copy stored by a check waits for
        the next pass, so checks repeat every transactionCheckInterval) and past their immunity time (born
        later than now by the clock: checked, as RocketMQ does)."""
        out = []
        with self._lock:
            for msg, arrived in self._pending.values():
                if arrived >= pass_started:
                    continue
                age = now_ms - msg.born_timestamp
                if 0 <= age < immunity_ms(msg, transaction_timeout_ms):
                    continue
                out.append(msg)
        return out

    def settle(self, msgs: Iterable[MessageExt]) -> None:
        """Checked halves that need nothing more from this checker."""
        with self._lock:
            for m in msgs:
                self._pending.pop(m.queue_offset, None)

    def op_commit_offset(self, half_base: int) -> int | None:
        """The op offset that can be committed once the half queue is committed up to ``half_base``:
        ops naming offsets below it are done and forgotten. None before the op queue was read."""
        with self._lock:
            if self.op_next is None:
                return None
            ops = self._ops
            for half_offset in [h for h in ops if h < half_base]:
                del ops[half_offset]
            return min(ops.values()) if ops else self.op_next

    # --- figures ---

    @property
    def pending_count(self) -> int:
        with self._lock:
            return len(self._pending)

    @property
    def ops_waiting(self) -> int:
        with self._lock:
            return len(self._ops)
