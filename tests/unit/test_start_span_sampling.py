"""start_span under each of the SDK's samplers and every kind of parent: the span it makes is the one the SDK
would make (recording or not, the parent's trace id or a new one, sampled flag), also where it makes a span the
sampler drops for sure itself (sure_drops) rather than through the SDK."""

from __future__ import annotations

import pytest
from opentelemetry import context as otel_context, trace
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from rocketmesh.telemetry import propagation
from rocketmesh.telemetry.propagation import CURRENT, ROOT, start_span

TRACE = 0x0AF7651916CD43DD8448EB211C80319C
SAMPLED = f"00-{TRACE:032x}-b7ad6b7169203331-01"
UNSAMPLED = f"00-{TRACE:032x}-b7ad6b7169203331-00"
UNSAMPLED_RANDOM = f"00-{TRACE:032x}-b7ad6b7169203331-02"
SAMPLERS = {"always_off": sampling.ALWAYS_OFF, "parentbased_always_off": sampling.DEFAULT_OFF,
            "always_on": sampling.ALWAYS_ON, "parentbased_always_on": sampling.DEFAULT_ON,
            "traceidratio 0 (not skipped: the SDK decides)": sampling.TraceIdRatioBased(0.0)}
PARENTS = {"current none": (None, CURRENT), "current sampled": (SAMPLED, CURRENT),
           "current unsampled": (UNSAMPLED, CURRENT), "current unsampled, random id": (UNSAMPLED_RANDOM, CURRENT),
           "remote sampled": (None, SAMPLED), "remote unsampled": (None, UNSAMPLED),
           "remote unsampled, random id": (None, UNSAMPLED_RANDOM), "remote malformed": (None, "00-nothex"),
           "remote absent": (None, None), "root under a sampled current": (SAMPLED, ROOT)}


def _current(tp: str | None):
    if tp is None:
        return otel_context.Context()
    flags = TraceFlags(int(tp[-2:], 16))
    return trace.set_span_in_context(NonRecordingSpan(SpanContext(TRACE, 0xB7AD6B7169203331, False, flags)))


@pytest.mark.parametrize("sampler", SAMPLERS.values(), ids=SAMPLERS.keys())
@pytest.mark.parametrize("current, parent", PARENTS.values(), ids=PARENTS.keys())
def test_the_span_is_the_one_the_sdk_makes(monkeypatch, sampler, current, parent) -> None:
    provider = TracerProvider(sampler=sampler)
    monkeypatch.setattr(propagation, "_TRACER", provider.get_tracer("rocketmesh"))
    monkeypatch.setattr(propagation, "_DROPS", propagation.sure_drops(provider))
    token = otel_context.attach(_current(current))
    try:
        ours = start_span("send T", SpanKind.PRODUCER, parent)
        sdk_ctx = None if parent in (CURRENT, None) else otel_context.Context() if parent is ROOT \
            else propagation.context_of(parent)
        theirs = provider.get_tracer("sdk").start_span("send T", context=sdk_ctx, kind=SpanKind.PRODUCER)
    finally:
        otel_context.detach(token)
    a, b = ours.get_span_context(), theirs.get_span_context()
    assert ours.is_recording() == theirs.is_recording()
    assert a.trace_flags == b.trace_flags and a.trace_state == b.trace_state
    assert (a.trace_id == TRACE) == (b.trace_id == TRACE)
    assert a.is_valid and a.span_id != 0
    ours.end()
    theirs.end()


def test_only_the_sdk_s_off_samplers_are_skipped(monkeypatch) -> None:
    assert not propagation.sure_drops(TracerProvider(sampler=sampling.ALWAYS_OFF)).records_sampled_children
    assert propagation.sure_drops(TracerProvider(sampler=sampling.DEFAULT_OFF)).records_sampled_children
    for sampler in (sampling.ALWAYS_ON, sampling.DEFAULT_ON, sampling.TraceIdRatioBased(0.0),
                    sampling.ParentBased(sampling.TraceIdRatioBased(0.0))):
        assert propagation.sure_drops(TracerProvider(sampler=sampler)) is None
    assert propagation.sure_drops(trace.NoOpTracerProvider()) is None
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")  # the SDK's tracers are no-ops: nothing to make
    assert propagation.sure_drops(TracerProvider(sampler=sampling.ALWAYS_OFF)) is None
    monkeypatch.setenv("OTEL_SDK_DISABLED", "false")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")  # as the services are configured
    assert propagation.sure_drops(TracerProvider()).records_sampled_children


REMOTE = {"sampled": SAMPLED, "unsampled": UNSAMPLED, "unsampled, random id": UNSAMPLED_RANDOM,
          "malformed": "00-nothex", "not hex, right length": "00-" + "z" * 32 + "-" + "b" * 16 + "-00",
          "absent": None}


