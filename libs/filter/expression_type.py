"""The two kinds of subscription expression (RocketMQ's ExpressionType)."""

from __future__ import annotations

from enum import Enum

from rocketmesh.filter.errors import FilterSyntaxError


class ExpressionType(str, Enum):
    """``TAG``: ``"TagA || TagB"`` or ``"*"``; ``SQL92``: a selector over message properties."""

    TAG = "TAG"
    SQL92 = "SQL92"

    @classmethod
    def parse(cls, value: ExpressionType | str | None) -> ExpressionType:
        """The type named by ``value``; None and "" mean TAG, as RocketMQ's ``isTagType`` has it.

        Raises FilterSyntaxError for any other name.
        """
        if isinstance(value, ExpressionType):
            return value
        if value is None or value == "":
            return cls.TAG
        found = cls._value2member_map_.get(value)
        if found is None:
            raise FilterSyntaxError(f"unknown expression type {value!r}: expected TAG or SQL92")
        return found  # type: ignore[return-value]

