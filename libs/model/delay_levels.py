"""RocketMQ's messageDelayLevel: the delay of each level, shared by the broker and the scheduler."""

from __future__ import annotations

_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> list[int]:
    """``"1s 5s 10s ..."`` -> delays in ms, level 1 first. Raises ValueError on a bad item."""
    out = []
    for item in spec.split():
        unit = item[-1:].lower()
        if unit not in _UNITS_MS or not item[:-1].isdigit():
            raise ValueError(f"messageDelayLevel item {item!r}: expected a number and one of s m h d")
        out.append(int(item[:-1]) * _UNITS_MS[unit])
    if not out:
        raise ValueError("messageDelayLevel is empty")
    return out
