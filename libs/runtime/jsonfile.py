"""Config files as JSON: read, and write-then-rename so a crash leaves the old file or the new one."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import orjson


def read_json(path: str | os.PathLike[str], default: Any = None) -> Any:
    """The parsed content of ``path``, or ``default`` when the file does not exist.

    A file that exists but is not JSON raises ValueError naming the file.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return default
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{os.fspath(path)} is not valid JSON: {exc}") from exc


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, sort_keys: bool = False) -> None:
    """Write ``obj`` to a temporary file beside ``path``, fsync it, then rename it over ``path``."""
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    option = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    data = orjson.dumps(obj, option=option)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
