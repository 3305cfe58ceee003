"""The broker's filter for PULL_MESSAGE (RocketMQ's ExpressionMessageFilter).

The store asks it twice per message: first with the consume-queue entry's tag
hash code (cheap, no commit-log read), then with the stored record. TAG
subscriptions are decided by the code alone; since different tags can share a
code, the consumer re-checks the tag itself (``SubscriptionData.is_tag_matched``).
SQL92 subscriptions pass the first check and are evaluated on the record's
properties, read straight from the record bytes without decoding the message.
"""

from __future__ import annotations

import struct
from functools import lru_cache

from rocketmesh.filter import (
    SUB_ALL,
    ExpressionType,
    SqlFilter,
    SubscriptionData,
    build_subscription,
    compile_sql,
)
from rocketmesh.model.codec import (
    BLANK_RECORD,
    MESSAGE_MAGIC_CODE,
    RECORD_HEADER_SIZE,
    decode_properties,
)

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")
#: BODYLEN is the last field of the fixed record header.
_BODY_LEN_POS = RECORD_HEADER_SIZE - _INT.size


class ExpressionMessageFilter:
    """Matches stored messages against one subscription."""

    __slots__ = ("_codes", "_match_all_codes", "_sql", "subscription")

    def __init__(self, subscription: SubscriptionData):
        self.subscription = subscription
        self._sql: SqlFilter | None = None
        self._codes = subscription.code_set
        self._match_all_codes = True
        if subscription.expression_type is ExpressionType.SQL92:
            self._sql = compile_sql(subscription.sub_string)
        else:
            self._match_all_codes = subscription.matches_all()

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        """TAG: "*" takes every code, otherwise the code must be a subscribed tag's. SQL92: True."""
        return self._match_all_codes or tags_code in self._codes

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        """SQL92: the selector over the record's properties; a record that does not parse fails.
        TAG: True (decided on the consume queue)."""
        sql = self._sql
        if sql is None:
            return True
        properties = record_properties(record)
        if properties is None:
            return False
        return sql.evaluate(properties)

    def __repr__(self) -> str:
        sub = self.subscription
        return f"ExpressionMessageFilter({sub.expression_type.value}: {sub.sub_string!r})"


def record_properties(record: bytes | memoryview) -> dict[str, str] | None:
    """The properties of one commit-log record, read without decoding the rest of the message;
    None when the record's sizes or magic code do not hold together."""
    try:
        total, magic = BLANK_RECORD.unpack_from(record, 0)  # TOTALSIZE, MAGICCODE
        if magic != MESSAGE_MAGIC_CODE or total > len(record):
            return None
        (body_len,) = _INT.unpack_from(record, _BODY_LEN_POS)
        if body_len < 0:
            return None
        pos = RECORD_HEADER_SIZE + body_len
        pos += 1 + record[pos]  # TOPICLEN, TOPIC
        (props_len,) = _SHORT.unpack_from(record, pos)
        pos += _SHORT.size
        if pos + props_len != total:
            return None
        return decode_properties(record[pos:pos + props_len])
    except (struct.error, IndexError, ValueError):  # ValueError: CorruptRecord (properties not UTF-8)
        return None


def filter_for(subscription_string: str | None,
               expression_type: str | None) -> ExpressionMessageFilter | None:
    """The filter for a pull's subscription, or None when it takes every message (so the store
    skips filtering). Raises FilterSyntaxError for a bad expression or an unknown type.

    Filters are cached by (type, expression).
    """
    etype = ExpressionType.parse(expression_type)
    if etype is ExpressionType.TAG and subscription_string in (None, "", SUB_ALL):
        return None
    return _cached_filter(etype.value, subscription_string)


@lru_cache(maxsize=1024)
def _cached_filter(expression_type: str, expression: str) -> ExpressionMessageFilter:
    return ExpressionMessageFilter(build_subscription("", expression, expression_type))
