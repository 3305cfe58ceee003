"""A consume thread's sampled-out process spans (propagation.enter_scoped): one span and one context used
again from message to message, and never changed under anyone who kept them or a copy of them. Each case
runs on a thread of its own, which starts (as a consume thread does) with no context."""

from __future__ import annotations

import asyncio
import contextvars
import gc
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


def test_each_message_is_its_own_span_on_the_one_object_until_the_next(drops) -> None:
    def body():
        seen, objects = [], set()
        for t in TRACES:
            scope = enter_scoped(Scope, _tp(t))
            objects.add(id(scope.span))
            assert trace.get_current_span() is scope.span and not scope.span.is_recording()
            seen.append(_current_ids())
            assert propagation.traceparent_of() == _tp(t)[:36] + f"{seen[-1][1]:016x}-00"
            scope.exit()
            assert _current_ids() == seen[-1]  # the span lasts until the thread's next one
        return seen, objects

    seen, objects = _on_a_thread(body)
    assert [trace_id for trace_id, _ in seen] == TRACES
    assert len({span_id for _, span_id in seen}) == len(TRACES)  # a span id of its own each time
    assert len(objects) == 1  # and one span object for all of them


def _later_messages() -> None:
    for t in TRACES[1:]:
        later = enter_scoped(Scope, _tp(t))
        assert _current_ids()[0] == t
        later.exit()


@pytest.mark.parametrize("keep", ["the span", "the context", "a child context"])
def test_what_a_listener_kept_keeps_its_message_s_trace(drops, keep) -> None:
    def body():
        scope = enter_scoped(Scope, _tp(TRACES[0]))
        asked = _current_ids()
        kept = {"the span": trace.get_current_span,
                "the context": otel_context.get_current,
                "a child context": lambda: baggage.set_baggage("tenant", "a")}[keep]()
        scope.exit()
        _later_messages()
        span = kept if keep == "the span" else trace.get_current_span(kept)
        return asked, span.get_span_context()

    asked, after = _on_a_thread(body)
    assert (after.trace_id, after.span_id) == asked


OWN_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("listener_var")


@pytest.mark.parametrize("then", ["nothing", "sets a variable of its own", "attaches and detaches a context"])
def test_a_copy_of_the_context_keeps_its_message_s_trace(drops, then) -> None:
    """A listener hands work on to asyncio (call_soon_threadsafe runs it in a copy of the listener's
    context) and returns; the work runs after the thread went on to later messages, and sees its own
    message's trace, as it would with the SDK's spans. The same after the listener changed its context."""
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever)
    loop_thread.start()
    try:
        go = threading.Event()

        async def handed_on() -> tuple[int, int]:
            await loop.run_in_executor(None, go.wait, 5)
            return _current_ids()

        def body():
            scope = enter_scoped(Scope, _tp(TRACES[0]))
            inside = _current_ids()
            work = asyncio.run_coroutine_threadsafe(handed_on(), loop)
            copy = contextvars.copy_context()
            if then == "sets a variable of its own":
                OWN_VAR.set("x")
            elif then == "attaches and detaches a context":
                otel_context.detach(otel_context.attach(baggage.set_baggage("tenant", "a")))
            scope.exit()
            _later_messages()
            go.set()
            return inside, work.result(5), copy.run(_current_ids)

        inside, in_work, in_copy = _on_a_thread(body)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(5)
        loop.close()
    assert in_work == inside and in_copy == inside


def test_a_listener_that_changed_its_context_leaves_the_next_message_its_own_trace(drops) -> None:
    def body():
        scope = enter_scoped(Scope, _tp(TRACES[0]))
        OWN_VAR.set("x")
        otel_context.detach(otel_context.attach(baggage.set_baggage("tenant", "a")))
        scope.exit()
        _later_messages()  # each in its own trace
        return True

    assert _on_a_thread(body)


def _sharing_var() -> contextvars.ContextVar:
    """A variable that CPython's map of context variables files together with OpenTelemetry's (their first
    hash bits agree), so that a change to another variable leaves their entries shared between old and new map."""
    var = propagation._CONTEXT_VAR
    for i in range(10_000):
        candidate: contextvars.ContextVar[int] = contextvars.ContextVar(f"sharing{i}")

        def layout() -> bool:
            ctx = otel_context.Context({"probe": 1})
            var.set(ctx)
            candidate.set(1)
            (vars_,) = gc.get_referents(contextvars.copy_context())
            (root,) = gc.get_referents(vars_)
            return not any(entry is ctx for entry in gc.get_referents(root))

        if contextvars.Context().run(layout):
            return candidate
    raise AssertionError("no variable shares OpenTelemetry's first hash bits")


@pytest.mark.parametrize("when", ["before the first span", "by an earlier listener"])
def test_a_copy_keeps_its_trace_on_a_thread_whose_variables_could_hide_a_change(drops, when) -> None:
    """With such a variable in the thread's context, a copy and then a change to another variable would not
    show in reference counts: the thread goes on without a scope, one span object per message."""
    sharing = _sharing_var()

    def body():
        if when == "before the first span":
            sharing.set(1)
        else:
            enter_scoped(Scope, _tp(TRACES[-1])).exit()
            sharing.set(1)
        scope = enter_scoped(Scope, _tp(TRACES[0]))
        inside = _current_ids()
        copy = contextvars.copy_context()
        OWN_VAR.set("x")
        scope.exit()
        _later_messages()
        return inside, copy.run(_current_ids)

    inside, in_copy = _on_a_thread(body)
    assert in_copy == inside


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
