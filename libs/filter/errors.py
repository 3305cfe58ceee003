"""The error a bad filter expression raises."""

from __future__ import annotations


class FilterSyntaxError(ValueError):
    """A subscription expression that cannot be used: bad SQL92 syntax, a tag expression
    naming no tag, or an unknown expression type.

    ``expression`` is the text at fault and ``position`` the 0-based offset of the
    problem in it, when there is one.
    """

    def __init__(self, message: str, expression: str | None = None, position: int | None = None):
        super().__init__(message)
        self.expression = expression
        self.position = position
