"""RocketMQ's SQL92 message selector: ``compile_sql(text).evaluate(properties)``.

The language (RocketMQ 4.x, filter module):

* literals: integers (Java int, or long when larger; an ``L`` suffix is
  allowed), decimals and exponents (``3.14``, ``.5``, ``3.1E10``; Java double),
  strings in single quotes with ``''`` for a quote, TRUE, FALSE, NULL;
  negative numbers by unary minus;
* identifiers name message properties (``TAGS`` is the message's tag):
  letters, digits, ``_`` and ``$``, not starting with a digit;
* ``=  <>  >  >=  <  <=``, ``[NOT] BETWEEN x AND y``, ``[NOT] IN ('a', ...)``
  (string literals only), ``IS [NOT] NULL``, ``AND``, ``OR``, ``NOT``,
  parentheses; keywords in any case; ``--`` and ``/* */`` comments.
* Precedence, loosest first: OR, AND, NOT, ``= <> IS``, ``> >= < <= BETWEEN
  IN``, unary ``+ -``.

CONTAINS, STARTSWITH and ENDSWITH are not part of it: RocketMQ added them in
5.1.3/5.1.4, no 4.x release has them.

A message matches only when the selector is TRUE; FALSE and NULL (unknown, as
from an absent property) do not match, and neither does a message whose
property cannot be converted as the selector needs (``a > 5`` with a="abc"),
which RocketMQ reports as an evaluation error. See :mod:`sql_eval` for the
comparison rules and :mod:`sql_parser` for what is refused at compile time.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from rocketmesh.filter.errors import FilterSyntaxError
from rocketmesh.filter.sql_eval import Evaluator, compile_condition
from rocketmesh.filter.sql_parser import parse

_NO_PROPERTIES: Mapping[str, str] = {}


class SqlFilter:
    """A compiled SQL92 selector, safe to share between threads; get one from :func:`compile_sql`."""

    __slots__ = ("_condition", "expression")

    def __init__(self, expression: str, condition: Evaluator):
        self.expression = expression
        self._condition = condition

    def evaluate(self, properties: Mapping[str, str] | None) -> bool:
        """True when the selector is TRUE for these message properties; never raises."""
        try:
            return self._condition(_NO_PROPERTIES if properties is None else properties) is True
        except Exception:  # noqa: BLE001 - any failure means "no match", never an error
            # RocketMQ's broker logs evaluation errors and skips the message.
            return False

    def __repr__(self) -> str:
        return f"SqlFilter({self.expression!r})"


def compile_sql(expression: str) -> SqlFilter:
    """Compile a SQL92 selector; raises FilterSyntaxError naming the problem and its position.

    Compiled filters, and the errors of bad expressions, are cached by text.
    """
    if not isinstance(expression, str):
        raise FilterSyntaxError(f"a SQL92 expression must be a string, not {type(expression).__name__}")
    outcome = _compile_cached(expression)
    if isinstance(outcome, SqlFilter):
        return outcome
    message, position = outcome
    raise FilterSyntaxError(message, expression, position)


@lru_cache(maxsize=1024)
def _compile_cached(expression: str) -> SqlFilter | tuple[str, int | None]:
    try:
        return SqlFilter(expression, compile_condition(parse(expression)))
    except FilterSyntaxError as exc:
        return str(exc), exc.position
    except RecursionError:
        return f"bad SQL92 expression {expression!r}: it nests too deeply", None
