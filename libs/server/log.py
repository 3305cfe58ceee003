"""A service's log: JSON lines on stderr, one object per event, every event naming its process.

``configure_service`` makes the process a service's: the ``rocketmesh`` logger's events (rendered by
structlog's ProcessorFormatter) (the service's own
and those of the libraries it runs on: remoting, client ...) become one JSON object a line, bound with the
process's names (service, broker, cluster ...). A library logger's own ``service`` (``remoting``,
``client`` ...) inside a service's process becomes the event's ``component`` unless it has one, and
``service`` the process's.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import structlog
from structlog.typing import EventDict

from rocketmesh.runtime.log import EVENT_ATTR, LEVEL_ENV, ROOT_LOGGER, level_from

#: Where a service leaves its names for the processes it starts (JSON object).
NAMES_ENV = "ROCKETMESH_LOG_NAMES"

#: The names every event of this process carries (service, broker, cluster ...), set by configure_service.
_PROCESS_NAMES: dict[str, Any] = {}


def _with_process_names(event: dict[str, Any]) -> dict[str, Any]:
    if not _PROCESS_NAMES:
        return event
    event = dict(event)
    service = _PROCESS_NAMES.get("service")
    own = event.get("service")
    if service is not None and own is not None and own != service:
        event.setdefault("component", own)
        event["service"] = service
    for key, value in _PROCESS_NAMES.items():
        event.setdefault(key, value)
    return event


def _event_of(_logger: Any, _name: str, event_dict: EventDict) -> EventDict:
    """The record's event (with the process's names) in place of structlog's default for a foreign record:
    an SDK event carries its dict on the record; a plain ``logging`` record gives its logger and message."""
    record: logging.LogRecord = event_dict["_record"]
    event = getattr(record, EVENT_ATTR, None)
    if event is None:
        # structlog has already formatted the message (and cleared the record's args).
        event = {"logger": record.name, "event": event_dict["event"], "level": record.levelname.lower()}
    out = _with_process_names(event)
    out["_record"] = record
    out["_from_structlog"] = False
    if record.exc_info:
        out["exc_info"] = record.exc_info
    return out


class JsonLinesFormatter(structlog.stdlib.ProcessorFormatter):
    """One JSON object per record, rendered by structlog: the event with its names, a UTC ISO timestamp and
    the exception if any."""

    def __init__(self) -> None:
        super().__init__(
            foreign_pre_chain=[_event_of],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(default=repr),
            ],
        )


def configure_service(level: str | None = None, **names: Any) -> None:
    """Make this process a service's: JSON lines on stderr at ``level`` (default ROCKETMESH_LOG_LEVEL,
    else INFO), nothing handed on to other handlers, and every event bound with ``names``
    (``service="broker", broker="broker-a"`` ...), the libraries' loggers included. A process the
    service starts inherits the names when it passes none."""
    root = logging.getLogger(ROOT_LOGGER)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLinesFormatter())
    root.handlers[:] = [handler]
    root.setLevel(level_from(level or os.environ.get(LEVEL_ENV), logging.INFO) or logging.INFO)
    root.propagate = False
    names = {k: v for k, v in names.items() if v is not None}
    if names:
        os.environ[NAMES_ENV] = json.dumps(names)
    else:
        try:
            names = json.loads(os.environ.get(NAMES_ENV) or "{}")
        except ValueError:
            names = {}
    _PROCESS_NAMES.clear()
    _PROCESS_NAMES.update(names if isinstance(names, dict) else {})
