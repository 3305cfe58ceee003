"""The txn-checker's spans: one ``check <real topic>`` (CLIENT) per half message it asks a broker to check.

The span is a child of the half message's ``traceparent`` (its producer's
send) and its context goes in the CHECK_HALF_MESSAGE header: the broker's
handling is its child, and the producer's own ``check`` span links to the
broker's, so the whole check-back stays in the transaction's trace. The span
ends with the broker's answer and names its outcome.
"""

from __future__ import annotations

from opentelemetry.trace import Span, SpanKind, StatusCode

from rocketmesh.model.message import MessageConst, MessageExt
from rocketmesh.telemetry import semconv as sc
from rocketmesh.telemetry.propagation import TRACEPARENT, span_context_of, start_span, traceparent_of, tracing_enabled

#: ``messaging.operation.name`` of a check-back (its type is ``settle``: it leads to the transaction's end).
CHECK = "check"


def start_check(half: MessageExt, group: str, broker_addr: str) -> tuple[Span | None, str | None]:
    """Start the check span of ``half``; returns it and the ``traceparent`` for the request header
    (None, None when tracing is off or the half message carries no trace)."""
    if not tracing_enabled():
        return None, None
    props = half.properties
    parent = props.get(TRACEPARENT)
    if span_context_of(parent) is None:
        return None, None
    topic = props.get(MessageConst.REAL_TOPIC, half.topic)
    span = start_span(sc.span_name(CHECK, topic), SpanKind.CLIENT, parent)
    if span.is_recording():
        attrs = {**sc.messaging_attributes(sc.OperationType.SETTLE.value, CHECK, topic),
                 sc.ROCKETMQ_CLIENT_GROUP: group, sc.ROCKETMQ_MESSAGE_TYPE: sc.MessageType.TRANSACTION.value,
                 **sc.server_attributes(broker_addr)}
        uniq = props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if uniq:
            attrs[sc.MESSAGE_ID] = uniq
        span.set_attributes(attrs)
    return span, traceparent_of(span)


def end_check(span: Span | None, outcome: str | None = None, failure: str | None = None) -> None:
    """End a check span with the broker's ``outcome``, or as failed (``failure`` says why)."""
    if span is None:
        return
    if span.is_recording():
        if outcome is not None:
            span.set_attribute(sc.ROCKETMQ_CHECK_OUTCOME, outcome)
        if failure is not None:
            span.set_status(StatusCode.ERROR, failure)
            span.set_attribute(sc.ERROR_TYPE, failure.split(":", 1)[0])
    span.end()
