"""The client's span helpers as pure units: the message type a send is traced as (the paths that need a process
of their own, without an SDK or with one that samples nothing, are tests/mesh/test_client_span_processes.py)."""

from __future__ import annotations

import pytest

from rocketmesh.client.trace.tracing import message_type
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
