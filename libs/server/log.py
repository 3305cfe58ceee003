"""A service's log: JSON lines on stderr, one object per event, every event naming its process.

``configure_service`` makes the process a service's: the ``rocketmesh`` logger's events (the service's own
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
from datetime import datetime, timezone
from typing import Any

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


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record: the event with its names, a UTC ISO timestamp and the exception if any;
    a plain ``logging`` record gives its logger name and message as the event."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, EVENT_ATTR, None)
        if event is None:
            event = {"logger": record.name, "event": record.getMessage(), "level": record.levelname.lower()}
        event = _with_process_names(event)
        event["timestamp"] = datetime.fromtimestamp(record.created, timezone.utc).isoformat().replace("+00:00", "Z")
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=repr)


def configure_service(level: str | None = None, **names: Any) -> None:
    """Make this process a service's: JSON lines on stderr at ``level`` (default ROCKETMESH_LOG_LEVEL,
    else INFO), nothing handed on to other handlers, and every event bound with ``names``
    (``service="broker", broker="broker-a"`` ...), the libraries' loggers included. A process the
    service starts (the broker's dispatch worker) inherits the names when it passes none."""
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
