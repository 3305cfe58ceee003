"""Tokens of RocketMQ's SQL92 selector (the token section of its SelectorParser.jj).

* Whitespace is space, tab, CR, LF and form feed; ``-- ...`` runs to the end of
  the line (or of the text) and ``/* ... */`` are comments.
* Keywords, any case: NOT AND OR BETWEEN IN TRUE FALSE NULL IS.
* Integer literals: ``0`` or a digit run without a leading zero, with an optional
  ``L``; floating literals: ``5.5``, ``5.``, ``.5``, ``5E10``, ``5.5e-3``.
* Strings: single quotes, ``''`` for a quote inside.
* Identifiers: a letter, ``_`` or ``$``, then letters, digits, ``_`` or ``$``
  (no ``.``: RocketMQ's lexer has none in identifiers).
* Operators: ``= <> > >= < <= + - ( ) ,``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from rocketmesh.filter.errors import FilterSyntaxError


class TokenKind(Enum):
    """What a token is."""

    KEYWORD = "keyword"
    IDENTIFIER = "identifier"
    INTEGER = "integer literal"
    FLOAT = "floating literal"
    STRING = "string literal"
    OPERATOR = "operator"
    END = "end of input"


KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})


@dataclass(frozen=True, slots=True)
class Token:
    """One token: ``text`` is the keyword upper-cased, the decoded string, or the source text."""

    kind: TokenKind
    text: str
    pos: int

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind is TokenKind.END:
            return "end of input"
        if self.kind is TokenKind.STRING:
            return "'" + self.text.replace("'", "''") + "'"
        return repr(self.text)


_SPACE = re.compile(r"[ \t\n\r\f]+")
_FLOAT = re.compile(r"\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+", re.ASCII)
_INTEGER = re.compile(r"(?:0|[1-9]\d*[lL]?)", re.ASCII)
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_STRING = re.compile(r"'(?:[^']|'')*'")
_NEWLINE = re.compile(r"[\r\n]")
_OPERATORS = ("<>", ">=", "<=", "=", ">", "<", "+", "-", "(", ")", ",")


def sql_syntax_error(expression: str, problem: str, pos: int) -> FilterSyntaxError:
    """The error for ``problem`` at offset ``pos`` of a SQL92 expression."""
    return FilterSyntaxError(f"bad SQL92 expression {expression!r}: {problem} at position {pos}", expression, pos)


def tokenize(expression: str) -> list[Token]:
    """The tokens of ``expression``, ending with an END token; raises FilterSyntaxError."""
    out: list[Token] = []
    pos, n = 0, len(expression)
    while True:
        # Skip whitespace and comments.
        while pos < n:
            m = _SPACE.match(expression, pos)
            if m:
                pos = m.end()
            elif expression.startswith("--", pos):
                nl = _NEWLINE.search(expression, pos)
                pos = nl.end() if nl else n
            elif expression.startswith("/*", pos):
                end = expression.find("*/", pos + 2)
                if end < 0:
                    raise sql_syntax_error(expression, "unterminated comment", pos)
                pos = end + 2
            else:
                break
        if pos >= n:
            out.append(Token(TokenKind.END, "", n))
            return out
        ch = expression[pos]
        if ch == "'":
            m = _STRING.match(expression, pos)
            if not m:
                raise sql_syntax_error(expression, "unterminated string literal", pos)
            out.append(Token(TokenKind.STRING, m.group()[1:-1].replace("''", "'"), pos))
        elif ch.isascii() and (ch.isdigit() or ch == "."):
            m = _FLOAT.match(expression, pos)
            if m:
                out.append(Token(TokenKind.FLOAT, m.group(), pos))
            else:
                m = _INTEGER.match(expression, pos)
                if not m:
                    raise sql_syntax_error(expression, f"unexpected character {ch!r}", pos)
                out.append(Token(TokenKind.INTEGER, m.group(), pos))
        elif (m := _IDENT.match(expression, pos)) is not None:
            word = m.group()
            upper = word.upper()
            if upper in KEYWORDS:
                out.append(Token(TokenKind.KEYWORD, upper, pos))
            else:
                out.append(Token(TokenKind.IDENTIFIER, word, pos))
        else:
            op = next((o for o in _OPERATORS if expression.startswith(o, pos)), None)
            if op is None:
                raise sql_syntax_error(expression, f"unexpected character {ch!r}", pos)
            out.append(Token(TokenKind.OPERATOR, op, pos))
            pos += len(op)
            continue
        pos = m.end()
