"""SQL92 message selectors: RocketMQ 4.x's grammar, conversions and three-valued logic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from rocketmesh.filter import FilterSyntaxError, SqlFilter, compile_sql

# (expression, properties, matches?)
CASES = [
    # --- strings, =, <> ---
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "y"}, False),
    ("a = 'x'", {"a": "X"}, False),
    ("a = 'x'", {}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a <> 'x'", {"a": "x"}, False),
    ("a <> 'x'", {}, False),  # NOT unknown is unknown
    ("a = ''", {"a": ""}, True),
    ("a = 'héllo wörld'", {"a": "héllo wörld"}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a = ''''", {"a": "'"}, True),
    ("TAGS = '''''tag'''''", {"TAGS": "''tag''"}, True),
    ("a = '1'", {"a": "01"}, False),  # two Strings compare as strings with =
    # RocketMQ: NULL on the right of = is FALSE, not unknown; two NULLs are equal.
    ("'x' = a", {}, False),
    ("'x' <> a", {}, True),
    ("5 = a", {}, False),
    ("5 <> a", {}, True),
    ("a = b", {}, True),
    ("a = b", {"a": "1"}, False),
    ("a <> b", {"a": "1"}, True),
    ("a = b", {"b": "1"}, False),
    ("a <> b", {"b": "1"}, False),
    ("a = b", {"a": "1", "b": "1"}, True),
    ("a = b", {"a": "1", "b": "1.0"}, False),
    # --- numbers against String properties ---
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "-3"}, True),
    ("a <= -3", {"a": "-3"}, True),
    ("a < -3", {"a": "-3"}, False),
    ("a > 5", {}, False),
    ("a = 10", {"a": "10"}, True),
    ("a = 10", {"a": "010"}, True),
    ("a = 10", {"a": "+10"}, True),
    ("a <> 10", {"a": "11"}, True),
    # An int literal converts the property with Integer.valueOf: "5.5" or "abc" fail the evaluation.
    ("a > 5", {"a": "5.5"}, False),
    ("a <= 5", {"a": "5.5"}, False),
    ("a = 10", {"a": "10.0"}, False),
    ("a <> 10", {"a": "10.0"}, False),
    ("a > 5", {"a": "abc"}, False),
    ("a <> 5", {"a": "abc"}, False),
    ("NOT (a > 5)", {"a": "abc"}, False),
    ("a > 1", {"a": " 2"}, False),  # Integer.valueOf does not trim
    ("a > 5", {"a": "3000000000"}, False),  # beyond int
    ("a > 5L", {"a": "3000000000"}, False),  # 5L is still an int literal
    ("a > 2147483648", {"a": "3000000000"}, True),  # a long literal: Long.valueOf
    ("a < 9223372036854775807", {"a": "9223372036854775806"}, True),
    # A double literal converts with Double.valueOf.
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 5.0", {"a": "6"}, True),
    ("a = 10.0", {"a": "10"}, True),
    ("a = 1.5", {"a": "1.50"}, True),
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > 3.1E10", {"a": "3.1415E10"}, True),
    ("a > 3.1e10", {"a": "31415000000"}, True),
    ("a > .5", {"a": "0.6"}, True),
    ("a > 5.", {"a": "6"}, True),
    ("a < 1e3", {"a": "999"}, True),
    ("a > 1.0", {"a": " 2 "}, True),  # Double.valueOf trims
    ("a > 1.0", {"a": "2d"}, True),
    ("a > 1.0", {"a": "0x1p3"}, True),
    ("a > 1.0", {"a": "Infinity"}, True),
    ("a < 1.0", {"a": "-Infinity"}, True),
    ("a > 1.0", {"a": "NaN"}, True),  # Double.compare puts NaN above everything
    ("a < 1.0", {"a": "NaN"}, False),
    ("a = 1.0", {"a": "NaN"}, False),
    ("a > 1.0", {"a": "inf"}, False),
    ("a > 1.0", {"a": "1_000"}, False),
    ("a > 1.0", {"a": ""}, False),
    # Negative numbers by unary minus; a number on the left.
    ("a > -5", {"a": "-4"}, True),
    ("a = -5", {"a": "-5"}, True),
    ("a = - -5", {"a": "5"}, True),
    ("a > -2.5", {"a": "-2"}, True),
    ("a = +5", {"a": "5"}, True),
    ("5 < a", {"a": "10"}, True),
    ("5 > a", {"a": "10"}, False),
    ("5.5 <= a", {"a": "5.5"}, True),
    ("5 = a", {"a": "5"}, True),
    ("-a IS NULL", {"a": "5"}, True),  # minus over a String is NULL
    ("-a > 5", {"a": "5"}, False),
    # Two properties: ordered as doubles, equal as strings.
    ("a > b", {"a": "10", "b": "9"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "2.5", "b": "2"}, True),
    ("a > b", {"a": "x", "b": "1"}, False),
    ("a > b", {"a": "1"}, False),
    # --- booleans ---
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "false"}, True),
    ("a = FALSE", {"a": "anything"}, True),  # Boolean.valueOf: not "true" is false
    ("a = FALSE", {}, False),
    ("a <> TRUE", {"a": "no"}, True),
    ("TRUE = a", {"a": "true"}, False),  # RocketMQ's evaluation fails on Boolean vs String
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, False),
    ("NOT FALSE", {}, True),
    ("NOT NULL", {}, False),
    ("a", {"a": "true"}, False),  # a bare String property is never TRUE
    ("NOT a", {"a": "true"}, True),
    ("NOT a", {}, False),
    ("(a = 1) = TRUE", {"a": "1"}, True),
    ("(a = 1) = FALSE", {"a": "2"}, True),
    ("(a = 1) = (b = 1)", {"a": "1", "b": "1"}, True),
    # --- IN ---
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a IN ('x', 'y')", {}, False),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {"a": "x"}, False),
    ("a NOT IN ('x', 'y')", {}, False),
    ("NOT (a IN ('x'))", {}, False),
    ("a IN ('1')", {"a": "01"}, False),
    ("a IN ('1', '2', '3', '4', '5', '6')", {"a": "6"}, True),
    ("a IN ('it''s')", {"a": "it's"}, True),
    ("TAGS IN ('TagA', 'TagB')", {"TAGS": "TagA"}, True),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"TAGS": "TagB", "a": "3"}, True),
    # --- BETWEEN ---
    ("a BETWEEN 0 AND 3", {"a": "2"}, True),
    ("a BETWEEN 0 AND 3", {"a": "0"}, True),
    ("a BETWEEN 0 AND 3", {"a": "3"}, True),
    ("a BETWEEN 0 AND 3", {"a": "4"}, False),
    ("a BETWEEN 0 AND 3", {"a": "-1"}, False),
    ("a BETWEEN 0 AND 3", {}, False),
    ("a BETWEEN 0 AND 3", {"a": "abc"}, False),
    ("a BETWEEN 0 AND 3", {"a": "1.5"}, False),
    ("a BETWEEN 1 AND 1", {"a": "1"}, True),
    ("a BETWEEN -5 AND -1", {"a": "-3"}, True),
    ("a BETWEEN 0.5 AND 3", {"a": "2"}, True),
    ("a BETWEEN 0.5 AND 3", {"a": "1.5"}, False),  # the <= 3 half converts with Integer.valueOf
    ("a BETWEEN 0.5 AND 3.0", {"a": "1.5"}, True),
    ("a BETWEEN 1 AND 3000000000", {"a": "2"}, True),
    ("a BETWEEN b AND c", {"a": "2", "b": "1", "c": "3"}, True),
    ("a BETWEEN b AND c", {"a": "2", "b": "1"}, False),
    ("a between 2 and 10", {"a": "10"}, True),
    ("a BETWEEN 5 AND -1", {"a": "2"}, False),  # a negated bound is not checked, as in RocketMQ
    ("a NOT BETWEEN 0 AND 3", {"a": "5"}, True),
    ("a NOT BETWEEN 0 AND 3", {"a": "-5"}, True),
    ("a NOT BETWEEN 0 AND 3", {"a": "2"}, False),
    ("a NOT BETWEEN 0 AND 3", {}, False),
    ("a NOT BETWEEN 0 AND 3", {"a": "abc"}, False),
    ("a NOT BETWEEN 3 AND 1", {"a": "2"}, True),  # NOT BETWEEN does not check its bounds
    ("a NOT BETWEEN 0.5 AND 3.5", {"a": "4"}, True),
    ("NOT (a BETWEEN 0 AND 3)", {}, False),
    ("NOT (a BETWEEN 0 AND 3)", {"a": "7"}, True),
    # --- IS [NOT] NULL ---
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a IS NOT NULL", {}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {}, False),
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("(a = 1) IS NULL", {}, True),
    ("(a = 1) IS NULL", {"a": "1"}, False),
    ("(a = 1) IS NOT NULL", {"a": "2"}, True),
    ("NOT a IS NULL", {}, False),
    ("NOT a IS NULL", {"a": "1"}, True),
    # --- three-valued AND / OR / NOT ---
    ("a = 1 AND b = 1", {"a": "1", "b": "1"}, True),
    ("a = 1 AND b = 1", {"a": "1"}, False),  # TRUE AND unknown
    ("NOT (a = 1 AND b = 1)", {"a": "1"}, False),  # ... is unknown
    ("NOT (a = 1 AND b = 1)", {"a": "2"}, True),  # FALSE AND unknown is FALSE
    ("NOT (b = 1 AND a = 1)", {"a": "2"}, True),  # unknown AND FALSE is FALSE
    ("a = 1 OR b = 1", {"a": "1"}, True),
    ("b = 1 OR a = 1", {"a": "1"}, True),  # unknown OR TRUE is TRUE
    ("NOT (a = 2 OR b = 1)", {"a": "1"}, False),  # FALSE OR unknown is unknown
    ("NOT (a = 2 OR a = 3)", {"a": "1"}, True),
    ("NOT (b = 1)", {}, False),
    ("NOT NOT (a = 1)", {"a": "1"}, True),
    ("NOT (NOT (b = 1))", {}, False),
    ("a = 1 AND b = 2 AND c = 3", {"a": "1", "b": "2", "c": "3"}, True),
    ("a = 1 AND b = 2 AND c = 3", {"a": "1", "b": "2", "c": "4"}, False),
    ("NOT (a = 1 AND b = 2 AND c = 3)", {"a": "1", "c": "4"}, True),
    ("NOT (a = 1 AND b = 2 AND c = 3)", {"a": "1", "c": "3"}, False),
    ("a = 1 OR b = 2 OR c = 3", {"c": "3"}, True),
    ("NOT (a = 1 OR b = 2 OR c = 3)", {"a": "0", "c": "4"}, False),
    ("NOT (a = 1 OR b = 2 OR c = 3)", {"a": "0", "b": "0", "c": "4"}, True),
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "3", "b": "5", "c": "6", "d": "4"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "2", "b": "4", "c": "5", "d": "5"}, False),
    # An evaluation failure ends the whole evaluation, unless a decided operand stops it first.
    ("a > 5 OR b = '1'", {"a": "x", "b": "1"}, False),
    ("b = '1' OR a > 5", {"a": "x", "b": "1"}, True),
    ("b = '2' AND a > 5", {"a": "x", "b": "1"}, False),
    ("NOT (b = '2' AND a > 5)", {"a": "x", "b": "1"}, True),
    ("TRUE OR a > 5", {"a": "x"}, True),
    ("a > 5 OR TRUE", {"a": "x"}, False),
    # --- precedence: OR < AND < NOT < comparisons ---
    ("a = 1 OR b = 1 AND c = 1", {"a": "1"}, True),
    ("(a = 1 OR b = 1) AND c = 1", {"a": "1"}, False),
    ("b = 1 AND c = 1 OR a = 1", {"a": "1"}, True),
    ("NOT a = 1 AND b = 1", {"a": "2", "b": "1"}, True),
    ("NOT a = 1 OR b = 1", {"a": "1", "b": "2"}, False),
    ("NOT a > 1", {"a": "0"}, True),
    ("a > 1 = TRUE", {"a": "2"}, True),  # ordering binds tighter than =
    ("((a = 1))", {"a": "1"}, True),
    # --- keywords in any case, property names case-sensitive ---
    ("a Is NuLl", {}, True),
    ("a = true", {"a": "true"}, True),
    ("a nOt BeTwEeN 1 AnD 2", {"a": "3"}, True),
    ("a not in ('x') and b in ('y') or c is not null", {"c": "1"}, True),
    ("A = 1", {"A": "1"}, True),
    ("A = 1", {"a": "1"}, False),
    # --- identifiers, whitespace and comments ---
    ("$a_1 = 'x'", {"$a_1": "x"}, True),
    ("_x IS NULL", {}, True),
    ("now > 5", {"now": "6"}, True),
    ("a\n=\t1\r", {"a": "1"}, True),
    ("a = 1 -- a comment", {"a": "1"}, True),
    ("a = 1 -- a comment\nAND b = 2", {"a": "1", "b": "2"}, True),
    ("/* c */ a = 1 /* d */", {"a": "1"}, True),
]


@pytest.mark.parametrize("expression,properties,expected", CASES)
def test_expression_table(expression, properties, expected):
    assert compile_sql(expression).evaluate(properties) is expected


# (bad expression, something the message must say)
BAD = [
    ("a >", "expected a value but found end of input at position 3"),
    ("a = 'x", "unterminated string literal at position 4"),
    ("(a = 1", "expected ')' but found end of input at position 6"),
    ("a BETWEEN 1", "expected AND but found end of input at position 11"),
    ("a BETWEEN 1 OR 2", "expected AND but found 'OR'"),
    ("a IN ()", "expected a string literal but found ')' at position 6"),
    ("a IN ('x'", "expected ')'"),
    ("a IN ('x',)", "expected a string literal"),
    ("a IN (1, 2)", "expected a string literal but found '1'"),
    ("a == 1", "expected a value but found '=' at position 3"),
    ("", "empty expression"),
    ("   ", "empty expression"),
    ("-- only a comment", "empty expression"),
    ("a ! 1", "unexpected character '!' at position 2"),
    ("a != 1", "unexpected character '!'"),
    ("a = 1 /* open", "unterminated comment"),
    ("a.b = 1", "unexpected character '.' at position 1"),
    ("a = 1)", "found ')' at position 5"),
    ("a = 1 b = 2", "found 'b' at position 6"),
    ("a LIKE 'x%'", "found 'LIKE'"),
    ("a CONTAINS 'x'", "found 'CONTAINS'"),  # RocketMQ 5.x only
    ("a IS 1", "expected NULL but found '1'"),
    ("a IS NOT 1", "expected NULL"),
    ("a > 'x'", "'x' cannot be compared with >"),
    ("'x' <= a", "'x' cannot be compared with <="),
    ("a >= TRUE", "TRUE cannot be compared with >="),
    ("a < NULL", "NULL cannot be compared with <"),
    ("(a = 1) > 2", "a condition cannot be compared with >"),
    ("a > b > c", "a condition cannot be compared with >"),
    ("a BETWEEN 'a' AND 'b'", "'a' cannot be compared with BETWEEN"),
    ("a BETWEEN 3 AND 1", "BETWEEN bounds are reversed: 3 is greater than 1"),
    ("a BETWEEN 2.5 AND 2", "BETWEEN bounds are reversed"),
    ("a BETWEEN NULL AND 1", "NULL cannot be compared with BETWEEN"),
    ("a = NULL", "NULL cannot be compared with = (use IS NULL)"),
    ("NULL <> a", "NULL cannot be compared with <>"),
    ("TRUE = 1", "TRUE cannot be compared with 1"),
    ("FALSE = 'x'", "FALSE cannot be compared with 'x'"),
    ("'x' IN ('x')", "IN needs a property on its left"),
    ("(a) NOT IN ('x') AND -a IN ('x')", "IN needs a property on its left"),
    ("5", "5 is not a condition at position 0"),
    ("'x'", "'x' is not a condition"),
    ("a = 1 AND 5", "5 is not a condition at position 10"),
    ("NOT 5", "5 is not a condition"),
    ("-a", "a negation is not a condition"),
    ("a > 0.0", "0.0 is less than Double.MIN_VALUE"),
    ("a > 1e-400", "less than Double.MIN_VALUE"),
    ("a > 1e400", "greater than Double.MAX_VALUE"),
    ("a > 9223372036854775808", "does not fit a Java long"),
    ("a > 00", "found '0' at position 5"),
    ("a > 1.5L", "found 'L'"),
    ("(" * 150 + "a = 1" + ")" * 150, "nests deeper than"),
    ("NOT " * 150 + "a = 1", "nests deeper than"),
]


@pytest.mark.parametrize("expression,message", BAD)
def test_bad_expressions_are_refused_with_a_reason(expression, message):
    with pytest.raises(FilterSyntaxError) as info:
        compile_sql(expression)
    assert message in str(info.value)
    assert repr(expression)[:40].rstrip("'\"") in str(info.value)
    assert info.value.expression == expression


def test_syntax_error_is_a_value_error_with_the_position():
    with pytest.raises(ValueError) as info:
        compile_sql("a = 1 AND b >")
    assert isinstance(info.value, FilterSyntaxError)
    assert info.value.position == 13
    assert str(info.value) == ("bad SQL92 expression 'a = 1 AND b >': expected a value but found end of input "
                               "at position 13")


def test_non_string_expression_is_refused():
    for bad in (None, 5, b"a = 1", ["a = 1"]):
        with pytest.raises(FilterSyntaxError):
            compile_sql(bad)  # type: ignore[arg-type]


def test_compiled_filters_and_errors_are_cached():
    f = compile_sql("a > 5 AND b = 'x'")
    assert isinstance(f, SqlFilter)
    assert compile_sql("a > 5 AND b = 'x'") is f
    assert f.expression == "a > 5 AND b = 'x'"
    for _ in range(2):
        with pytest.raises(FilterSyntaxError, match="position 3"):
            compile_sql("a >")


def test_long_chains_evaluate_without_deep_recursion():
    ors = " OR ".join(f"a = {i}" for i in range(3000))
    f = compile_sql(ors)
    assert f.evaluate({"a": "2999"}) is True
    assert f.evaluate({"a": "3000"}) is False
    ands = " AND ".join(f"a <> {i}" for i in range(3000))
    assert compile_sql(ands).evaluate({"a": "3000"}) is True


class _Hostile(dict):
    def get(self, key, default=None):
        raise RuntimeError("boom")


@pytest.mark.parametrize("properties", [None, {"a": 5}, {"a": None}, {"a": ["x"]}, {"a": b"1"}, _Hostile()])
def test_evaluate_never_raises_on_odd_input(properties):
    for expression in VALID:
        assert compile_sql(expression).evaluate(properties) in (True, False)


def test_none_properties_are_no_properties():
    assert compile_sql("a IS NULL").evaluate(None) is True
    assert compile_sql("a = b").evaluate(None) is True


VALID = sorted({e for e, _, _ in CASES})
NAMES = ["a", "b", "c", "TAGS", "A"]
VALUES = st.one_of(
    st.text(max_size=12),
    st.integers().map(str),
    st.integers(min_value=-10, max_value=10).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["true", "FALSE", "NaN", "Infinity", "-Infinity", " 1 ", "0x1p3", "1d", "x", "hello", "TagA",
                     "''"]),
)
PROPERTIES = st.dictionaries(st.one_of(st.sampled_from(NAMES), st.text(max_size=5)), VALUES, max_size=6)


@settings(max_examples=300, deadline=None)
@given(expression=st.sampled_from(VALID), properties=PROPERTIES)
def test_evaluate_never_raises(expression, properties):
    assert compile_sql(expression).evaluate(properties) in (True, False)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(list("ab1 .'()=<>-+,*/!") + [" AND ", " OR ", " NOT ", " IN ", " IS ",
                                                                  " NULL ", " BETWEEN ", " TRUE ", "5.5"]),
                     max_size=12).map("".join), properties=PROPERTIES)
def test_arbitrary_text_compiles_or_raises_filter_syntax_error(text, properties):
    try:
        f = compile_sql(text)
    except FilterSyntaxError:
        return
    assert f.evaluate(properties) in (True, False)


def _three_valued(expression: str, properties: dict) -> object:
    """TRUE, FALSE or unknown (None), told apart with NOT and IS NULL."""
    if compile_sql(f"({expression})").evaluate(properties):
        return True
    if compile_sql(f"NOT ({expression})").evaluate(properties):
        return False
    return None


BOUNDS = st.sampled_from(["0", "3", "-2", "2147483648", "1.5", "0.5", "b", "-b"])


@settings(max_examples=300, deadline=None)
@given(low=BOUNDS, high=BOUNDS, properties=PROPERTIES)
def test_between_is_its_and_form_and_not_between_its_or_form(low, high, properties):
    try:
        compile_sql(f"a BETWEEN {low} AND {high}")
    except FilterSyntaxError:
        return  # reversed literal bounds
    assert (_three_valued(f"a BETWEEN {low} AND {high}", properties)
            == _three_valued(f"a >= {low} AND a <= {high}", properties))
    assert (_three_valued(f"a NOT BETWEEN {low} AND {high}", properties)
            == _three_valued(f"a < {low} OR a > {high}", properties))


OPS = st.sampled_from([(">", "<"), (">=", "<="), ("<", ">"), ("<=", ">=")])


@settings(max_examples=300, deadline=None)
@given(ops=OPS, literal=st.sampled_from(["5", "-5", "2.5", "3000000000", "b"]), properties=PROPERTIES)
def test_literal_on_either_side_orders_the_same(ops, literal, properties):
    op, mirror = ops
    assert _three_valued(f"a {op} {literal}", properties) == _three_valued(f"{literal} {mirror} a", properties)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.sampled_from(["x", "y", "it's", "", "1"]), min_size=1, max_size=6), properties=PROPERTIES)
def test_in_is_a_disjunction_of_equalities(values, properties):
    listed = ", ".join("'" + v.replace("'", "''") + "'" for v in values)
    ors = " OR ".join("a = '" + v.replace("'", "''") + "'" for v in values)
    assert _three_valued(f"a IN ({listed})", properties) == _three_valued(ors, properties)
    assert _three_valued(f"a NOT IN ({listed})", properties) == _three_valued(f"NOT ({ors})", properties)


class _CountingStr(str):
    """A property value that counts how often it is inspected as digits."""

    inspections = 0

    def isdecimal(self) -> bool:
        type(self).inspections += 1
        return super().isdecimal()


def test_a_property_used_in_several_places_is_converted_once_per_evaluation():
    f = compile_sql("a > 1 AND a < 10 AND a <> 7 AND a >= 2")
    for value, expected in (("5", True), ("7", False), ("12", False), ("5", True)):
        _CountingStr.inspections = 0
        assert f.evaluate({"a": _CountingStr(value)}) is expected
        assert _CountingStr.inspections == 1


def test_shared_conversions_are_safe_across_threads():
    import threading

    f = compile_sql("a > 1 AND a < 1000 AND a <> 500")
    failures = []

    def worker(offset: int) -> None:
        for i in range(offset, 3000, 4):
            expected = 1 < i < 1000 and i != 500
            if f.evaluate({"a": str(i)}) is not expected:
                failures.append(i)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
