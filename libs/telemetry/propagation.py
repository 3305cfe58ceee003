"""The W3C trace context (``traceparent``) in a request header and in a message's properties.

A producer's send writes the context of its span into the message's
``traceparent`` property (as RocketMQ 5 carries it) and into the request
header; whoever handles the message later (the broker, the scheduler, the
txn-checker, a consumer, hours later through a delay or a retry) takes it from
there as the parent or a link of its own span.

Spans come from the global tracer provider, whose sampler decides what is
recorded. A span the sampler drops is still a span (not recording) with its
parent's trace id and an id of its own, so the decision travels with the
message (W3C). With no OpenTelemetry SDK configured every span is invalid and
nothing is written.

Only OpenTelemetry's public API is used. One shortcut: under the SDK's own
``always_off`` and ``parentbased_always_off`` samplers (the public constants
``sampling.ALWAYS_OFF`` and ``sampling.DEFAULT_OFF``, as ``OTEL_TRACES_SAMPLER``
selects them), a span whose parent they drop is made here as the SDK would make
it (:class:`SureDrops`): the SDK's ``start_span`` costs a consumed message more
than the rest of its handling.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Sequence
from contextvars import Token
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry import context as otel_context, trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN_CONTEXT, Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

#: The property and header field that carry the context.
TRACEPARENT = "traceparent"

#: ``start_span``'s parent: the current context (the default) or none at all (a new trace).
CURRENT = "current"
ROOT = "root"

#: How long a "no tracer provider" answer of :func:`tracing_enabled` is kept before it is asked again: a tenth
#: of a second, so a client sending or consuming a few thousand messages a second asks a few times a second
#: rather than once a message.
RECHECK_S = 0.1

_PROPAGATOR = TraceContextTextMapPropagator()
#: A version-00 ``traceparent`` as this mesh writes it; anything else goes through the propagator.
_TRACEPARENT_00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_EMPTY = Context()
#: W3C trace context level 2's random-trace-id flag, which the SDK hands from a parent to its children.
_RANDOM = 0x02
#: The last hex digit of a ``traceparent`` whose sampled flag is clear.
_NOT_SAMPLED = frozenset("02468ace")


@dataclass(frozen=True)
class SureDrops:
    """The spans the installed SDK's sampler drops whatever is in them: every span (``always_off``), or every
    span but a child of a sampled parent (``parentbased_always_off``)."""

    #: The SDK's id generator (``TracerProvider.id_generator``).
    ids: Any
    #: True under ``parentbased_always_off``: a child of a sampled parent is recorded.
    records_sampled_children: bool

    def drop(self, parent: SpanContext) -> bool:
        """Whether a child of ``parent`` (invalid: a new trace) is dropped for sure."""
        return not (self.records_sampled_children and parent.is_valid and parent.trace_flags.sampled)

    def child(self, parent: SpanContext) -> SpanContext:
        """The span context the SDK gives a dropped child of ``parent`` (invalid: a new trace): the parent's
        trace id, trace state and random-trace-id flag, or a new trace; a new span id; not sampled."""
        if parent.is_valid:
            return SpanContext(parent.trace_id, self.ids.generate_span_id(), False,
                               TraceFlags(parent.trace_flags & _RANDOM), parent.trace_state)
        return SpanContext(self.ids.generate_trace_id(), self.ids.generate_span_id(), False, self.root_flags())

    def root_flags(self) -> TraceFlags:
        """A new trace's flags: not sampled, random-trace-id when the SDK's ids are random."""
        is_random = getattr(self.ids, "is_trace_id_random", None)  # older SDKs have no such method, nor the flag
        return TraceFlags(_RANDOM if is_random is not None and is_random() else 0)


def sure_drops(provider: object) -> SureDrops | None:
    """What ``provider``'s sampler drops for sure, when it is the SDK's, enabled, with ``ALWAYS_OFF`` or
    ``DEFAULT_OFF``; None for anything else (every span then goes through the provider)."""
    sdk_trace = sys.modules.get("opentelemetry.sdk.trace")  # loaded if the provider is the SDK's; never loaded here
    if sdk_trace is None or not isinstance(provider, sdk_trace.TracerProvider):
        return None
    if not isinstance(provider.get_tracer("rocketmesh"), sdk_trace.Tracer):  # OTEL_SDK_DISABLED
        return None
    sampling = sdk_trace.sampling
    if provider.sampler is sampling.ALWAYS_OFF:
        return SureDrops(provider.id_generator, False)
    if provider.sampler is sampling.DEFAULT_OFF:
        return SureDrops(provider.id_generator, True)
    return None


def tracer() -> trace.Tracer:
    """rocketmesh's tracer from the global tracer provider (a no-op until an SDK is configured)."""
    return _TRACER


