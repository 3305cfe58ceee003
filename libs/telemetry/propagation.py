"""The W3C trace context (``traceparent``) in a request header and in a message's properties.

A producer's send writes the context of its span into the message's
``traceparent`` property (as RocketMQ 5 carries it) and into the request
header; whoever handles the message later (the broker, the scheduler, the
txn-checker, a consumer, hours later through a delay or a retry) takes it from
there as the parent or a link of its own span.

With no OpenTelemetry SDK configured every span is invalid and nothing is written.
"""

from __future__ import annotations

import os
import re
from typing import Optional

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

#: The property and header field that carry the context.
TRACEPARENT = "traceparent"

_PROPAGATOR = TraceContextTextMapPropagator()
#: A version-00 ``traceparent`` as this mesh writes it; anything else goes through the propagator.
_TRACEPARENT_00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_EMPTY = Context()


def tracer() -> trace.Tracer:
    """rocketmesh's tracer from the global tracer provider (a no-op until an SDK is configured)."""
    return _TRACER


def tracing_enabled() -> bool:
    """True once a tracer provider is installed (an OpenTelemetry SDK, by the application or by a
    service from its environment): until then span work can be skipped altogether."""
    global _enabled
    if _enabled:
        return True
    # get_tracer_provider() reads os.environ on every call while no provider is set, which costs as
    # much as the rest of a no-op span: the global is read directly (the public call is the fallback,
    # should a future API rename it). True is kept: a provider, once set, cannot be unset.
    if _PROVIDER_FROM_ENV or not hasattr(trace, "_TRACER_PROVIDER"):
        _enabled = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    else:
        _enabled = trace._TRACER_PROVIDER is not None
    if _enabled:
        # The provider's own tracer from now on, rather than the proxy that looks it up on every span.
        global _TRACER
        _TRACER = trace.get_tracer("rocketmesh")
    return _enabled


def traceparent_of(span: Optional[Span] = None) -> Optional[str]:
    """The ``traceparent`` of ``span`` (the current span by default); None when it is invalid (no SDK,
    or outside any trace)."""
    # SpanContext is a tuple (trace_id, span_id, is_remote, trace_flags, ...): indexes, not its properties.
    ctx = (span if span is not None else trace.get_current_span()).get_span_context()
    trace_id, span_id = ctx[0], ctx[1]
    if not trace_id or not span_id:  # SpanContext.is_valid
        return None
    return "00-%032x-%016x-%02x" % (trace_id, span_id, ctx[3])


def context_of(traceparent: Optional[str]) -> Optional[Context]:
    """The context a ``traceparent`` names, to parent a span with; None when absent or malformed."""
    if not traceparent:
        return None
    m = _TRACEPARENT_00.fullmatch(traceparent)
    if m is not None:  # the W3C propagator's result, without its regex search, getter and checks per call
        sctx = _remote(m)
        return None if sctx is None else trace.set_span_in_context(NonRecordingSpan(sctx), _EMPTY)
    ctx = _PROPAGATOR.extract({TRACEPARENT: traceparent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def span_context_of(traceparent: Optional[str]) -> Optional[trace.SpanContext]:
    """The remote span context a ``traceparent`` names, to link a span to; None when absent or malformed."""
    if not traceparent:
        return None
    m = _TRACEPARENT_00.fullmatch(traceparent)
    if m is not None:
        return _remote(m)
    ctx = context_of(traceparent)
    return trace.get_current_span(ctx).get_span_context() if ctx is not None else None


def _remote(m: "re.Match[str]") -> Optional[SpanContext]:
    trace_id, span_id, flags = m.groups()
    sctx = SpanContext(int(trace_id, 16), int(span_id, 16), True, TraceFlags(int(flags, 16)))
    return sctx if sctx.is_valid else None


_TRACER = trace.get_tracer("rocketmesh")
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_enabled = False
