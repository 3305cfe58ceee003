"""Logging: an event name and keywords at every call site, delivered through the standard ``logging`` module.

    log = get_logger("client", component="rebalance")
    log.warning("rebalance_failed", group=group, error=str(exc))

Every logger is ``rocketmesh.<name>`` in ``logging``'s tree (``rocketmesh.client``,
``rocketmesh.broker`` ...), so there is one switch for all of them: the
``rocketmesh`` logger. A record's message is the event and its keywords as text
(``rebalance_failed group=g error=...``), for any handler; the event itself, a
dict, rides on the record as ``record.rocketmesh_event`` for handlers that write
structured lines (the services' JSON lines, see ``rocketmesh.server.log``).

- The SDK is a library inside someone else's program. It adds nothing to the
  application's output beyond WARNING and above on stderr, and only while the
  application has no logging of its own; once it has (``logging.basicConfig``,
  ``dictConfig``, a framework's), the records simply propagate to its handlers
  and its levels apply. ``ROCKETMESH_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR)
  sets the ``rocketmesh`` logger's level, e.g. to see the SDK's INFO lines.
- A service process writes JSON lines instead (``rocketmesh.server.log.configure_service``).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from opentelemetry import trace

#: The LogRecord attribute that carries the event dict to structured handlers.
EVENT_ATTR = "rocketmesh_event"
#: The environment variable that sets the ``rocketmesh`` logger's level.
LEVEL_ENV = "ROCKETMESH_LOG_LEVEL"

ROOT_LOGGER = "rocketmesh"

_LEVEL_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning",
                logging.ERROR: "error", logging.CRITICAL: "critical"}


class EventLogger:
    """A ``logging.Logger`` that takes an event name and keywords, bound with names every event carries.

    A disabled level costs one ``isEnabledFor``. An enabled event made while a span is in progress names
    its ``trace_id`` and ``span_id``, so an operator can join logs to traces.
    """

    __slots__ = ("_logger", "_bound")

    def __init__(self, logger: logging.Logger, bound: dict[str, Any]) -> None:
        self._logger = logger
        self._bound = bound

    def bind(self, **names: Any) -> EventLogger:
        """A logger of the same name whose events also carry ``names``."""
        return EventLogger(self._logger, {**self._bound, **names})

    def debug(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.DEBUG):
            self._emit(logging.DEBUG, event, fields, False)

    def info(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.INFO):
            self._emit(logging.INFO, event, fields, False)

    def warning(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.WARNING):
            self._emit(logging.WARNING, event, fields, False)

    def error(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.ERROR):
            self._emit(logging.ERROR, event, fields, False)

    def critical(self, event: str, **fields: Any) -> None:
        if self._logger.isEnabledFor(logging.CRITICAL):
            self._emit(logging.CRITICAL, event, fields, False)

    def exception(self, event: str, **fields: Any) -> None:
        """An ERROR event with the exception being handled (its traceback goes with the record)."""
        if self._logger.isEnabledFor(logging.ERROR):
            self._emit(logging.ERROR, event, fields, True)

    def _emit(self, level: int, event: str, fields: dict[str, Any], exc_info: bool) -> None:
        names = {**self._bound, **fields}
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            names["trace_id"] = f"{ctx.trace_id:032x}"
            names["span_id"] = f"{ctx.span_id:016x}"
        text = event
        if names:
            text = f"{event} " + " ".join(f"{k}={v}" for k, v in names.items())
        record_event = {"event": event, "level": _LEVEL_NAMES.get(level, "info"), **names}
        # stacklevel: the record names the caller of info() / warning() ..., not this module.
        self._logger.log(level, text, exc_info=exc_info, extra={EVENT_ATTR: record_event}, stacklevel=3)


def level_from(name: str | None, default: int | None) -> int | None:
    """A level name as a number; an unknown name is reported once and ``default`` used."""
    if not name:
        return default
    value = logging.getLevelName(name.strip().upper())
    if isinstance(value, int):
        return value
    print(f"rocketmesh: {LEVEL_ENV}={name!r} is not a level (DEBUG, INFO, WARNING, ERROR); "
          f"using {logging.getLevelName(default) if default is not None else 'the default'}", file=sys.stderr)
    return default


class _UnconfiguredAppHandler(logging.StreamHandler):
    """stderr, only while the application has no handler on the root logger (then its own apply)."""

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


def _configure_library() -> None:
    root = logging.getLogger(ROOT_LOGGER)
    level = level_from(os.environ.get(LEVEL_ENV), None)
    if level is not None:
        root.setLevel(level)
    handler = _UnconfiguredAppHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)


def get_logger(service: str, **bind: Any) -> EventLogger:
    """The logger ``rocketmesh.<service>``, bound with ``service`` and any further names (broker, group ...)."""
    name = f"{ROOT_LOGGER}.{service}" if service != ROOT_LOGGER else ROOT_LOGGER
    return EventLogger(logging.getLogger(name), {"service": service, **bind})


_configure_library()
