"""Compiles a checked selector tree into nested closures, once.

A compiled condition is a function of the properties mapping returning True,
False or None (SQL's unknown); it raises JavaValueError where RocketMQ's
evaluation throws (a property that does not convert to the literal's type),
which the caller turns into "no match". Every decision that depends only on
the tree (operand types, which conversion, which operator) is taken here, so
evaluation does no dispatch of its own; the common shapes (a property against
a literal, BETWEEN over a property, IS [NOT] NULL, IN) get dedicated closures.
A property that the expression converts to a number in several places
(``a > 1 AND a < 9``) is converted once per evaluation.

Semantics are RocketMQ 4.x's (filter module: ComparisonExpression,
LogicExpression, UnaryExpression, UnaryInExpression):

* ``=``: two NULLs are equal (TRUE); NULL on the left only gives NULL, NULL on
  the right only gives FALSE (so ``'x' = a`` is FALSE, ``'x' <> a`` TRUE, when
  ``a`` is absent); otherwise Java ``equals`` or, across types, ``compareTo``
  after converting the String side (``'10' = 10`` is TRUE, ``'x' = 10`` fails).
* ``>`` ``>=`` ``<`` ``<=``: NULL on either side gives NULL; a String property
  against a number is converted with ``Integer.valueOf``, ``Long.valueOf`` or
  ``Double.valueOf`` as the literal is an int, a long or a double (so
  ``a > 5`` fails on "5.5" while ``a > 5.0`` accepts it); two Strings are
  both converted with ``Double.valueOf``.
* IN: NULL for an absent property, else membership (NOT IN: non-membership).
* NOT, AND, OR: three-valued logic, evaluated left to right, stopping at the
  first operand that decides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import isnan
from typing import Any

from rocketmesh.filter.java_values import (
    NUMERIC_TYPES,
    JavaType,
    comparator,
    java_boolean,
    java_double,
    string_parser,
)
from rocketmesh.filter.sql_ast import (
    And,
    Between,
    BooleanCast,
    Equality,
    In,
    Literal,
    Negation,
    Node,
    Not,
    Or,
    Ordering,
    Property,
)

Evaluator = Callable[[Mapping[str, str]], Any]
Parser = Callable[[str], Any]

_INTEGRAL = (JavaType.INTEGER, JavaType.LONG)
_MIRROR = {">": "<", ">=": "<=", "<": ">", "<=": ">="}
_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda r: r > 0,
    ">=": lambda r: r >= 0,
    "<": lambda r: r < 0,
    "<=": lambda r: r <= 0,
}


def compile_condition(node: Node) -> Evaluator:
    """The evaluator of a condition node: True, False or None."""
    # A first pass counts where each property is converted, so that the second can share
    # one conversion between the places that convert the same property the same way.
    counting = _Compiler(None)
    counting.condition(node)
    return _Compiler(counting.conversions).condition(node)


def _memoized(parse: Parser) -> Parser:
    """``parse`` remembering its last input: within one evaluation every place that converts
    a property gets the same str object, so all but the first are answered from memory.
    The (input, result) pair is replaced as one tuple, so concurrent evaluations stay correct."""
    last: tuple[Any, Any] = (None, None)

    def convert(s: str) -> Any:
        nonlocal last
        seen = last
        if seen[0] is s:
            return seen[1]
        value = parse(s)
        last = (s, value)
        return value

    return convert


def _is_number(node: Node) -> bool:
    return isinstance(node, Literal) and node.java_type in NUMERIC_TYPES


def _never(_a: Any, _b: Any) -> int:
    raise AssertionError("compared a value that is always NULL")


def _strings_equal(a: str, b: str) -> bool:
    return a == b


class _Compiler:
    def __init__(self, conversions: dict[tuple[str, JavaType], int] | None):
        #: None while counting; then how many places convert (property, type).
        self.counting = conversions is None
        self.conversions: dict[tuple[str, JavaType], int] = {} if conversions is None else conversions
        self.shared: dict[tuple[str, JavaType], Parser] = {}
        self.dispatch: dict[type, Callable[[Any], Evaluator]] = {
            Literal: self.literal_condition,
            BooleanCast: self.boolean_cast,
            Ordering: self.ordering,
            Equality: self.equality,
            Not: self.negation,
            And: self.conjunction,
            Or: self.disjunction,
            In: self.membership,
            Between: self.between,
        }

    def condition(self, node: Node) -> Evaluator:
        return self.dispatch[type(node)](node)

    def parser(self, name: str, java_type: JavaType) -> Parser:
        """How property ``name`` is converted to ``java_type``: shared when done in several places."""
        key = (name, java_type)
        if self.counting:
            self.conversions[key] = self.conversions.get(key, 0) + 1
            return string_parser(java_type)
        if self.conversions.get(key, 0) < 2:
            return string_parser(java_type)
        if key not in self.shared:
            self.shared[key] = _memoized(string_parser(java_type))
        return self.shared[key]

    def value(self, node: Node) -> Evaluator:
        if isinstance(node, Literal):
            value = node.value
            return lambda p: value
        if isinstance(node, Property):
            name = node.name
            return lambda p: p.get(name)
        if isinstance(node, Negation):
            inner = self.value(node.operand)

            def negation(p: Mapping[str, str]) -> None:
                inner(p)  # evaluated for its failures only: minus over a non-number is NULL

            return negation
        return self.condition(node)

    # --- constants and casts ---

    def literal_condition(self, node: Literal) -> Evaluator:
        value = node.value
        return lambda p: value

    def boolean_cast(self, node: BooleanCast) -> Evaluator:
        name = node.prop.name

        def cast(p: Mapping[str, str]) -> Any:
            v = p.get(name)
            return None if v is None else v is True

        return cast

    # --- ordering: > >= < <= ---

    def ordering(self, node: Ordering) -> Evaluator:
        left, right, op = node.left, node.right, node.op
        if isinstance(left, Property) and _is_number(right):
            return self.property_vs_number(left.name, op, right)  # type: ignore[arg-type]
        if _is_number(left) and isinstance(right, Property):
            # c op x  <=>  x mirror(op) c: both are Java total orders after the same conversion.
            return self.property_vs_number(right.name, _MIRROR[op], left)  # type: ignore[arg-type]
        if isinstance(left, Property) and isinstance(right, Property):
            return self.property_vs_property(left.name, right.name, _TESTS[op])
        return self.generic_ordering(node)

    def property_vs_number(self, name: str, op: str, literal: Literal) -> Evaluator:
        c = literal.value
        assert literal.java_type is not None
        parse = self.parser(name, literal.java_type)
        if literal.java_type is JavaType.DOUBLE:
            # Literal doubles are finite and non-zero, so only NaN needs Double.compare's care:
            # it is above everything.
            if op == ">":
                def gt_double(p: Mapping[str, str]) -> Any:
                    s = p.get(name)
                    if s is None:
                        return None
                    x = parse(s)
                    return x > c or isnan(x)
                return gt_double
            if op == ">=":
                def ge_double(p: Mapping[str, str]) -> Any:
                    s = p.get(name)
                    if s is None:
                        return None
                    x = parse(s)
                    return x >= c or isnan(x)
                return ge_double
        if op == ">":
            def gt(p: Mapping[str, str]) -> Any:
                s = p.get(name)
                if s is None:
                    return None
                return parse(s) > c
            return gt
        if op == ">=":
            def ge(p: Mapping[str, str]) -> Any:
                s = p.get(name)
                if s is None:
                    return None
                return parse(s) >= c
            return ge
        if op == "<":
            def lt(p: Mapping[str, str]) -> Any:
                s = p.get(name)
                if s is None:
                    return None
                return parse(s) < c
            return lt

        def le(p: Mapping[str, str]) -> Any:
            s = p.get(name)
            if s is None:
                return None
            return parse(s) <= c
        return le

    def property_vs_property(self, left: str, right: str, test: Callable[[int], bool]) -> Evaluator:
        compare = comparator(JavaType.DOUBLE, JavaType.DOUBLE)
        parse_left = self.parser(left, JavaType.DOUBLE)
        parse_right = self.parser(right, JavaType.DOUBLE)

        def ordering(p: Mapping[str, str]) -> Any:
            a = p.get(left)
            if a is None:
                return None
            b = p.get(right)
            if b is None:
                return None
            # Two Strings are ordered only as doubles (ComparisonExpression.evaluate).
            return test(compare(parse_left(a), parse_right(b)))

        return ordering

    def generic_ordering(self, node: Ordering) -> Evaluator:
        lev, rev, test = self.value(node.left), self.value(node.right), _TESTS[node.op]
        compare = self.ordering_comparator(node.left.java_type, node.right.java_type)

        def ordering(p: Mapping[str, str]) -> Any:
            lv = lev(p)
            if lv is None:
                return None
            rv = rev(p)
            if rv is None:
                return None
            return test(compare(lv, rv))

        return ordering

    @staticmethod
    def ordering_comparator(lt: JavaType | None, rt: JavaType | None) -> Callable[[Any, Any], int]:
        if lt is None or rt is None:
            return _never  # one side is always NULL
        if lt is JavaType.STRING and rt is JavaType.STRING:
            compare = comparator(JavaType.DOUBLE, JavaType.DOUBLE)
            return lambda a, b: compare(java_double(a), java_double(b))
        return comparator(lt, rt)

    # --- equality: =, <>, IS [NOT] NULL ---

    def equality(self, node: Equality) -> Evaluator:
        left, right = node.left, node.right
        if isinstance(right, Literal) and right.java_type is None:
            return self.is_null(left)
        if isinstance(left, Property) and isinstance(right, Literal):
            return self.property_equals_literal(left.name, right, absent=None)
        if isinstance(left, Literal) and isinstance(right, Property) and left.java_type is not JavaType.BOOLEAN:
            # Literal on the left: an absent property on the right makes it FALSE, not NULL.
            return self.property_equals_literal(right.name, left, absent=False)
        if isinstance(left, Property) and isinstance(right, Property):
            return self.property_equals_property(left.name, right.name)
        return self.generic_equality(node)

    def is_null(self, operand: Node) -> Evaluator:
        if isinstance(operand, Property):
            name = operand.name
            return lambda p: p.get(name) is None
        ev = self.value(operand)
        return lambda p: ev(p) is None

    def is_not_null(self, operand: Node) -> Evaluator:
        if isinstance(operand, Property):
            name = operand.name
            return lambda p: p.get(name) is not None
        ev = self.value(operand)
        return lambda p: ev(p) is not None

    def property_equals_literal(self, name: str, literal: Literal, absent: Any) -> Evaluator:
        c = literal.value
        jt = literal.java_type
        if jt is JavaType.STRING:
            def equals_string(p: Mapping[str, str]) -> Any:
                s = p.get(name)
                return absent if s is None else s == c
            return equals_string
        if jt is JavaType.BOOLEAN:
            def equals_boolean(p: Mapping[str, str]) -> Any:
                s = p.get(name)
                return absent if s is None else java_boolean(s) is c
            return equals_boolean
        assert jt is not None
        # Literal doubles are finite and non-zero: == is Double.compare(...) == 0 here.
        parse = self.parser(name, jt)

        def equals_number(p: Mapping[str, str]) -> Any:
            s = p.get(name)
            if s is None:
                return absent
            return parse(s) == c

        return equals_number

    @staticmethod
    def property_equals_property(left: str, right: str) -> Evaluator:
        def equals(p: Mapping[str, str]) -> Any:
            a = p.get(left)
            b = p.get(right)
            if a is None:
                return True if b is None else None
            if b is None:
                return False
            return a == b

        return equals

    def generic_equality(self, node: Equality) -> Evaluator:
        lev, rev = self.value(node.left), self.value(node.right)
        lt, rt = node.left.java_type, node.right.java_type
        if lt is None or rt is None:
            same: Callable[[Any, Any], bool] = _never  # type: ignore[assignment]
        elif lt is JavaType.STRING and rt is JavaType.STRING:
            same = _strings_equal
        else:
            compare = comparator(lt, rt)

            def same(a: Any, b: Any) -> bool:
                return compare(a, b) == 0

        def equality(p: Mapping[str, str]) -> Any:
            lv = lev(p)
            rv = rev(p)
            if lv is None:
                return True if rv is None else None
            if rv is None:
                return False
            return same(lv, rv)

        return equality

    # --- logic ---

    def negation(self, node: Not) -> Evaluator:
        operand = node.operand
        if isinstance(operand, Equality) and isinstance(operand.right, Literal) and operand.right.java_type is None:
            return self.is_not_null(operand.left)
        inner = self.condition(operand)

        def negate(p: Mapping[str, str]) -> Any:
            v = inner(p)
            return None if v is None else not v

        return negate

    def conjunction(self, node: And) -> Evaluator:
        parts = tuple(self.condition(o) for o in node.operands)
        if len(parts) == 2:
            first, second = parts

            def and2(p: Mapping[str, str]) -> Any:
                a = first(p)
                if a is False:
                    return False
                b = second(p)
                if b is False:
                    return False
                return None if a is None or b is None else True

            return and2

        def and_n(p: Mapping[str, str]) -> Any:
            unknown = False
            for part in parts:
                v = part(p)
                if v is False:
                    return False
                if v is None:
                    unknown = True
            return None if unknown else True

        return and_n

    def disjunction(self, node: Or) -> Evaluator:
        parts = tuple(self.condition(o) for o in node.operands)
        if len(parts) == 2:
            first, second = parts

            def or2(p: Mapping[str, str]) -> Any:
                a = first(p)
                if a is True:
                    return True
                b = second(p)
                if b is True:
                    return True
                return None if a is None or b is None else False

            return or2

        def or_n(p: Mapping[str, str]) -> Any:
            unknown = False
            for part in parts:
                v = part(p)
                if v is True:
                    return True
                if v is None:
                    unknown = True
            return None if unknown else False

        return or_n

    # --- IN and BETWEEN ---

    @staticmethod
    def membership(node: In) -> Evaluator:
        name, values = node.prop.name, node.values
        if node.negated:
            def not_in(p: Mapping[str, str]) -> Any:
                s = p.get(name)
                return None if s is None else s not in values
            return not_in

        def is_in(p: Mapping[str, str]) -> Any:
            s = p.get(name)
            return None if s is None else s in values

        return is_in

    def between(self, node: Between) -> Evaluator:
        value, low, high = node.value, node.low, node.high
        if (isinstance(value, Property) and isinstance(low, Literal) and isinstance(high, Literal)
                and low.java_type in _INTEGRAL and low.java_type is high.java_type):
            return self.property_between_integers(value.name, low, high, node.negated)
        # BETWEEN is ``>= low AND <= high``; NOT BETWEEN is ``< low OR > high`` (ComparisonExpression).
        if node.negated:
            return self.disjunction(Or((Ordering("<", value, low), Ordering(">", value, high))))
        return self.conjunction(And((Ordering(">=", value, low), Ordering("<=", value, high))))

    def property_between_integers(self, name: str, low: Literal, high: Literal, negated: bool) -> Evaluator:
        lo, hi = low.value, high.value
        assert low.java_type is not None
        parse = self.parser(name, low.java_type)
        if negated:
            def not_between(p: Mapping[str, str]) -> Any:
                s = p.get(name)
                if s is None:
                    return None
                x = parse(s)
                return x < lo or x > hi
            return not_between

        def between(p: Mapping[str, str]) -> Any:
            s = p.get(name)
            if s is None:
                return None
            x = parse(s)
            return lo <= x <= hi

        return between
