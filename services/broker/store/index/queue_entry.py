"""The tag field of a consume-queue entry.

For an ordinary topic it is the hash code of the message's tag. For the topics
whose entries wait for a time (SCHEDULE_TOPIC_XXXX's delay levels, the timer
topic) it is the delivery time in ms: the store time plus the level's delay, or
the message's TIMER_DELIVER_MS.

The dispatch worker writes the real field into the queue's files. A put writes
the queue's in-memory tail, and there an ordinary topic's field is
:data:`UNRESOLVED_TAGS_CODE`: most reads take every tag, so the hash is worked
out from the record (:func:`record_tags_code`) only by a read that filters on it.
Due times are worked out at put time, since the scheduler reads them from the tail.
"""

from __future__ import annotations

import re
from functools import lru_cache

from rocketmesh.model.codec import RECORD_HEADER, RECORD_HEADER_SIZE, tags_hash_code
from rocketmesh.model.topics import SCHEDULE_TOPIC, TIMER_TOPIC

#: Topics whose entries' tag field is a delivery time, not a tag's hash code.
DUE_TIME_TOPICS = frozenset((SCHEDULE_TOPIC, TIMER_TOPIC))

#: A tail entry's tag field for an ordinary topic: "read the tag from the record". No tag hash
#: (a Java int) or due time (ms since the epoch) takes this value.
UNRESOLVED_TAGS_CODE = -(1 << 63)

#: The properties dispatch needs, picked out of the raw ``name\x01value\x02`` string in one C call.
find_props = re.compile(rb"(?:^|\x02)(TAGS|KEYS|UNIQ_KEY|DELAY|TIMER_DELIVER_MS)\x01([^\x02]*)").findall
_find_tags = re.compile(rb"(?:^|\x02)TAGS\x01([^\x02]*)").search
_find_delay = re.compile(rb"(?:^|\x02)DELAY\x01([^\x02]*)").search
_find_deliver_at = re.compile(rb"(?:^|\x02)TIMER_DELIVER_MS\x01([^\x02]*)").search


@lru_cache(maxsize=65536)
def tags_code_of_tag(tags: bytes) -> int:
    """The hash code of a raw TAGS value (cached: a topic's tags are few)."""
    return tags_hash_code(tags.decode())


def tags_code_of(properties: bytes) -> int:
    """The tag field of an ordinary message with these stored properties (the first TAGS property's)."""
    found = _find_tags(properties)  # one C call: cheaper on the put path than finds and slices
    return tags_code_of_tag(found.group(1)) if found is not None else 0


def schedule_due_time(delay: bytes | None, store_timestamp: int, delay_levels: list[int]) -> int:
    """When a SCHEDULE_TOPIC_XXXX entry is due: its DELAY level (clamped to the levels there are) after
    the store time."""
    level = min(max(_int_or(delay, 1), 1), len(delay_levels))
    return store_timestamp + delay_levels[level - 1]


def timer_due_time(deliver_at: bytes | None, store_timestamp: int) -> int:
    """When a timer-topic entry is due: its TIMER_DELIVER_MS, or at once when it has none."""
    return _int_or(deliver_at, store_timestamp)


def _int_or(value: bytes | None, default: int) -> int:
    # The broker writes these properties itself; a stored record must never fail a put or dispatch.
    try:
        return int(value) if value else default
    except ValueError:
        return default


def tail_tags_code(topic: str, properties: bytes, store_timestamp: int, delay_levels: list[int]) -> int:
    """The tag field of the tail entry a put writes: a due time, or :data:`UNRESOLVED_TAGS_CODE`."""
    if topic not in DUE_TIME_TOPICS:
        return UNRESOLVED_TAGS_CODE
    return due_time(topic, properties, store_timestamp, delay_levels)


def due_time(topic: str, properties: bytes, store_timestamp: int, delay_levels: list[int]) -> int:
    """When the entry of a message of SCHEDULE_TOPIC_XXXX or the timer topic is due."""
    if topic == SCHEDULE_TOPIC:
        found = _find_delay(properties)
        return schedule_due_time(found.group(1) if found else None, store_timestamp, delay_levels)
    found = _find_deliver_at(properties)
    return timer_due_time(found.group(1) if found else None, store_timestamp)


def record_tags_code(record: bytes) -> int:
    """The tag hash code of the stored message ``record`` (an ordinary topic's entry field)."""
    body_len = RECORD_HEADER.unpack_from(record)[-1]
    pos = RECORD_HEADER_SIZE + body_len
    pos += 1 + record[pos]
    props_len = int.from_bytes(record[pos:pos + 2], "big")
    return tags_code_of(record[pos + 2:pos + 2 + props_len])