def tracing_enabled() -> bool:
    """True once a tracer provider is installed (an OpenTelemetry SDK, by the application or by a
    service from its environment): until then span work is skipped altogether.

    A provider installed while rocketmesh is running is seen within :data:`RECHECK_S`: without a provider
    ``trace.get_tracer_provider()`` looks the environment up on every call, which would cost a message as
    much as the rest of its tracing, so its "no" is kept that long. Its "yes" is kept for good (a provider,
    once set, cannot be replaced)."""
    global _enabled, _recheck_at, _DROPS, _TRACER
    if _enabled:
        return True
    now = time.monotonic()
    if now < _recheck_at:
        return False
    provider = trace.get_tracer_provider()
    _recheck_at = now + RECHECK_S
    if isinstance(provider, trace.ProxyTracerProvider):
        return False
    _DROPS = sure_drops(provider)
    _TRACER = provider.get_tracer("rocketmesh")  # the provider's own, rather than the proxy that asks for it per span
    _enabled = True
    return True


def start_span(name: str, kind: SpanKind, parent: str | None = CURRENT,
               links: Sequence[Link] | None = None) -> Span:
    """Start a span (not made current) with ``parent``: :data:`CURRENT` (the current context), :data:`ROOT`
    (a trace of its own), or a ``traceparent`` (None or a malformed one: the current context)."""
    if parent is CURRENT or parent is None:
        ctx = None
    elif parent is ROOT:
        ctx = _EMPTY
    else:
        ctx = context_of(parent)
    drops = _DROPS
    if drops is not None:
        parent_sctx = trace.get_current_span(ctx).get_span_context()
        if drops.drop(parent_sctx):
            return NonRecordingSpan(drops.child(parent_sctx))
    return _TRACER.start_span(name, context=ctx, kind=kind, links=links)


def make_current(span: Span) -> Token[Context]:
    """Make ``span`` the current span (what ``trace.use_span`` does, without a context manager); hand
    the token to :func:`restore` afterwards, on the same thread."""
    return otel_context.attach(trace.set_span_in_context(span))


def restore(token: Token[Context]) -> None:
    """Make current again the context :func:`make_current` replaced."""
    otel_context.detach(token)


