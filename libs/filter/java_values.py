"""Java's value conversions and comparisons, as RocketMQ's selector applies them.

Message properties are strings; a selector compares them with literals that are
Java ``Integer``, ``Long``, ``Double``, ``Boolean`` or ``String`` values. RocketMQ
(ComparisonExpression.__compare) converts one side to the other's type with
``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf`` or ``Boolean.valueOf``
and then calls ``compareTo``. A conversion that fails is an error for the whole
evaluation (the broker then treats the message as not matching); this module
raises :class:`JavaValueError` for it.

The parsers take the common shapes ("42", "-3.5") by a short path and keep
Java's full grammar (signs, non-ASCII digits, ``NaN``, ``Infinity``, hex
floats, ``d``/``f`` suffixes, trimming for doubles) for the rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from enum import Enum
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

#: What ``String.trim`` removes: every char up to and including the space.
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
#: ``Integer.parseInt``: an optional sign, then decimal digits (any script, as Character.digit).
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
#: ``Double.valueOf`` after trimming: NaN, Infinity, decimal or hex floats, optional f/d suffix.
_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?\d+[fFdD]?)",
    re.ASCII,
)
#: The usual shape of a number in a property, which needs no trimming or suffix handling.
_PLAIN_DECIMAL = re.compile(r"-?\d+(?:\.\d+)?", re.ASCII)


class JavaValueError(Exception):
    """A conversion or comparison Java would reject with an exception at evaluation time."""


class JavaType(Enum):
    """The Java class of a value seen by the selector."""

    STRING = "String"
    BOOLEAN = "Boolean"
    INTEGER = "Integer"
    LONG = "Long"
    DOUBLE = "Double"


def java_trim(s: str) -> str:
    """``String.trim``: drop leading and trailing chars up to U+0020 (controls and space)."""
    return s.strip(_JAVA_TRIM)


def _parse_integral(s: str, low: int, high: int, name: str) -> int:
    try:
        if _JAVA_INTEGER.fullmatch(s):
            value = int(s)
            if low <= value <= high:
                return value
    except ValueError:  # more digits than Python parses: far out of range anyway
        pass
    raise JavaValueError(f"{name}.valueOf({s!r}) fails")


def java_integer(s: str) -> int:
    """``Integer.valueOf(s)``; raises JavaValueError when Java would throw."""
    if len(s) < 10 and s.isdecimal():  # nine digits of any script (as Character.digit) always fit
        return int(s)
    return _parse_integral(s, INT_MIN, INT_MAX, "Integer")


def java_long(s: str) -> int:
    """``Long.valueOf(s)``; raises JavaValueError when Java would throw."""
    if len(s) < 19 and s.isdecimal():  # eighteen digits always fit
        return int(s)
    return _parse_integral(s, LONG_MIN, LONG_MAX, "Long")


def java_double(s: str) -> float:
    """``Double.valueOf(s)``; raises JavaValueError when Java would throw."""
    if _PLAIN_DECIMAL.fullmatch(s):
        return float(s)
    t = s.strip(_JAVA_TRIM)
    if not _JAVA_DOUBLE.fullmatch(t):
        raise JavaValueError(f"Double.valueOf({s!r}) fails")
    body = t.lstrip("+-")
    if body == "NaN":
        return math.nan
    if body == "Infinity":
        return -math.inf if t[0] == "-" else math.inf
    if t[-1] in "fFdD":  # a type suffix: hex floats end with decimal exponent digits, so no clash
        t = t[:-1]
    if "x" in t or "X" in t:
        return float.fromhex(t)
    return float(t)


def java_boolean(s: str) -> bool:
    """``Boolean.valueOf(s)``: true only for "true" in any case."""
    return len(s) == 4 and s.lower() == "true"


def compare_doubles(a: float, b: float) -> int:
    """``Double.compare``: a total order where -0.0 < 0.0 and NaN is above everything, equal to itself."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a == 0.0:
            return int(math.copysign(1.0, a) - math.copysign(1.0, b)) // 2
        return 0
    return int(math.isnan(a)) - int(math.isnan(b))


def _compare_ints(a: int, b: int) -> int:
    return (a > b) - (a < b)


def _compare_bools(a: bool, b: bool) -> int:
    return int(a) - int(b)


def _compare_strings(a: str, b: str) -> int:
    return (a > b) - (a < b)


def _minus_one(_a: Any, _b: Any) -> int:
    return -1


def _class_cast(_a: Any, _b: Any) -> int:
    # RocketMQ casts the Boolean to String here, which throws ClassCastException.
    raise JavaValueError("Boolean cannot be compared with String")


_INTEGRAL = (JavaType.INTEGER, JavaType.LONG)
#: The classes of number literals.
NUMERIC_TYPES = (JavaType.INTEGER, JavaType.LONG, JavaType.DOUBLE)
_PARSERS: dict[JavaType, Callable[[str], Any]] = {
    JavaType.INTEGER: java_integer,
    JavaType.LONG: java_long,
    JavaType.DOUBLE: java_double,
    JavaType.BOOLEAN: java_boolean,
}


def string_parser(target: JavaType) -> Callable[[str], Any]:
    """The ``valueOf`` RocketMQ uses to turn a String into ``target``."""
    return _PARSERS[target]


def comparator(left: JavaType, right: JavaType) -> Callable[[Any, Any], int]:
    """RocketMQ's ``__compare`` for a pair of Java classes: the sign of ``left.compareTo(right)``
    after converting one side, -1 for pairs it cannot relate, or JavaValueError."""
    if left is right:
        if left is JavaType.DOUBLE:
            return compare_doubles
        if left is JavaType.BOOLEAN:
            return _compare_bools
        if left is JavaType.STRING:
            return _compare_strings
        return _compare_ints
    if left is JavaType.BOOLEAN:
        return _class_cast if right is JavaType.STRING else _minus_one
    if left is JavaType.STRING:
        if right is JavaType.BOOLEAN:
            return lambda a, b: _compare_bools(java_boolean(a), b)
        parse = _PARSERS[right]
        if right is JavaType.DOUBLE:
            return lambda a, b: compare_doubles(parse(a), b)
        return lambda a, b: _compare_ints(parse(a), b)
    # left is numeric
    if right is JavaType.BOOLEAN:
        return _minus_one
    if right is JavaType.STRING:
        parse = _PARSERS[left]
        if left is JavaType.DOUBLE:
            return lambda a, b: compare_doubles(a, parse(b))
        return lambda a, b: _compare_ints(a, parse(b))
    if left in _INTEGRAL and right in _INTEGRAL:
        return _compare_ints
    return lambda a, b: compare_doubles(float(a), float(b))
