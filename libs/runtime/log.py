"""Logging: structlog at every call site, delivered through the standard ``logging`` module.

Every logger is ``rocketmesh.<name>`` in ``logging``'s tree (``rocketmesh.client``,
``rocketmesh.broker`` ...), so there is one switch for all of them: the
``rocketmesh`` logger.

- The SDK is a library inside someone else's program. It adds nothing to the
  application's output beyond WARNING and above on stderr, and only while the
  application has no logging of its own; once it has (``logging.basicConfig``,
  ``dictConfig``, a framework's), the records simply propagate to its handlers
  and its levels apply. ``ROCKETMESH_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR)
  sets the ``rocketmesh`` logger's level, e.g. to see the SDK's INFO lines.
- A service (``python -m rocketmesh.<service>``) calls :func:`configure_service`
  first: JSON lines on stderr, one object per event with the bound names
  (service, broker, group ...), at ``ROCKETMESH_LOG_LEVEL`` (default INFO).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import structlog
from opentelemetry import trace

#: The LogRecord attribute that carries structlog's event dict to our handlers.
_EVENT_ATTR = "rocketmesh_event"
#: Keys a plain-text message leaves out (the handler's own format shows level and time).
_NOT_IN_TEXT = ("event", "level", "timestamp", "exception")

ROOT_LOGGER = "rocketmesh"


def _to_logging(_logger: Any, _method: str, event: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """structlog's last step: a readable message for anyone's handler, the event dict beside it."""
    text = str(event.get("event", ""))
    fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in _NOT_IN_TEXT)
    if fields:
        text = f"{text} {fields}"
    if "exception" in event:
        text = f"{text}\n{event['exception']}"
    return (text,), {"extra": {_EVENT_ATTR: event}}


#: The names every event of this process carries (service, broker, cluster ...), set by configure_service.
_PROCESS_NAMES: dict[str, Any] = {}
#: Where a service leaves its names for the processes it starts (JSON object).
_NAMES_ENV = "ROCKETMESH_LOG_NAMES"


def _add_process_names(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """The process's names on every event: a library logger's own ``service`` (remoting, client ...)
    inside a service's process becomes its ``component`` unless it has one, and ``service`` the process's."""
    if _PROCESS_NAMES:
        service = _PROCESS_NAMES.get("service")
        own = event.get("service")
        if service is not None and own is not None and own != service:
            event.setdefault("component", own)
            event["service"] = service
        for key, value in _PROCESS_NAMES.items():
            event.setdefault(key, value)
    return event


def _add_trace_ids(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """trace_id and span_id of the span in progress, when there is one (an OpenTelemetry SDK configured)."""
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event["trace_id"] = f"{ctx.trace_id:032x}"
        event["span_id"] = f"{ctx.span_id:016x}"
    return event


structlog.configure(
    processors=[
        structlog.stdlib.filter_by_level,  # first: a disabled level costs one isEnabledFor
        structlog.contextvars.merge_contextvars,
        _add_process_names,
        _add_trace_ids,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        _to_logging,
    ],
    wrapper_class=structlog.stdlib.BoundLogger,
    logger_factory=structlog.stdlib.LoggerFactory(),
    cache_logger_on_first_use=True,
)


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record: structlog's event dict, or the basics of a plain ``logging`` record."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, _EVENT_ATTR, None)
        if event is None:
            event = {"logger": record.name, "event": record.getMessage(), "level": record.levelname.lower(),
                     "timestamp": self.formatTime(record)}
            if record.exc_info:
                event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=repr)


class _UnconfiguredAppHandler(logging.StreamHandler):
    """stderr, only while the application has no handler on the root logger (then its own apply)."""

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger().handlers:
            super().emit(record)


def _level(name: str | None, default: int | None) -> int | None:
    """A level name as a number; an unknown name is reported once and ``default`` used."""
    if not name:
        return default
    value = logging.getLevelName(name.strip().upper())
    if isinstance(value, int):
        return value
    print(f"rocketmesh: ROCKETMESH_LOG_LEVEL={name!r} is not a level (DEBUG, INFO, WARNING, ERROR); "
          f"using {logging.getLevelName(default) if default is not None else 'the default'}", file=sys.stderr)
    return default


def _configure_library() -> None:
    root = logging.getLogger(ROOT_LOGGER)
    level = _level(os.environ.get("ROCKETMESH_LOG_LEVEL"), None)
    if level is not None:
        root.setLevel(level)
    handler = _UnconfiguredAppHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)


def configure_service(level: str | None = None, **names: Any) -> None:
    """Make this process a service's: JSON lines on stderr at ``level`` (default ROCKETMESH_LOG_LEVEL,
    else INFO), nothing handed on to other handlers, and every event bound with ``names``
    (``service="broker", broker="broker-a"`` ...), the libraries' loggers included. A process the
    service starts (the broker's dispatch worker) inherits the names when it passes none."""
    root = logging.getLogger(ROOT_LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLinesFormatter())
    root.handlers[:] = [handler]
    root.setLevel(_level(level or os.environ.get("ROCKETMESH_LOG_LEVEL"), logging.INFO))
    root.propagate = False
    names = {k: v for k, v in names.items() if v is not None}
    if names:
        os.environ[_NAMES_ENV] = json.dumps(names)
    else:
        try:
            names = json.loads(os.environ.get(_NAMES_ENV) or "{}")
        except ValueError:
            names = {}
    _PROCESS_NAMES.clear()
    _PROCESS_NAMES.update(names if isinstance(names, dict) else {})


def get_logger(service: str, **bind: Any) -> structlog.stdlib.BoundLogger:
    """The logger ``rocketmesh.<service>``, bound with ``service`` and any further names (broker, group ...)."""
    return structlog.get_logger(f"{ROOT_LOGGER}.{service}" if service != ROOT_LOGGER else ROOT_LOGGER).bind(
        service=service, **bind)


_configure_library()
