"""Parser of RocketMQ's SQL92 selector into a checked syntax tree (:mod:`sql_ast`).

Grammar, loosest binding first::

    selector   := or END
    or         := and (OR and)*
    and        := not (AND not)*
    not        := NOT not | equality
    equality   := relational ( ("=" | "<>") relational | IS [NOT] NULL )*
    relational := unary ( (">" | ">=" | "<" | "<=") unary
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN "(" string ("," string)* ")" )*
    unary      := ("+" | "-") unary | primary
    primary    := literal | identifier | "(" or ")"

RocketMQ's grammar (SelectorParser.jj) differs in two places, both on purpose
here: its NOT is a prefix operator on a single operand, binding tighter than
comparisons (so ``NOT a = 1`` means ``(NOT a) = 1`` there; here it is
``NOT (a = 1)``, as in SQL), and it ignores whatever follows the first complete
expression, which is an error here.

The checks RocketMQ makes while building its tree are made here too, with the
same outcomes: ``>``, ``>=``, ``<``, ``<=`` and BETWEEN take only numbers,
properties or negations (not strings, TRUE/FALSE/NULL or conditions); ``=``
and ``<>`` do not take NULL (use IS NULL) and ``TRUE = <non-boolean literal>``
is refused; BETWEEN with two literal bounds needs low <= high; IN takes a
property on its left and string literals only; integer literals must fit a
Java long; floating literals must lie in [Double.MIN_VALUE, Double.MAX_VALUE],
so ``0.0`` is refused (write ``0``); AND, OR, NOT and the whole expression
need conditions, a bare property counting as one.
"""

from __future__ import annotations

from typing import NoReturn

