"""structlog set-up: JSON lines on stderr, one logger per service, bound with its names."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

_configured = False


def configure(level: str | None = None) -> None:
    """Configure structlog once per process (level from ROCKETMESH_LOG_LEVEL, default INFO)."""
    global _configured
    if _configured:
        return
    name = (level or os.environ.get("ROCKETMESH_LOG_LEVEL", "INFO")).upper()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(name)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    _configured = True


def get_logger(service: str, **bind: Any) -> structlog.typing.FilteringBoundLogger:
    """A logger bound with ``service`` and any further names (broker name, group ...)."""
    configure()
    return structlog.get_logger().bind(service=service, **bind)
