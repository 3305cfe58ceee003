"""The syntax tree of a SQL92 selector, after RocketMQ's construction checks.

Every node knows the Java class its value has at run time (``java_type``): a
literal its own, a property String, a condition Boolean; ``None`` means the
node is always NULL (a NULL literal, or a negation of something that is not a
number, which RocketMQ evaluates to null).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketmesh.filter.java_values import JavaType


@dataclass(frozen=True, slots=True)
class Literal:
    """A constant. ``folded`` marks a number made by negating a literal (``-5``), which
    RocketMQ treats as an expression, not a constant, in its BETWEEN bounds check."""

    value: object
    java_type: JavaType | None
    pos: int
    folded: bool = False

    @property
    def is_condition(self) -> bool:
        # TRUE, FALSE and NULL are RocketMQ's BooleanConstantExpressions.
        return self.java_type is None or self.java_type is JavaType.BOOLEAN


@dataclass(frozen=True, slots=True)
class Property:
    """A message property, by name; its value is a String, or NULL when absent."""

    name: str
    pos: int
    java_type = JavaType.STRING
    is_condition = False


@dataclass(frozen=True, slots=True)
class Negation:
    """Unary minus over something that is not a numeric literal: always NULL at run time,
    after evaluating its operand."""

    operand: Node
    pos: int
    java_type = None
    is_condition = False


@dataclass(frozen=True, slots=True)
class Ordering:
    """``left op right`` for op in ``> >= < <=``."""

    op: str
    left: Node
    right: Node
    java_type = JavaType.BOOLEAN
    is_condition = True


@dataclass(frozen=True, slots=True)
class Equality:
    """``left = right``; ``x IS NULL`` is this with a NULL literal on the right."""

    left: Node
    right: Node
    java_type = JavaType.BOOLEAN
    is_condition = True


@dataclass(frozen=True, slots=True)
class Not:
    """``NOT operand`` (also ``<>`` and ``IS NOT NULL``)."""

    operand: Node
    java_type = JavaType.BOOLEAN
    is_condition = True


@dataclass(frozen=True, slots=True)
class And:
    """Conditions joined by AND, in evaluation order."""

    operands: tuple[Node, ...]
    java_type = JavaType.BOOLEAN
    is_condition = True


@dataclass(frozen=True, slots=True)
class Or:
    """Conditions joined by OR, in evaluation order."""

    operands: tuple[Node, ...]
    java_type = JavaType.BOOLEAN
    is_condition = True


@dataclass(frozen=True, slots=True)
class In:
    """``prop [NOT] IN ('a', ...)``: string literals only, a property on the left."""

    prop: Property
    values: frozenset[str]
    negated: bool
    java_type = JavaType.BOOLEAN
    is_condition = True


@dataclass(frozen=True, slots=True)
class Between:
    """``value BETWEEN low AND high`` (``>= low AND <= high``) or, negated, ``< low OR > high``."""

    value: Node
    low: Node
    high: Node
    negated: bool
    java_type = JavaType.BOOLEAN
    is_condition = True


@dataclass(frozen=True, slots=True)
class BooleanCast:
    """A bare property used as a condition: NULL when absent, else TRUE only for a Boolean
    value, which a String property never is."""

    prop: Property
    java_type = JavaType.BOOLEAN
    is_condition = True


Node = Literal | Property | Negation | Ordering | Equality | Not | And | Or | In | Between | BooleanCast