class DroppedSpan(Span):
    """A span the installed sampler drops for sure, made current by :func:`enter_dropped`, whose parent is a
    ``traceparent`` (or, in a subclass, what ``traceparent_in`` finds it in: a message, say). Like the SDK's
    non-recording span it records nothing. Its span context is made the first time it is asked for (a
    consumer's process span or a broker's request span usually never is): the parent's trace id and
    random-trace-id flag, or a new trace when the parent is absent or malformed; a span id of its own; not
    sampled."""

    __slots__ = ("_parent", "_drops", "_made", "_token")

    def __init__(self, parent: Any, drops: SureDrops) -> None:
        self._parent = parent
        self._drops = drops
        self._made: SpanContext | None = None
        self._token: Token[Context] | None = None

    @staticmethod
    def traceparent_in(parent: Any) -> str | None:
        """The ``traceparent`` of a span's ``parent`` (here ``parent`` is one)."""
        return parent

    def get_span_context(self) -> SpanContext:
        made = self._made
        if made is None:
            with _MAKING:  # one span id, whichever thread asks first
                made = self._made
                if made is None:
                    parent = span_context_of(self.traceparent_in(self._parent)) or INVALID_SPAN_CONTEXT
                    made = self._made = self._drops.child(parent)
        return made

    def exit(self) -> None:
        """Make current again the context :func:`enter_dropped` replaced (on the same thread)."""
        if self._token is not None:
            otel_context.detach(self._token)

    # Nothing is recorded.
    def is_recording(self) -> bool:
        return False

    def end(self, end_time: int | None = None) -> None:
        pass

    def set_attributes(self, attributes: Any) -> None:
        pass

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        pass

    def add_link(self, context: SpanContext, attributes: Any = None) -> None:
        pass

    def update_name(self, name: str) -> None:
        pass

    def set_status(self, status: Any, description: str | None = None) -> None:
        pass

    def record_exception(self, exception: BaseException, attributes: Any = None, timestamp: int | None = None,
                         escaped: bool = False) -> None:
        pass

    def __repr__(self) -> str:
        return f"DroppedSpan({self.get_span_context()!r})"


D = TypeVar("D", bound=DroppedSpan)


def enter_dropped(span_type: type[D], parent: Any) -> D | None:
    """The span :func:`start_span` would start under ``parent`` (a ``traceparent``, or what
    ``span_type.traceparent_in`` finds it in), made current, when the installed sampler drops it for sure;
    None when it might not (then call :func:`start_span`). For threads with no span of their own current
    (a consume thread, the broker's I/O thread): no parent, or a malformed one, gives a trace of its own.
    Under ``always_off`` the parent is not even looked at until someone asks for the span's context. The
    span's :meth:`DroppedSpan.exit` makes the replaced context current again."""
    drops = _DROPS
    if drops is None:
        return None
    if drops.records_sampled_children and _sampled(span_type.traceparent_in(parent)):
        return None
    span = span_type(parent, drops)
    span._token = otel_context.attach(trace.set_span_in_context(span))
    return span


def _sampled(traceparent: str | None) -> bool:
    """Whether ``traceparent`` is a version-00 one with its sampled flag set (a parent that
    parentbased_always_off records a child of)."""
    return traceparent is not None and len(traceparent) == 55 and traceparent.startswith("00-") \
        and traceparent[54] not in _NOT_SAMPLED


def traceparent_of(span: Span | None = None) -> str | None:
    """The ``traceparent`` of ``span`` (the current span by default); None when it is invalid (no SDK,
    or outside any trace)."""
    ctx = (span if span is not None else trace.get_current_span()).get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def context_of(traceparent: str | None) -> Context | None:
    """The context a ``traceparent`` names, to parent a span with; None when absent or malformed."""
    sctx = span_context_of(traceparent)
    return None if sctx is None else trace.set_span_in_context(NonRecordingSpan(sctx), _EMPTY)


def span_context_of(traceparent: str | None) -> SpanContext | None:
    """The remote span context a ``traceparent`` names, to link a span to; None when absent or malformed."""
    if not traceparent:
        return None
    m = _TRACEPARENT_00.fullmatch(traceparent)
    if m is not None:
        # The W3C propagator's answer for the form this mesh writes, without its getter and checks per message.
        trace_id, span_id, flags = m.groups()
        sctx = SpanContext(int(trace_id, 16), int(span_id, 16), True, TraceFlags(int(flags, 16)))
    else:
        sctx = trace.get_current_span(_PROPAGATOR.extract({TRACEPARENT: traceparent})).get_span_context()
    return sctx if sctx.is_valid else None


_TRACER = trace.get_tracer("rocketmesh")
_MAKING = threading.Lock()
#: Set once a provider is installed whose sampler drops spans for sure (see :func:`start_span`).
_DROPS: SureDrops | None = None
_enabled = False
_recheck_at = 0.0
