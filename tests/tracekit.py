"""The application side of tracing in the tests: the test process's own OpenTelemetry SDK, exporting the
client's spans to memory (the services export theirs to an OtlpReceiver), and ways to find spans in it."""

from __future__ import annotations

import time

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from procs import wait_for
from rocketmesh.telemetry.propagation import RECHECK_S


def install_app_exporter() -> InMemorySpanExporter:
    """An in-memory exporter on the global tracer provider, which is made an SDK provider if it is not one
    yet (the global can be set once per process: later calls join the one there is)."""
    exporter = InMemorySpanExporter()
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        current.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        time.sleep(RECHECK_S)  # the client sees a provider installed after its last "no" within RECHECK_S
    return exporter


def traceparent(span: ReadableSpan) -> str:
    """The W3C ``traceparent`` of a finished span."""
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name``."""
    return [s for s in exporter.get_finished_spans() if s.name == name]


def wait_spans(exporter: InMemorySpanExporter, name: str, n: int, timeout_s: float = 20.0) -> list[ReadableSpan]:
    """The spans called ``name`` once there are ``n`` of them."""
    wait_for(lambda: len(named(exporter, name)) >= n, timeout_s, what=f"{n} span(s) {name!r}")
    return named(exporter, name)
