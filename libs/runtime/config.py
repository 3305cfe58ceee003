"""The one config loader: a dataclass filled from a file, then the environment, then flags.

Keys are RocketMQ's (``brokerName``, ``flushDiskType``, ``fileReservedTime`` ...).
Dataclass fields carry the snake_case form of the same name, so ``brokerName``
and ``broker_name`` are both accepted; the file is RocketMQ's ``key=value``
properties format (``broker.conf``). Environment variables are the RocketMQ key
itself (``brokerName=broker-a``, ``flushDiskType=SYNC_FLUSH``: what a container's
``environment:`` sets) or ``ROCKETMESH_`` + the snake_case name upper-cased
(``ROCKETMESH_BROKER_NAME``), which wins when both are set.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ENV_PREFIX = "ROCKETMESH_"


class ConfigError(ValueError):
    """A config key or value that cannot be used, with the key named."""


def snake_case(key: str) -> str:
    """``mappedFileSizeCommitLog`` -> ``mapped_file_size_commit_log``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def camel_case(name: str) -> str:
    """``mapped_file_size_commit_log`` -> ``mappedFileSizeCommitLog``."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def env_names(name: str) -> tuple[str, ...]:
    """The environment variables that set field ``name``, the one that wins last: the RocketMQ key
    (``flushDiskType``; only keys of two words or more, so that no ``path`` or ``home`` is taken for
    one) and ``ROCKETMESH_FLUSH_DISK_TYPE``."""
    key = camel_case(name)
    return ((key,) if key != name else ()) + (ENV_PREFIX + name.upper(),)


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a Java-style properties file (``key=value`` or ``key: value``, ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]?\s*(.*)$", line)
        if not m:
            raise ConfigError(f"{path}:{lineno}: cannot read {line!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def _convert(name: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or value == "":
            return None
        tp = args[0]
    # A str subclass (e.g. a port range) checks and normalises its own text; it takes an int as well.
    parsed = isinstance(tp, type) and issubclass(tp, str) and tp is not str
    if not isinstance(value, str) and not parsed:
        if isinstance(tp, type) and issubclass(tp, enum.Enum) and not isinstance(value, tp):
            return _convert(name, tp, str(value.name if isinstance(value, enum.Enum) else value))
        return value
    try:
        if tp is bool:
            low = value.strip().lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError(value)
        if tp is int:
            return int(value.strip())
        if tp is float:
            return float(value.strip())
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return tp[value.strip().upper()]
        if parsed:
            return tp(value)
        return value
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{camel_case(name)}: cannot use {value!r} ({exc.__class__.__name__})") from exc


def load_config(
    cls: type[T],
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    strict: bool = False,
) -> T:
    """Build ``cls`` (a dataclass) from defaults, then ``path``, then the environment, then ``overrides``.

    Unknown keys in the file are ignored (RocketMQ does the same) unless ``strict``;
    unknown override keys always raise, since they come from code or flags.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}

    def put(key: str, value: Any, source: str, must_exist: bool) -> None:
        name = snake_case(key) if key not in fields else key
        if name not in fields:
            if must_exist:
                raise ConfigError(f"unknown config key {key!r} ({source})")
            return
        values[name] = _convert(name, hints[name], value)

    if path is not None:
        for k, v in read_properties(path).items():
            put(k, v, str(path), strict)
    env = os.environ if environ is None else environ
    for name in fields:
        for var in env_names(name):
            if var in env:
                put(name, env[var], var, True)
    for k, v in (overrides or {}).items():
        if v is not None:
            put(k, v, "override", True)
    return cls(**values)


def to_properties(cfg: Any) -> dict[str, Any]:
    """The config as RocketMQ-named keys, for printing and for registering with namesrv."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out[camel_case(f.name)] = v.name if isinstance(v, enum.Enum) else v
    return out
