"""Delayed and timer messages on the way in: the rewrite that parks them until they are due.

A message with a delay level goes to SCHEDULE_TOPIC_XXXX, queue ``level - 1``;
one with a delivery time (a timer message) goes to the timer topic. Either way
its real topic and queue id travel in REAL_TOPIC / REAL_QID, and the dispatcher
writes the delivery time into the consume-queue entry's tag field, so the
scheduler service can tell when an entry is due without reading its message.
"""

from __future__ import annotations

import time

from rocketmesh.model.codec import decode_properties, encode_properties
from rocketmesh.model.message import MessageConst
from rocketmesh.model.topics import SCHEDULE_TOPIC, TIMER_TOPIC

#: Properties that only mean something while a message is parked; a delivered or retried copy drops them.
PARKING_PROPERTIES = (MessageConst.DELAY_TIME_LEVEL, MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID)
_DELAY = MessageConst.DELAY_TIME_LEVEL
_DELIVER_MS = MessageConst.TIMER_DELIVER_MS
_DELAY_MS = MessageConst.TIMER_DELAY_MS


class ScheduleRewriteError(ValueError):
    """A delay or delivery time the broker refuses (answered MESSAGE_ILLEGAL)."""


def park_at_level(topic: str, queue_id: int, props: dict[str, str], level: int,
                  max_level: int) -> tuple[str, int, bytes]:
    """Park a message at delay ``level`` (clamped to 1..``max_level``): SCHEDULE_TOPIC_XXXX, queue level-1.

    ``props`` is updated in place with DELAY, REAL_TOPIC and REAL_QID; returns
    the topic, queue id and encoded properties to store.
    """
    level = min(max(level, 1), max_level)
    props[_DELAY] = str(level)
    props[MessageConst.REAL_TOPIC] = topic
    props[MessageConst.REAL_QUEUE_ID] = str(queue_id)
    return SCHEDULE_TOPIC, level - 1, encode_properties(props)


class ScheduleRewriter:
    """Decides where an incoming message is stored: its own queue, a delay level, or the timer topic."""

    def __init__(self, max_level: int, timer_max_delay_ms: int, timer_queue_nums: int) -> None:
        self.max_level = max_level
        self.timer_max_delay_ms = timer_max_delay_ms
        self.timer_queue_nums = timer_queue_nums

    @staticmethod
    def wants(raw_props: bytes) -> bool:
        """Cheap pre-check: could these properties ask for a delay or a delivery time?"""
        return b"DELAY\x01" in raw_props or b"TIMER_DEL" in raw_props

    def rewrite(self, topic: str, queue_id: int, raw_props: bytes,
                now_ms: int | None = None) -> tuple[str, int, bytes]:
        """Where to store the message (topic, queue id, properties); ScheduleRewriteError if refused."""
        pm = decode_properties(raw_props)
        has_timer = _DELIVER_MS in pm or _DELAY_MS in pm
        level = 0
        if _DELAY in pm:
            try:
                level = int(pm[_DELAY])
            except ValueError:
                raise ScheduleRewriteError("the DELAY property must be an integer level") from None
        if has_timer:
            if level > 0:
                raise ScheduleRewriteError("a message may have a delay level or a delivery time, not both")
            return self._timer(topic, queue_id, pm, int(time.time() * 1000) if now_ms is None else now_ms)
        if level <= 0:
            return topic, queue_id, raw_props
        return park_at_level(topic, queue_id, pm, level, self.max_level)

    def _timer(self, topic: str, queue_id: int, pm: dict[str, str], now_ms: int) -> tuple[str, int, bytes]:
        try:
            if _DELIVER_MS in pm:
                deliver_at = int(pm[_DELIVER_MS])
            else:
                deliver_at = now_ms + int(pm[_DELAY_MS])
        except ValueError:
            raise ScheduleRewriteError(f"{_DELIVER_MS} and {_DELAY_MS} must be integers (milliseconds)") from None
        pm.pop(_DELAY_MS, None)
        if deliver_at - now_ms > self.timer_max_delay_ms:
            raise ScheduleRewriteError(
                f"the delivery time is {(deliver_at - now_ms) / 1000:.0f} s ahead, beyond the broker's "
                f"timerMaxDelaySec of {self.timer_max_delay_ms // 1000} s")
        pm[_DELIVER_MS] = str(deliver_at)
        if deliver_at <= now_ms:
            # Already due: stored as a normal message, the delivery time kept for the record.
            return topic, queue_id, encode_properties(pm)
        pm[MessageConst.REAL_TOPIC] = topic
        pm[MessageConst.REAL_QUEUE_ID] = str(queue_id)
        return TIMER_TOPIC, queue_id % self.timer_queue_nums, encode_properties(pm)
