"""The client's span helpers in processes of their own, since a test process may have installed an SDK (the
global provider cannot be unset): without an SDK nothing is started or written; under an SDK that samples
nothing a listener still runs inside the message's trace."""

from __future__ import annotations

import subprocess
import sys

import pytest

NO_SDK = """
from rocketmesh.client.trace import tracing
from rocketmesh.model.message import Message, MessageExt, MessageQueue
msg = Message("T", "x")
assert not tracing.tracing_enabled()
assert tracing.start_send("g", "T", [msg]) is None
assert tracing.start_settle("g", msg) is None
assert tracing.start_receive("g", MessageQueue("T", "b", 0)) is None
assert tracing.current_traceparent() is None
assert msg.properties == {}, msg.properties
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
import time
from rocketmesh.telemetry.propagation import RECHECK_S
time.sleep(RECHECK_S)  # a provider installed after a "no" is seen within RECHECK_S
assert tracing.tracing_enabled()
st = tracing.start_send("g", "T", [msg])
assert msg.properties["traceparent"] == st.traceparent
st.finish()
print("ok")
"""


def test_without_a_tracer_provider_nothing_is_started_or_written() -> None:
    out = subprocess.run([sys.executable, "-c", NO_SDK], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


SAMPLED_OUT = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rocketmesh.client.trace import tracing
from rocketmesh.model.message import MessageExt, MessageQueue

sampler = {"always_off": sampling.ALWAYS_OFF, "parentbased_always_off": sampling.DEFAULT_OFF}[sys.argv[1]]
provider = TracerProvider(sampler=sampler)
exported = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(exported))
trace.set_tracer_provider(provider)
TRACE = "0af7651916cd43dd8448eb211c80319c"

def pulled(flags):
    # As a pull decodes it: properties still raw, the traceparent among them.
    raw = f"TAGS\\x01a\\x02traceparent\\x0100-{TRACE}-b7ad6b7169203331-{flags}\\x02UNIQ_KEY\\x01ID1".encode()
    return MessageExt("T", b"x", None, 0, 0, 0, 0, 0, 0, 0, "h", 0, "h", 0, 0, 0, None, raw_properties=raw)

mq = MessageQueue("T", "b", 0)
for flags in ("00", "02"):
    pt = tracing.start_process("g", mq, [pulled(flags)])
    inside = trace.get_current_span().get_span_context()
    assert not trace.get_current_span().is_recording()
    assert f"{inside.trace_id:032x}" == TRACE and inside.span_id not in (0, 0xb7ad6b7169203331)
    assert int(inside.trace_flags) == int(flags, 16)  # not sampled; the random-id flag kept
    assert tracing.current_traceparent() == f"00-{TRACE}-{inside.span_id:016x}-{flags}"
    pt.failed("RECONSUME_LATER")
    pt.finish()
    # The call's span ends with it: the thread is back outside any trace.
    assert trace.get_current_span() is trace.INVALID_SPAN
pt = tracing.start_process("g", mq, [pulled("01")])  # a sampled parent
assert trace.get_current_span().is_recording() == (sys.argv[1] == "parentbased_always_off")
pt.finish()
assert len(exported.get_finished_spans()) == (sys.argv[1] == "parentbased_always_off")
print("ok")
"""


@pytest.mark.parametrize("sampler", ["always_off", "parentbased_always_off"])
def test_a_sampled_out_process_span_still_carries_the_message_s_trace(sampler: str) -> None:
    """Under an SDK that samples nothing, a listener still runs inside the message's trace (its logs and its
    own sends carry that trace id), though no span is recorded; a sampled parent is still followed."""
    out = subprocess.run([sys.executable, "-c", SAMPLED_OUT, sampler], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
