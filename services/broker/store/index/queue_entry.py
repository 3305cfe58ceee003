"""The tag field of a consume-queue entry.

For an ordinary topic it is the hash code of the message's tag (0 without one).
For the topics whose entries wait for a time (SCHEDULE_TOPIC_XXXX's delay levels,
the timer topic) it is the delivery time in ms: the store time plus the level's
delay, or the message's TIMER_DELIVER_MS. The dispatcher works it out once per
record, from the properties it picks out of the record.
"""

from __future__ import annotations

import re
from functools import lru_cache

from rocketmesh.model.codec import tags_hash_code

#: The properties dispatch needs, picked out of the raw ``name\x01value\x02`` string in one C call.
find_props = re.compile(rb"(?:^|\x02)(TAGS|KEYS|UNIQ_KEY|DELAY|TIMER_DELIVER_MS)\x01([^\x02]*)").findall


@lru_cache(maxsize=65536)
def tags_code_of_tag(tags: bytes) -> int:
    """The hash code of a raw TAGS value (cached: a topic's tags are few)."""
    return tags_hash_code(tags.decode())


def schedule_due_time(delay: bytes | None, store_timestamp: int, delay_levels: list[int]) -> int:
    """When a SCHEDULE_TOPIC_XXXX entry is due: its DELAY level (clamped to the levels there are) after
    the store time."""
    level = min(max(_int_or(delay, 1), 1), len(delay_levels))
    return store_timestamp + delay_levels[level - 1]


def timer_due_time(deliver_at: bytes | None, store_timestamp: int) -> int:
    """When a timer-topic entry is due: its TIMER_DELIVER_MS, or at once when it has none."""
    return _int_or(deliver_at, store_timestamp)


def _int_or(value: bytes | None, default: int) -> int:
    # The broker writes these properties itself; a stored record must never fail dispatch.
    try:
        return int(value) if value else default
    except ValueError:
        return default
