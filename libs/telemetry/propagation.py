"""The W3C trace context (``traceparent``) in a request header and in a message's properties.

A producer's send writes the context of its span into the message's
``traceparent`` property (as RocketMQ 5 carries it) and into the request
header; whoever handles the message later (the broker, the scheduler, the
txn-checker, a consumer, hours later through a delay or a retry) takes it from
there as the parent or a link of its own span.

With no OpenTelemetry SDK configured every span is invalid and nothing is written.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
from contextvars import Context as VarsContext
from contextvars import ContextVar, Token, copy_context
from typing import Any, Optional, Sequence, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
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
        global _TRACER, _DROPS
        _TRACER = trace.get_tracer("rocketmesh")
        _DROPS = _dropping_sampler(trace.get_tracer_provider())
    return _enabled


#: ``start_span``'s parent: the current context (the default) or none at all (a new trace).
CURRENT = "current"
ROOT = "root"


def start_span(name: str, kind: SpanKind, parent: Optional[str] = CURRENT,
               links: Optional[Sequence[Link]] = None) -> Span:
    """Start a span (not made current) with ``parent``: :data:`CURRENT` (the current context), :data:`ROOT`
    (a trace of its own), or a ``traceparent`` (None or a malformed one: the current context).

    When the installed SDK's sampler drops this span whatever is in it (``always_off``, or
    ``parentbased_always_off`` under a parent that is not sampled), the non-recording span the SDK would
    make is made here directly: the parent's trace id (or a new one) and a new span id, so the decision
    still travels, without the SDK's per-span work.
    """
    drops = _DROPS
    if drops is None:
        return _start(name, kind, parent, links)
    trace_id = 0
    trace_state = None
    flags = drops.root_flags
    if parent is CURRENT or parent is None:
        sctx = trace.get_current_span().get_span_context()
        if sctx[0] and sctx[1]:  # valid: (trace_id, span_id, is_remote, trace_flags, trace_state)
            if sctx[3] & _SAMPLED and not drops.sampled_too:
                return _start(name, kind, parent, links)
            trace_id, trace_state, flags = sctx[0], sctx[4], sctx[3] & _RANDOM
    elif parent is not ROOT:
        ids = _parsed(parent)  # anything but a valid traceparent as the mesh writes it: the SDK decides
        if ids is None or not ids[0] or not ids[1] or (ids[2] & _SAMPLED and not drops.sampled_too):
            return _start(name, kind, parent, links)
        trace_id, flags = ids[0], ids[2] & _RANDOM
    new = drops.ids
    return NonRecordingSpan(SpanContext(trace_id or new.generate_trace_id(), new.generate_span_id(), False,
                                        _FLAGS[flags], trace_state))


def make_current(span: Span) -> Token:
    """Make ``span`` the current span (what ``trace.use_span`` does, without a context manager); hand
    the token to :func:`restore` afterwards, on the same thread."""
    var = _CONTEXT_VAR
    if var is None:
        return otel_context.attach(trace.set_span_in_context(span))
    current = var.get()
    # The context OpenTelemetry's set_value would build, made in one step (this runs per message).
    return var.set(Context(current, **{_SPAN_KEY: span}) if current else Context({_SPAN_KEY: span}))


def restore(token: Token) -> None:
    """Make current again the context :func:`make_current` replaced."""
    var = _CONTEXT_VAR
    if var is None:
        otel_context.detach(token)
    else:
        var.reset(token)


def dropped_traceparent() -> Optional[str]:
    """The ``traceparent`` of a new child of the current span, when the installed sampler drops that child
    for sure (then no span is needed, only its context to hand on: a send); None when it might not (then
    start a span with :func:`start_span`). A child of no span is a trace of its own."""
    drops = _DROPS
    if drops is None:
        return None
    var = _CONTEXT_VAR
    span = var.get().get(_SPAN_KEY) if var is not None else trace.get_current_span()
    sctx = span.get_span_context() if span is not None else None
    if sctx is not None and sctx[0] and sctx[1]:  # (trace_id, span_id, is_remote, trace_flags, ...)
        if sctx[3] & _SAMPLED and not drops.sampled_too:
            return None
        trace_id, flags = sctx[0], sctx[3] & _RANDOM
    else:
        trace_id, flags = drops.ids.generate_trace_id(), drops.root_flags
    return "00-%032x-%016x-%02x" % (trace_id, drops.ids.generate_span_id(), flags)


def enter_dropped(span_type: "type[D]", parent: Any) -> "Optional[D]":
    """The span :func:`start_span` would start under ``parent``, made current, when the installed sampler
    drops it for sure; None when it might not (a sampled parent: then call :func:`start_span`).

    ``span_type`` is :class:`DroppedSpan` (``parent`` a ``traceparent``) or a subclass whose
    ``parent_traceparent`` finds it in ``parent`` (a message, say). The span's ids are made only if anyone
    asks for them; under ``always_off`` the traceparent is not even looked up until then. No parent, or a
    malformed one, gives a trace of its own. The span's :meth:`DroppedSpan.exit` makes the replaced
    context current again. This runs per message and per request, so it is one step, not start + attach.
    """
    drops = _DROPS
    if drops is None:
        return None
    span = _new(span_type)  # no __init__ frame: this runs per message
    span._parent = parent
    span._drops = drops
    span._context = None
    if not drops.sampled_too:
        # Under parentbased_always_off only a sampled parent is recorded (a new trace is dropped too).
        if _sampled(span.parent_traceparent()):
            return None
    var = _CONTEXT_VAR
    if var is None:
        span._token = otel_context.attach(trace.set_span_in_context(span))
    else:
        current = var.get()
        # The context OpenTelemetry's set_value would build, made in one step.
        span._token = var.set(Context(current, **{_SPAN_KEY: span}) if current else Context({_SPAN_KEY: span}))
    return span


class DroppedSpan(NonRecordingSpan):
    """The non-recording child of a ``traceparent`` that the installed sampler drops for sure, made (and made
    current) only by :func:`enter_dropped`. Its SpanContext (the parent's trace id and flags, a new span id) is made the
    first time it is asked for: a consumer's process span or a broker's request span is usually never
    asked. A ``traceparent`` that is not hex gives a trace of its own."""

    # _context is a slot too (NonRecordingSpan's instances would keep it in a __dict__ made for it): None until
    # asked for.
    __slots__ = ("_context", "_parent", "_drops", "_token")

    @staticmethod
    def traceparent_in(parent: Any) -> Optional[str]:
        """The ``traceparent`` of a span's ``parent`` (here ``parent`` is one); a subclass finds it in what it
        is given (a message, say)."""
        return parent

    def parent_traceparent(self) -> Optional[str]:
        """The parent's ``traceparent``."""
        return self.traceparent_in(self._parent)

    def exit(self) -> None:
        """Make current again the context :func:`enter_dropped` replaced (on the same thread)."""
        var = _CONTEXT_VAR
        if var is None:
            otel_context.detach(self._token)
        else:
            var.reset(self._token)

    def get_span_context(self) -> SpanContext:
        ctx = self._context
        if ctx is None:
            with _MAKING:  # one span id, whichever thread asks first
                ctx = self._context
                if ctx is None:
                    ctx = self._context = self._make()
        return ctx

    def _make(self) -> SpanContext:
        drops = self._drops
        parent = self.parent_traceparent()
        ids = _parsed(parent) if parent else None
        if ids is not None and ids[0] and ids[1]:
            trace_id, flags = ids[0], ids[2] & _RANDOM
        else:
            trace_id, flags = drops.ids.generate_trace_id(), drops.root_flags
        return SpanContext(trace_id, drops.ids.generate_span_id(), False, _FLAGS[flags])

    def __repr__(self) -> str:
        return f"NonRecordingSpan({self.get_span_context()!r})"


D = TypeVar("D", bound=DroppedSpan)


class _ScopeContext(Context):
    """The context a :class:`DroppedScope` makes its thread's current one; its ``scope`` attribute leads
    :func:`enter_scoped` back to the scope."""

    __slots__ = ("scope",)


class DroppedScope:
    """One thread's sampled-out spans, one after another (a consume thread's process spans, one per
    listener call), at the least cost per span: no span or context made, no ContextVar set.

    A thread with no context of its own gets a scope at its first span (:func:`enter_scoped`): one
    dropped span (of :attr:`span_type`) in a context made the thread's current one. Each later span is
    that span given its new parent. A span lasts until the thread's next one (:meth:`exit` has nothing
    to do): between two spans the thread stays in the last one's trace, which only the code that runs
    them sees (a consume service, between listener calls).

    Whatever was kept of a span never changes under its holder. At the next span, reference counts
    tell whether anything else holds the span, its context, or the thread's context variables: a
    listener that kept the span or the context, a context made from it, a ``contextvars.copy_context``
    (as asyncio's ``call_soon_threadsafe`` takes), a context variable set since. Then the scope leaves
    them as they are and takes a new span and context, so that a copy keeps its message's trace, as
    the SDK's spans do. A thread whose variables are laid out so that a change to one of them might
    not show (see :func:`_watchable_vars`) goes on without a scope.
    """

    __slots__ = ("span", "vars", "quick")

    #: The type of the scope's span (its ``traceparent_in`` finds the parent's ``traceparent``).
    span_type: "type[DroppedSpan]" = DroppedSpan
    #: What :func:`enter_scoped` makes instead on a thread that cannot have a scope (it has a context of
    #: its own): :func:`enter_dropped`'s span of this type.
    alone: "type[DroppedSpan]" = DroppedSpan

    def __init__(self) -> None:
        #: The sampler's sure drops when they are every span (always_off): then a span needs no look at
        #: its parent, and :func:`enter_scoped` takes its short way.
        self.quick: Optional[_Dropping] = None
        self.span: DroppedSpan
        #: The thread's context variables as its context holds them (every copy shares them).
        self.vars: object = None

    def _renew(self, var: ContextVar) -> Optional[DroppedSpan]:
        """A new span in a new context, made the thread's current one; returns the span. None when the
        thread's variables cannot be watched: then it goes on without a scope."""
        span = _new(self.span_type)
        span._context = None
        span._drops = _DROPS
        self.span = span
        ctx = _ScopeContext({_SPAN_KEY: span})
        ctx.scope = self
        var.set(ctx)
        self.vars = _watchable_vars(ctx)
        if self.vars is None:
            var.set(_NO_SCOPE)
            return None
        return span

    def exit(self) -> None:
        """Nothing to do: the span stays the thread's current one until its next (see the class)."""


S = TypeVar("S", bound=DroppedScope)


def enter_scoped(scope_type: "type[S]", parent: Any) -> "Optional[S | DroppedSpan]":
    """What :func:`enter_dropped` does, for a thread that runs such spans one after another and never one
    inside another (a consume thread): the span is the thread's ``scope_type`` scope's (``scope.span``),
    made current; it lasts until the thread's next span, and ``exit()`` on what is returned has nothing
    to do. A thread that cannot have a scope gets :func:`enter_dropped`'s span of ``scope_type.alone``
    (whose ``exit()`` makes the replaced context current again). None when the sampler might record the
    span (then call :func:`start_span`)."""
    var = _CONTEXT_VAR
    if var is not None:
        current = var.get()
        if current.__class__ is _ScopeContext:
            scope = current.scope
            # The thread's scope: this runs per message, so it is kept short.
            if scope.__class__ is scope_type and (scope.quick is _DROPS or _may_use(scope, parent)):
                span = scope.span
                if _refs(scope.vars) != _SCOPE_VARS_REFS or _refs(current) != _SCOPE_CTX_REFS \
                        or _refs(span) != _SCOPE_SPAN_REFS:
                    # The last span, its context or the thread's variables are held elsewhere (or
                    # changed): they stay as they are, and the thread goes on with new ones.
                    span = scope._renew(var)
                    if span is None:
                        return enter_dropped(scope_type.alone, parent)
                span._parent = parent
                span._context = None
                return scope
    return _enter_scoped(scope_type, parent)


def _may_use(scope: DroppedScope, parent: Any) -> bool:
    """Whether ``scope``'s span may be the span of a child of ``parent`` under the installed sampler
    (when it is not always_off, which the scope then knows as ``quick``): it may when the sampler drops
    that child for sure."""
    drops = _DROPS
    if drops is None:
        return False
    if drops.sampled_too:
        scope.quick = drops
        return True
    # Under parentbased_always_off only a sampled parent is recorded (a new trace is dropped too).
    return not _sampled(scope.span_type.traceparent_in(parent))


def _sampled(traceparent: Optional[str]) -> bool:
    """Whether ``traceparent`` is a version-00 one with its sampled flag set (a parent that
    parentbased_always_off records a child of)."""
    return bool(traceparent) and len(traceparent) == 55 and traceparent.startswith("00-") \
        and traceparent[54] not in _NOT_SAMPLED


def _enter_scoped(scope_type: "type[S]", parent: Any) -> "Optional[S | DroppedSpan]":
    """:func:`enter_scoped` on a thread without a scope of ``scope_type``: the thread's first span (it
    gets its scope), or one that cannot have a scope."""
    var = _CONTEXT_VAR
    if var is None or not _SCOPE_SPAN_REFS or _DROPS is None or var.get():
        # No scopes here, or the thread has a context of its own (another scope's included).
        return enter_dropped(scope_type.alone, parent)
    scope = scope_type()
    if not _may_use(scope, parent):
        return None
    span = scope._renew(var)  # the thread's from now on
    if span is None:
        return enter_dropped(scope_type.alone, parent)
    span._parent = parent
    return scope


def _watchable_vars(ctx: Context) -> object:
    """The current thread's context variables as its context holds them: one map, which every copy of the
    context shares (so its reference count tells whether a copy was taken), and which any change of any
    variable replaces. A change shows in the reference count of ``ctx`` (OpenTelemetry's current context)
    only when ``ctx`` is one of the map's top entries, which the new map copies; otherwise (another
    variable shares its first hash bits) this is None, as it is where the runtime does not show the map."""
    for held in gc.get_referents(copy_context()):  # a copy holds nothing else
        if type(held).__name__ == "hamt":
            for top in gc.get_referents(held):  # its root
                if any(entry is ctx for entry in gc.get_referents(top)):
                    return held
    return None


def _start(name: str, kind: SpanKind, parent: Optional[str], links: Optional[Sequence[Link]]) -> Span:
    ctx = None if parent is CURRENT or parent is None else _EMPTY if parent is ROOT else context_of(parent)
    return _TRACER.start_span(name, context=ctx, kind=kind, links=links)


class _Dropping:
    """An SDK sampler's sure drops: every span with no sampled parent (``sampled_too``: every span)."""

    __slots__ = ("ids", "sampled_too", "root_flags")

    def __init__(self, ids: Any, sampled_too: bool) -> None:
        self.ids = ids
        self.sampled_too = sampled_too
        #: A new trace's flags: not sampled, and W3C's random-trace-id flag when the ids are random.
        self.root_flags = _RANDOM if ids.is_trace_id_random() else 0


def _dropping_sampler(provider: object) -> Optional[_Dropping]:
    """What ``provider``'s sampler drops for sure, when it is the SDK's with one of its off samplers;
    None for anything else (every span then goes through the provider)."""
    try:
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace import sampling
    except ImportError:  # an application's own provider, without the SDK installed
        return None
    if not isinstance(provider, SdkTracerProvider) or getattr(provider, "_disabled", True):
        return None
    ids = getattr(provider, "id_generator", None)
    sampler = getattr(provider, "sampler", None)

    def drops(s: object) -> bool:
        return isinstance(s, sampling.StaticSampler) and getattr(s, "_decision", None) is sampling.Decision.DROP

    if ids is None:
        return None
    if drops(sampler):
        return _Dropping(ids, True)
    if isinstance(sampler, sampling.ParentBased) and all(
            drops(getattr(sampler, name, None))
            for name in ("_root", "_remote_parent_not_sampled", "_local_parent_not_sampled")):
        return _Dropping(ids, False)
    return None


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
    ids = _parsed(traceparent)
    if ids is not None:  # the W3C propagator's result, without its regex search, getter and checks per call
        sctx = _remote(ids)
        return None if sctx is None else trace.set_span_in_context(NonRecordingSpan(sctx), _EMPTY)
    ctx = _PROPAGATOR.extract({TRACEPARENT: traceparent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def span_context_of(traceparent: Optional[str]) -> Optional[trace.SpanContext]:
    """The remote span context a ``traceparent`` names, to link a span to; None when absent or malformed."""
    if not traceparent:
        return None
    ids = _parsed(traceparent)
    if ids is not None:
        return _remote(ids)
    ctx = context_of(traceparent)
    return trace.get_current_span(ctx).get_span_context() if ctx is not None else None


def _parsed(traceparent: str) -> Optional[tuple[int, int, int]]:
    """(trace id, span id, flags) of a version-00 ``traceparent`` as this mesh writes it; None for any other."""
    m = _TRACEPARENT_00.fullmatch(traceparent)
    if m is None:
        return None
    trace_id, span_id, flags = m.groups()
    return int(trace_id, 16), int(span_id, 16), int(flags, 16)


def _remote(ids: tuple[int, int, int]) -> Optional[SpanContext]:
    sctx = SpanContext(ids[0], ids[1], True, TraceFlags(ids[2]))
    return sctx if sctx.is_valid else None


_TRACER = trace.get_tracer("rocketmesh")
_SAMPLED = TraceFlags.SAMPLED
_RANDOM = 0x02  # W3C trace context level 2: the trace id is random (TraceFlags.RANDOM_TRACE_ID)
_FLAGS = {0: TraceFlags(0), _RANDOM: TraceFlags(_RANDOM)}
#: The last hex digit of a ``traceparent`` whose sampled flag is clear.
_NOT_SAMPLED = frozenset("02468ace")
_new = object.__new__
_MAKING = threading.Lock()


def _context_var() -> Optional[ContextVar]:
    """The ContextVar under OpenTelemetry's default runtime context; None under any other (then the
    public calls are used)."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    return var if isinstance(var, ContextVar) else None


_CONTEXT_VAR = _context_var()
#: The key a context keeps its current span under (set_span_in_context's one key).
_SPAN_KEY = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, Context())))
#: Set once a provider is installed whose sampler drops spans for sure (see :func:`start_span`).
_DROPS: Optional[_Dropping] = None
_refs = sys.getrefcount
#: The current context of a thread that cannot have a scope (:meth:`DroppedScope._renew`): no span.
_NO_SCOPE = Context({_SPAN_KEY: trace.INVALID_SPAN})


def _scope_refs() -> tuple[int, int, int]:
    """The reference counts :func:`enter_scoped` sees of a scope's thread variables, its context and its
    span when nothing else holds them, counted with the same reads on a scope of its own (on a context
    of its own). Zeros where they cannot be told: without a GIL counts are not exact, and a runtime may
    not show a context's variables; then no scope is made, and every span is :func:`enter_dropped`'s."""
    var = _CONTEXT_VAR
    if var is None or not getattr(sys, "_is_gil_enabled", lambda: True)():
        return 0, 0, 0

    def count() -> tuple[int, int, int]:
        probe = DroppedScope()
        if probe._renew(var) is None:
            return 0, 0, 0
        current = var.get()
        scope = current.scope
        span = scope.span
        return _refs(scope.vars), _refs(current), _refs(span)

    return VarsContext().run(count)


_SCOPE_VARS_REFS, _SCOPE_CTX_REFS, _SCOPE_SPAN_REFS = _scope_refs()
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_enabled = False
