"""The client's span helpers as pure units: the message type a send is traced as, and the no-SDK path (in a
process of its own, since a test process may have installed an SDK: the global provider cannot be unset)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rocketmesh.client.tracing import message_type
from rocketmesh.model.message import Message, MessageConst
from rocketmesh.telemetry.semconv import MessageType


@pytest.mark.parametrize("msg, ordered, expected", [
    (Message("T", "x"), False, MessageType.NORMAL),
    (Message("T", "x"), True, MessageType.FIFO),
    (Message("T", "x", delay_level=3), False, MessageType.DELAY),
    (Message("T", "x", deliver_at_ms=1), True, MessageType.DELAY),
    (Message("T", "x", delay_ms=10), False, MessageType.DELAY),
    (Message("T", "x", properties={MessageConst.TRANSACTION_PREPARED: "true"}), False, MessageType.TRANSACTION),
])
def test_message_type(msg: Message, ordered: bool, expected: MessageType) -> None:
    assert message_type(msg.properties, ordered) is expected


NO_SDK = """
from rocketmesh.client import tracing
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