from rocketmesh.filter.java_values import (
    INT_MAX,
    LONG_MAX,
    NUMERIC_TYPES,
    JavaType,
    comparator,
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
from rocketmesh.filter.sql_lexer import Token, TokenKind, sql_syntax_error, tokenize

#: Parentheses, NOTs and unary signs nested deeper than this are refused.
MAX_DEPTH = 100

_ORDERING_OPS = frozenset({">", ">=", "<", "<="})


def parse(expression: str) -> Node:
    """The checked tree of a selector, its root a condition; raises FilterSyntaxError."""
    return _Parser(expression).parse()


class _Parser:
    def __init__(self, expression: str):
        self.expression = expression
        self.tokens = tokenize(expression)
        self.i = 0
        self.depth = 0

    # --- token helpers ---

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind is not TokenKind.END:
            self.i += 1
        return tok

    def at_keyword(self, word: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind is TokenKind.KEYWORD and tok.text == word

    def at_operator(self, op: str) -> bool:
        tok = self.peek()
        return tok.kind is TokenKind.OPERATOR and tok.text == op

    def fail(self, problem: str, pos: int) -> NoReturn:
        raise sql_syntax_error(self.expression, problem, pos)

    def expected(self, what: str) -> NoReturn:
        tok = self.peek()
        self.fail(f"expected {what} but found {tok.describe()}", tok.pos)

    def expect_keyword(self, word: str) -> Token:
        if not self.at_keyword(word):
            self.expected(word)
        return self.next()

    def expect_operator(self, op: str) -> Token:
        if not self.at_operator(op):
            self.expected(repr(op))
        return self.next()

    def enter(self, pos: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"expression nests deeper than {MAX_DEPTH} levels", pos)

    # --- grammar ---

    def parse(self) -> Node:
        if self.peek().kind is TokenKind.END:
            self.fail("empty expression", self.peek().pos)
        start = self.peek().pos
        root = self.condition(self.or_expr(), start)
        if self.peek().kind is not TokenKind.END:
            self.expected("an operator or end of input")
        return root

    def or_expr(self) -> Node:
        start = self.peek().pos
        first = self.and_expr()
        if not self.at_keyword("OR"):
            return first
        parts: list[Node] = []
        self._join(parts, Or, self.condition(first, start))
        while self.at_keyword("OR"):
            self.next()
            start = self.peek().pos
            self._join(parts, Or, self.condition(self.and_expr(), start))
        return Or(tuple(parts))

    def and_expr(self) -> Node:
        start = self.peek().pos
        first = self.not_expr()
        if not self.at_keyword("AND"):
            return first
        parts: list[Node] = []
        self._join(parts, And, self.condition(first, start))
        while self.at_keyword("AND"):
            self.next()
            start = self.peek().pos
            self._join(parts, And, self.condition(self.not_expr(), start))
        return And(tuple(parts))

    @staticmethod
    def _join(parts: list[Node], kind: type[And] | type[Or], node: Node) -> None:
        # (a AND b) AND c evaluates exactly like a AND b AND c: flatten.
        if isinstance(node, kind):
            parts.extend(node.operands)
        else:
            parts.append(node)

    def not_expr(self) -> Node:
        if not self.at_keyword("NOT"):
            return self.equality()
        tok = self.next()
        self.enter(tok.pos)
        start = self.peek().pos
        operand = self.condition(self.not_expr(), start)
        self.depth -= 1
        return Not(operand)

    def equality(self) -> Node:
        left = self.relational()
        while True:
            tok = self.peek()
            if self.at_operator("=") or self.at_operator("<>"):
                self.next()
                right = self.relational()
                node = self.make_equal(left, right, tok)
                left = Not(node) if tok.text == "<>" else node
            elif self.at_keyword("IS"):
                self.next()
                negated = self.at_keyword("NOT")
                if negated:
                    self.next()
                null = self.expect_keyword("NULL")
                node = Equality(left, Literal(None, None, null.pos))
                left = Not(node) if negated else node
            else:
                return left

    def relational(self) -> Node:
        left_pos = self.peek().pos
        left = self.unary()
        while True:
            tok = self.peek()
            if tok.kind is TokenKind.OPERATOR and tok.text in _ORDERING_OPS:
                self.next()
                right_pos = self.peek().pos
                right = self.unary()
                self.check_ordered(left, tok.text, left_pos)
                self.check_ordered(right, tok.text, right_pos)
                left = Ordering(tok.text, left, right)
            elif self.at_keyword("BETWEEN") or (self.at_keyword("NOT") and self.at_keyword("BETWEEN", 1)):
                left = self.between(left, left_pos)
            elif self.at_keyword("IN") or (self.at_keyword("NOT") and self.at_keyword("IN", 1)):
                left = self.in_list(left)
            else:
                return left

    def between(self, value: Node, value_pos: int) -> Node:
        negated = self.at_keyword("NOT")
        if negated:
            self.next()
        tok = self.next()
        op = "NOT BETWEEN" if negated else "BETWEEN"
        low_pos = self.peek().pos
        low = self.unary()
        self.expect_keyword("AND")
        high_pos = self.peek().pos
        high = self.unary()
        for operand, pos in ((value, value_pos), (low, low_pos), (high, high_pos)):
            self.check_ordered(operand, op, pos)
        # Only literal bounds are checked, and only for BETWEEN: RocketMQ's createBetween.
        if (not negated and isinstance(low, Literal) and isinstance(high, Literal)
                and not low.folded and not high.folded):
            assert low.java_type is not None and high.java_type is not None
            if comparator(high.java_type, low.java_type)(high.value, low.value) < 0:
                self.fail(f"BETWEEN bounds are reversed: {_show(low)} is greater than {_show(high)}", tok.pos)
        return Between(value, low, high, negated)

    def in_list(self, left: Node) -> Node:
        negated = self.at_keyword("NOT")
        if negated:
            self.next()
        tok = self.next()
        if not isinstance(left, Property):
            self.fail(f"{'NOT IN' if negated else 'IN'} needs a property on its left", tok.pos)
        self.expect_operator("(")
        values = [self.string_literal()]
        while self.at_operator(","):
            self.next()
            values.append(self.string_literal())
        self.expect_operator(")")
        return In(left, frozenset(values), negated)

    def string_literal(self) -> str:
        if self.peek().kind is not TokenKind.STRING:
            self.expected("a string literal")
        return self.next().text

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind is TokenKind.OPERATOR and tok.text in ("+", "-"):
            self.next()
            self.enter(tok.pos)
            operand = self.unary()
            self.depth -= 1
            if tok.text == "+":
                return operand
            if isinstance(operand, Literal) and operand.java_type in NUMERIC_TYPES:
                return Literal(-operand.value, operand.java_type, tok.pos, folded=True)  # type: ignore[operator]
            return Negation(operand, tok.pos)
        return self.primary()

    def primary(self) -> Node:
        tok = self.peek()
        kind = tok.kind
        if kind is TokenKind.IDENTIFIER:
            self.next()
            return Property(tok.text, tok.pos)
        if kind is TokenKind.STRING:
            self.next()
            return Literal(tok.text, JavaType.STRING, tok.pos)
        if kind is TokenKind.INTEGER:
            self.next()
            return self.integer(tok)
        if kind is TokenKind.FLOAT:
            self.next()
            return self.floating(tok)
        if kind is TokenKind.KEYWORD and tok.text in ("TRUE", "FALSE", "NULL"):
            self.next()
            if tok.text == "NULL":
                return Literal(None, None, tok.pos)
            return Literal(tok.text == "TRUE", JavaType.BOOLEAN, tok.pos)
        if self.at_operator("("):
            self.next()
            self.enter(tok.pos)
            node = self.or_expr()
            self.expect_operator(")")
            self.depth -= 1
            return node
        self.expected("a value")

    def integer(self, tok: Token) -> Literal:
        value = int(tok.text.rstrip("lL"))
        if value > LONG_MAX:
            self.fail(f"integer literal {tok.text} does not fit a Java long", tok.pos)
        return Literal(value, JavaType.INTEGER if value <= INT_MAX else JavaType.LONG, tok.pos)

    def floating(self, tok: Token) -> Literal:
        value = float(tok.text)
        if value == float("inf"):
            self.fail(f"floating literal {tok.text} is greater than Double.MAX_VALUE", tok.pos)
        if value == 0.0:
            # RocketMQ refuses values below Double.MIN_VALUE, zero included.
            self.fail(f"floating literal {tok.text} is less than Double.MIN_VALUE (for zero write 0)", tok.pos)
        return Literal(value, JavaType.DOUBLE, tok.pos)

    # --- RocketMQ's construction checks ---

    def condition(self, node: Node, pos: int) -> Node:
        """RocketMQ's asBooleanExpression: conditions pass, a bare property is cast."""
        if node.is_condition:
            return node
        if isinstance(node, Property):
            return BooleanCast(node)
        self.fail(f"{_show(node)} is not a condition", pos)

    def check_ordered(self, node: Node, op: str, pos: int) -> None:
        """Only numbers, properties and negations can be ordered (RocketMQ's checkLessThanOperand)."""
        if isinstance(node, Literal):
            if node.java_type in NUMERIC_TYPES:
                return
            self.fail(f"{_show(node)} cannot be compared with {op}", pos)
        if node.is_condition:
            self.fail(f"a condition cannot be compared with {op}", pos)

    def make_equal(self, left: Node, right: Node, tok: Token) -> Equality:
        """RocketMQ's createEqual checks: no NULL operand; TRUE/FALSE not against another kind of literal."""
        for operand in (left, right):
            if isinstance(operand, Literal) and operand.java_type is None:
                self.fail(f"NULL cannot be compared with {tok.text} (use IS NULL)", operand.pos)
        if (isinstance(left, Literal) and isinstance(right, Literal) and not right.folded
                and left.java_type is JavaType.BOOLEAN and right.java_type is not JavaType.BOOLEAN):
            self.fail(f"{_show(left)} cannot be compared with {_show(right)}", tok.pos)
        return Equality(left, right)


def _show(node: Node) -> str:
    if isinstance(node, Literal):
        if node.java_type is None:
            return "NULL"
        if node.java_type is JavaType.BOOLEAN:
            return "TRUE" if node.value else "FALSE"
        if node.java_type is JavaType.STRING:
            return "'" + str(node.value).replace("'", "''") + "'"
        return repr(node.value) if node.java_type is JavaType.DOUBLE else str(node.value)
    if isinstance(node, Property):
        return node.name
    if isinstance(node, Negation):
        return "a negation"
    return "a condition"
