"""A listener call's process span under an SDK whose sampler drops it (always_off, parentbased_always_off):
the listener runs in its own message's trace with a span id of its own, whatever it kept of that span or its
context keeps that trace after the thread went on to later messages, and the consume thread gets its own
context back after each call. Each case runs on a thread of its own, as a consume thread does."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable

import pytest
from opentelemetry import baggage, context as otel_context, trace
from opentelemetry.sdk.trace import TracerProvider, sampling

from rocketmesh.client.trace import tracing
from rocketmesh.model.message import MessageExt, MessageQueue
from rocketmesh.telemetry import propagation

TRACES = [0x0AF7651916CD43DD8448EB211C80319C + i for i in range(4)]
MQ = MessageQueue("T", "b", 0)


def _tp(trace_id: int, flags: str = "00") -> str:
    return f"00-{trace_id:032x}-b7ad6b7169203331-{flags}"


def _pulled(traceparent: str) -> MessageExt:
    """A message as a pull decodes it: properties still raw, the traceparent among them."""
    raw = f"TAGS\x01a\x02traceparent\x01{traceparent}\x02UNIQ_KEY\x01ID1".encode()
    return MessageExt("T", b"x", None, 0, 0, 0, 0, 0, 0, 0, "h", 0, "h", 0, 0, 0, None, raw_properties=raw)


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
    """The client as under a global SDK provider with this sampler (the test process's global provider may
    be another one already, and cannot be replaced)."""
    sampler = {"always_off": sampling.ALWAYS_OFF, "parentbased_always_off": sampling.DEFAULT_OFF}[request.param]
    provider = TracerProvider(sampler=sampler)
    monkeypatch.setattr(propagation, "_enabled", True)
    monkeypatch.setattr(propagation, "_TRACER", provider.get_tracer("rocketmesh"))
    monkeypatch.setattr(propagation, "_DROPS", propagation.sure_drops(provider))
    return propagation._DROPS


def test_each_listener_call_is_in_its_message_s_trace_with_a_span_id_of_its_own(drops) -> None:
    def body():
        seen = []
        for t in TRACES:
            pt = tracing.start_process("g", MQ, [_pulled(_tp(t))])
            assert not trace.get_current_span().is_recording()
            seen.append(_current_ids())
            assert tracing.current_traceparent() == _tp(t)[:36] + f"{seen[-1][1]:016x}-00"
            pt.finish()
            assert trace.get_current_span() is trace.INVALID_SPAN  # the thread is back outside any trace
        return seen

    seen = _on_a_thread(body)
    assert [trace_id for trace_id, _ in seen] == TRACES
    assert len({span_id for _, span_id in seen} | {0xB7AD6B7169203331}) == len(TRACES) + 1


def _later_messages() -> None:
    for t in TRACES[1:]:
        later = tracing.start_process("g", MQ, [_pulled(_tp(t))])
        assert _current_ids()[0] == t
        later.finish()


@pytest.mark.parametrize("keep", ["the span", "the context", "a child context"])
def test_what_a_listener_kept_keeps_its_message_s_trace(drops, keep) -> None:
    def body():
        pt = tracing.start_process("g", MQ, [_pulled(_tp(TRACES[0]))])
        kept = {"the span": trace.get_current_span,
                "the context": otel_context.get_current,
                "a child context": lambda: baggage.set_baggage("tenant", "a")}[keep]()
        pt.finish()
        _later_messages()
        span = kept if keep == "the span" else trace.get_current_span(kept)
        return span.get_span_context()

    after = _on_a_thread(body)
    assert after.trace_id == TRACES[0] and after.span_id not in (0, 0xB7AD6B7169203331)


OWN_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("listener_var")


@pytest.mark.parametrize("then", ["nothing", "sets a variable of its own", "attaches and detaches a context"])
def test_a_copy_of_the_context_keeps_its_message_s_trace(drops, then) -> None:
    """A listener hands work on to asyncio (call_soon_threadsafe runs it in a copy of the listener's
    context) and returns; the work runs after the thread went on to later messages, and sees its own
    message's trace. The same after the listener changed its context."""
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever)
    loop_thread.start()
    try:
        go = threading.Event()

        async def handed_on() -> tuple[int, int]:
            await loop.run_in_executor(None, go.wait, 5)
            return _current_ids()

        def body():
            pt = tracing.start_process("g", MQ, [_pulled(_tp(TRACES[0]))])
            inside = _current_ids()
            work = asyncio.run_coroutine_threadsafe(handed_on(), loop)
            copy = contextvars.copy_context()
            if then == "sets a variable of its own":
                OWN_VAR.set("x")
            elif then == "attaches and detaches a context":
                otel_context.detach(otel_context.attach(baggage.set_baggage("tenant", "a")))
            pt.finish()
            _later_messages()
            go.set()
            return inside, work.result(5), copy.run(_current_ids)

        inside, in_work, in_copy = _on_a_thread(body)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(5)
        loop.close()
    assert inside[0] == TRACES[0]
    assert in_work == inside and in_copy == inside


def test_a_thread_with_a_context_of_its_own_keeps_it(drops) -> None:
    def body():
        token = otel_context.attach(baggage.set_baggage("tenant", "a"))
        pt = tracing.start_process("g", MQ, [_pulled(_tp(TRACES[0]))])
        assert _current_ids()[0] == TRACES[0] and baggage.get_baggage("tenant") == "a"
        pt.finish()
        assert trace.get_current_span() is trace.INVALID_SPAN and baggage.get_baggage("tenant") == "a"
        otel_context.detach(token)
        return True

    assert _on_a_thread(body)


def test_a_sampled_parent_is_followed_as_the_sampler_says(drops) -> None:
    """parentbased_always_off records the child of a sampled parent; always_off does not."""
    def body():
        first = tracing.start_process("g", MQ, [_pulled(_tp(TRACES[0], "01"))])
        recording = trace.get_current_span().is_recording()
        first_trace = _current_ids()[0]
        first.finish()
        second = tracing.start_process("g", MQ, [_pulled(_tp(TRACES[1]))])
        ids = _current_ids()
        second.finish()
        return recording, first_trace, ids[0]

    recording, first_trace, second_trace = _on_a_thread(body)
    assert recording == drops.records_sampled_children
    assert (first_trace, second_trace) == (TRACES[0], TRACES[1])


@pytest.mark.parametrize("traceparent", ["absent", "00-nothex", "00-" + "0" * 32 + "-b7ad6b7169203331-00"])
def test_a_message_without_a_usable_traceparent_is_a_trace_of_its_own(drops, traceparent) -> None:
    def body():
        msg = _pulled(_tp(TRACES[0])) if traceparent == "absent" else _pulled(traceparent)
        if traceparent == "absent":
            msg.properties = {}
        seen = set()
        for _ in range(2):
            pt = tracing.start_process("g", MQ, [msg])
            seen.add(_current_ids())
            pt.finish()
        return seen

    seen = _on_a_thread(body)
    assert len({trace_id for trace_id, _ in seen}) == 2 and all(t and s for t, s in seen)
