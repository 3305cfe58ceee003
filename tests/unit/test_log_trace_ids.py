"""A log event written while a span is in progress names its trace and span, as an operator joins
logs to traces; outside any span it names none."""

from __future__ import annotations

import json
import logging

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from rocketmesh.runtime.log import get_logger
from rocketmesh.server.log import JsonLinesFormatter


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonLinesFormatter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def test_events_carry_the_trace_and_span_ids_of_the_span_in_progress():
    handler = _Lines()
    root = logging.getLogger("rocketmesh")
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        log = get_logger("broker", component="trace-ids-test")
        span = TracerProvider().get_tracer("test").start_span("work")  # a provider of its own: no global set
        with trace.use_span(span, end_on_exit=True):
            log.info("inside")
        log.info("outside")
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    inside, outside = handler.lines
    ctx = span.get_span_context()
    assert (inside["trace_id"], inside["span_id"]) == (f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert "trace_id" not in outside and "span_id" not in outside
