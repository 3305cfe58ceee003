"""What a consumer subscribes to on a topic (RocketMQ's SubscriptionData and FilterAPI)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketmesh.filter.errors import FilterSyntaxError
from rocketmesh.filter.expression_type import ExpressionType
from rocketmesh.filter.java_values import java_trim
from rocketmesh.filter.sql92 import compile_sql
from rocketmesh.model.codec import tags_hash_code

#: The tag expression that subscribes to every message.
SUB_ALL = "*"
TAG_SEPARATOR = "||"

_version_lock = threading.Lock()
_last_version = 0


def next_sub_version() -> int:
    """A millisecond timestamp, as RocketMQ's ``subVersion``, but strictly increasing within
    this process so that a newer subscription always carries a larger version."""
    global _last_version
    now = time.time_ns() // 1_000_000
    with _version_lock:
        _last_version = max(now, _last_version + 1)
        return _last_version


@dataclass
class SubscriptionData:
    """One topic's subscription: the expression text, its type and, for tags, the tag names
    and their consume-queue hash codes."""

    topic: str
    sub_string: str
    expression_type: ExpressionType = ExpressionType.TAG
    #: The tags of a TAG expression; empty for "*" and for SQL92.
    tags_set: frozenset[str] = frozenset()
    #: ``tags_hash_code`` of each tag: what the broker matches consume-queue entries against.
    code_set: frozenset[int] = frozenset()
    sub_version: int = field(default_factory=next_sub_version)

    def __post_init__(self) -> None:
        self.expression_type = ExpressionType.parse(self.expression_type)
        self.tags_set = frozenset(self.tags_set)
        self.code_set = frozenset(self.code_set)

    def matches_all(self) -> bool:
        """A TAG subscription to every message ("*", or an empty expression)."""
        return self.expression_type is ExpressionType.TAG and self.sub_string in (SUB_ALL, "")

    def is_tag_matched(self, tags: str | None) -> bool:
        """The consumer's own re-check of a pulled message, which the broker matched by tag hash
        code only (two tags can share a code: "Aa" and "BB").

        As RocketMQ's client does it: a subscription without tags (``*``, SQL92) takes every
        message; otherwise the message's tag must be one of the subscribed tags, so a message
        without a tag never matches.
        """
        if not self.tags_set:
            return True
        return tags is not None and tags in self.tags_set

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON form of a SubscriptionData (as in a heartbeat)."""
        return {
            "topic": self.topic,
            "subString": self.sub_string,
            "expressionType": self.expression_type.value,
            "tagsSet": sorted(self.tags_set),
            "codeSet": sorted(self.code_set),
            "subVersion": self.sub_version,
            "classFilterMode": False,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SubscriptionData:
        """Read RocketMQ's JSON form back, checking it.

        A TAG subscription missing ``tagsSet`` or ``codeSet`` gets them from its expression;
        a SQL92 one is compiled, so a bad selector raises FilterSyntaxError here. Other
        malformed input raises ValueError naming the field.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"subscription data must be a JSON object, not {type(d).__name__}")  # noqa: TRY004 - malformed JSON
        topic = d.get("topic")
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"subscription data needs a topic name, got {topic!r}")
        if d.get("classFilterMode"):
            raise ValueError(f"subscription to {topic}: class filter mode is not supported")
        etype = ExpressionType.parse(d.get("expressionType"))
        sub_string = d.get("subString")
        if sub_string is None and etype is ExpressionType.TAG:
            sub_string = SUB_ALL
        if not isinstance(sub_string, str):
            raise ValueError(f"subscription to {topic}: subString must be a string, got {sub_string!r}")  # noqa: TRY004 - malformed JSON
        version = d.get("subVersion")
        if isinstance(version, str) and version.isdigit():
            version = int(version)  # the C++ client writes it as a string
        if version is None:
            version = next_sub_version()
        elif not _is_int(version):
            raise ValueError(f"subscription to {topic}: subVersion must be an integer, got {version!r}")
        tags = _items(d, "tagsSet", str, topic)
        codes = _items(d, "codeSet", int, topic)
        if etype is ExpressionType.SQL92:
            compile_sql(sub_string)
        elif sub_string not in (SUB_ALL, ""):
            if tags is None:
                tags = frozenset(_split_tags(sub_string))
            if codes is None:
                codes = frozenset(tags_hash_code(t) for t in tags)
        return cls(topic, sub_string, etype, tags or frozenset(), codes or frozenset(), version)


def build_subscription(topic: str, expression: str | None,
                       expression_type: ExpressionType | str | None = ExpressionType.TAG) -> SubscriptionData:
    """The subscription a consumer sends for ``expression`` (RocketMQ's FilterAPI).

    TAG: None, "" or "*" subscribe to everything; otherwise the expression is split on "||",
    each piece trimmed, empty pieces dropped (``"TagA || TagB"`` is {TagA, TagB}); an
    expression that names no tag at all (``"||"``, ``" "``) raises FilterSyntaxError.
    SQL92: the selector is compiled now, so a bad one raises FilterSyntaxError at subscribe
    time. An unknown expression type raises FilterSyntaxError. None and "" as the type mean TAG.
    """
    etype = ExpressionType.parse(expression_type)
    if expression is not None and not isinstance(expression, str):
        raise FilterSyntaxError(f"a subscription expression must be a string, not {type(expression).__name__}")
    if etype is ExpressionType.SQL92:
        if not expression:
            raise FilterSyntaxError("a SQL92 subscription needs an expression", expression)
        compile_sql(expression)
        return SubscriptionData(topic, expression, etype)
    if expression is None or expression == "" or expression == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL)
    tags = _split_tags(expression)
    if not tags:
        raise FilterSyntaxError(f"tag expression {expression!r} names no tag", expression)
    return SubscriptionData(topic, expression, etype, frozenset(tags), frozenset(tags_hash_code(t) for t in tags))


def _split_tags(expression: str) -> list[str]:
    # Java's String.trim, as RocketMQ trims each piece.
    return [t for t in (java_trim(piece) for piece in expression.split(TAG_SEPARATOR)) if t]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _items(d: Mapping[str, Any], key: str, kind: type, topic: str) -> frozenset | None:
    raw = d.get(key)
    if raw is None:
        return None
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise ValueError(f"subscription to {topic}: {key} must be a list, got {raw!r}")  # noqa: TRY004 - malformed JSON
    items = list(raw)
    for item in items:
        if not (_is_int(item) if kind is int else isinstance(item, kind)):
            raise ValueError(f"subscription to {topic}: {key} holds {item!r}, not a {kind.__name__}")
    return frozenset(items)
