"""One page of a list, and the figures the page links show."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def page_of(items: Sequence[T], page: int, size: int) -> tuple[list[T], dict[str, Any]]:
    """Items of ``page`` (counted from 1; past the end: the last page) and ``{page, pages, total, size}``."""
    total = len(items)
    pages = max(1, -(-total // size))
    page = min(max(1, page), pages)
    return list(items[(page - 1) * size: page * size]), paging(page, pages, total, size)


def paging(page: int, pages: int, total: int, size: int) -> dict[str, Any]:
    """The paging figures a template and a script read (``total`` -1: more than these pages, not counted)."""
    return {"page": page, "pages": pages, "total": total, "size": size}