@pytest.mark.parametrize("sampler", SAMPLERS.values(), ids=SAMPLERS.keys())
@pytest.mark.parametrize("parent", REMOTE.values(), ids=REMOTE.keys())
@pytest.mark.parametrize("lookup", [False, True], ids=["traceparent", "function"])
def test_a_dropped_span_is_the_one_the_sdk_makes_on_a_thread_without_context(monkeypatch, sampler, parent,
                                                                              lookup) -> None:
    """enter_dropped (a consume thread, the broker's I/O thread) answers None unless the sampler drops the
    span for sure, and then makes current the SDK's span: not recording, the parent's trace and flags or a
    new trace; its exit() leaves the thread as it was."""
    provider = TracerProvider(sampler=sampler)
    monkeypatch.setattr(propagation, "_DROPS", propagation.sure_drops(provider))
    asked = []

    def find() -> str | None:
        asked.append(1)
        return parent

    # The SDK's span first: with no parent it takes the current context, which ours is about to become.
    theirs = provider.get_tracer("sdk").start_span("process T", context=propagation.context_of(parent),
                                                   kind=SpanKind.CONSUMER)
    ours = propagation.enter_dropped(_Found if lookup else propagation.DroppedSpan, find if lookup else parent)
    if ours is None:
        # Only a sampled parent under parentbased_always_off, or a sampler that is not an off one, is left to
        # start_span.
        assert theirs.is_recording() or propagation._DROPS is None
        assert trace.get_current_span() is trace.INVALID_SPAN
        return
    assert trace.get_current_span() is ours
    ours.exit()
    assert trace.get_current_span() is trace.INVALID_SPAN
    assert not theirs.is_recording() and not ours.is_recording()
    if lookup and sampler is sampling.ALWAYS_OFF:
        assert not asked  # nothing looked up until someone asks for the span's context
    a, b = ours.get_span_context(), theirs.get_span_context()
    assert a.trace_flags == b.trace_flags
    assert (a.trace_id == TRACE) == (b.trace_id == TRACE)
    assert a.is_valid and a.span_id != 0 and not a.is_remote
    assert ours.get_span_context() is a  # made once
    ours.end()


class _Found(propagation.DroppedSpan):
    """A dropped span whose parent is a function that finds the traceparent (as a message's process span)."""

    traceparent_in = staticmethod(lambda find: find())


def test_a_dropped_span_gets_one_span_id_whichever_thread_asks_first(monkeypatch) -> None:
    import threading

    provider = TracerProvider(sampler=sampling.ALWAYS_OFF)
    monkeypatch.setattr(propagation, "_DROPS", propagation.sure_drops(provider))
    for _ in range(50):
        span = propagation.enter_dropped(propagation.DroppedSpan, UNSAMPLED)
        span.exit()
        seen = []
        threads = [threading.Thread(target=lambda seen=seen, span=span: seen.append(span.get_span_context()))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({(c.trace_id, c.span_id) for c in seen}) == 1 and seen[0].trace_id == TRACE


def test_make_current_then_restore_keeps_the_rest_of_the_context() -> None:
    from opentelemetry import baggage

    span = NonRecordingSpan(SpanContext(TRACE, 0xB7AD6B7169203331, False, TraceFlags(0)))
    outer = otel_context.attach(baggage.set_baggage("tenant", "a"))
    try:
        token = propagation.make_current(span)
        assert trace.get_current_span() is span and baggage.get_baggage("tenant") == "a"
        propagation.restore(token)
        assert trace.get_current_span() is trace.INVALID_SPAN and baggage.get_baggage("tenant") == "a"
    finally:
        otel_context.detach(outer)
    token = propagation.make_current(span)  # from an empty context
    assert trace.get_current_span() is span
    propagation.restore(token)
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_a_dropped_span_entered_and_exited_keeps_the_rest_of_the_context(monkeypatch) -> None:
    from opentelemetry import baggage

    monkeypatch.setattr(propagation, "_DROPS",
                        propagation.sure_drops(TracerProvider(sampler=sampling.ALWAYS_OFF)))
    outer = otel_context.attach(baggage.set_baggage("tenant", "a"))
    try:
        span = propagation.enter_dropped(propagation.DroppedSpan, UNSAMPLED)
        assert trace.get_current_span() is span and baggage.get_baggage("tenant") == "a"
        assert span.get_span_context().trace_id == TRACE
        span.exit()
        assert trace.get_current_span() is trace.INVALID_SPAN and baggage.get_baggage("tenant") == "a"
    finally:
        otel_context.detach(outer)
