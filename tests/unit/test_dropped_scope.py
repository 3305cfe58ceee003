"""A consume thread's sampled-out process spans (propagation.enter_scoped): one span and two contexts used
again from message to message, and never changed under anyone who kept them. Each case runs on a thread of
its own, which starts (as a consume thread does) with no context."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Callable

import pytest
from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider, sampling

from rocketmesh.telemetry import propagation
from rocketmesh.telemetry.propagation import DroppedScope, enter_scoped

TRACES = [0x0AF7651916CD43DD8448EB211C80319C + i for i in range(4)]


def _tp(trace_id: int, flags: str = "00") -> str:
    return f"00-{trace_id:032x}-b7ad6b7169203331-{flags}"


class Scope(DroppedScope):
    """As the consumer's: a scope type of its own (the span's parent is a traceparent)."""

    __slots__ = ()


def _on_a_thread(body: Callable[[], object]) -> object:
    out: list = []

    def run() -> None:
        try:
            out.append(body())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _current_ids() -> tuple[int, int]:
    sctx = trace.get_current_span().get_span_context()
    return sctx.trace_id, sctx.span_id


@pytest.fixture(params=["always_off", "parentbased_always_off"])
def drops(request, monkeypatch):
    sampler = {"always_off": sampling.ALWAYS_OFF, "parentbased_always_off": sampling.DEFAULT_OFF}[request.param]
    monkeypatch.setattr(propagation, "_DROPS", propagation._dropping_sampler(TracerProvider(sampler=sampler)))
    return propagation._DROPS


def test_each_message_is_its_own_span_on_the_one_object_and_the_thread_is_in_no_trace_between(drops) -> None:
    def body():
        seen, objects = [], set()
        for t in TRACES:
            scope = enter_scoped(Scope, _tp(t))
            objects.add(id(scope.span))
            assert trace.get_current_span() is scope.span and not scope.span.is_recording()
            seen.append(_current_ids())
            assert propagation.traceparent_of() == _tp(t)[:36] + f"{seen[-1][1]:016x}-00"
            scope.exit()
            assert not trace.get_current_span().get_span_context().is_valid
            assert propagation.traceparent_of() is None
        return seen, objects

    seen, objects = _on_a_thread(body)
    assert [trace_id for trace_id, _ in seen] == TRACES
    assert len({span_id for _, span_id in seen}) == len(TRACES)  # a span id of its own each time
    assert len(objects) == 1  # and one span object for all of them


@pytest.mark.parametrize("keep", ["the span", "the context", "a child context"])
def test_what_a_listener_kept_keeps_its_message_s_trace(drops, keep) -> None:
    def body():
        scope = enter_scoped(Scope, _tp(TRACES[0]))
        asked = _current_ids()
        kept = {"the span": trace.get_current_span,
                "the context": otel_context.get_current,
                "a child context": lambda: baggage.set_baggage("tenant", "a")}[keep]()
        scope.exit()
        for t in TRACES[1:]:
            later = enter_scoped(Scope, _tp(t))
            assert _current_ids()[0] == t
            later.exit()
        span = kept if keep == "the span" else trace.get_current_span(kept)
        return asked, span.get_span_context()

    asked, after = _on_a_thread(body)
    assert (after.trace_id, after.span_id) == asked


def test_a_copy_of_the_context_never_sees_another_message(drops) -> None:
    """asyncio's call_soon_threadsafe runs its callback in a copy of the listener's context: the callback
    sees the message's trace while the listener runs, and no trace (never a later message's) after."""
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever)
    loop_thread.start()
    try:
        def body():
            seen = []
            scope = enter_scoped(Scope, _tp(TRACES[0]))
            copy = contextvars.copy_context()
            during = asyncio.run_coroutine_threadsafe(asyncio.sleep(0, _current_ids()), loop)
            inside_ids = _current_ids()
            seen.append(during.result(5))
            scope.exit()
            for t in TRACES[1:]:
                later = enter_scoped(Scope, _tp(t))
                seen.append(copy.run(_current_ids))
                later.exit()
            return inside_ids, seen

        inside, seen = _on_a_thread(body)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(5)
        loop.close()
    assert seen[0] == inside
    assert all(trace_id in (0, TRACES[0]) for trace_id, _ in seen[1:]), seen


def test_a_span_entered_inside_another_is_one_of_its_own(drops) -> None:
    def body():
        outer = enter_scoped(Scope, _tp(TRACES[0]))
        outer_ids = _current_ids()
        inner = enter_scoped(Scope, _tp(TRACES[1]))
        assert inner is not outer and _current_ids()[0] == TRACES[1]
        inner.exit()
        assert _current_ids() == outer_ids
        outer.exit()
        return _current_ids()

    assert _on_a_thread(body) == (0, 0)


def test_a_thread_with_a_context_of_its_own_gets_it_back(drops) -> None:
    def body():
        token = otel_context.attach(baggage.set_baggage("tenant", "a"))
        span = enter_scoped(Scope, _tp(TRACES[0]))
        assert not isinstance(span, DroppedScope)  # enter_dropped's span: it restores what was there
        assert _current_ids()[0] == TRACES[0] and baggage.get_baggage("tenant") == "a"
        span.exit()
        assert trace.get_current_span() is trace.INVALID_SPAN and baggage.get_baggage("tenant") == "a"
        otel_context.detach(token)
        return True

    assert _on_a_thread(body)


def test_a_sampled_parent_is_left_to_the_sdk_and_the_scope_goes_on(drops) -> None:
    def body():
        first = enter_scoped(Scope, _tp(TRACES[0], "01"))
        if first is not None:
            first.exit()
        second = enter_scoped(Scope, _tp(TRACES[1]))
        ids = _current_ids()
        second.exit()
        return first is None, ids[0]

    left_to_sdk, trace_id = _on_a_thread(body)
    assert left_to_sdk == (not drops.sampled_too)
    assert trace_id == TRACES[1]
