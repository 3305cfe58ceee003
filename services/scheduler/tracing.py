"""The scheduler's spans: one ``send <real topic>`` (PRODUCER) per traced message it delivers.

A parked message keeps the ``traceparent`` its producer's send wrote (or, for
a retry, the one its last delivery wrote). Its delivery span is a child of
that context, starts when the scheduler first asks the broker for the re-put
and ends when the broker says it is done. The span's own context travels in the
DELIVER_DUE_MESSAGES body and the broker stores it as the delivered message's
``traceparent``: the consumer that processes it, later, is the delivery's
child, in the producer's trace.

Nothing is kept or started while no SDK is configured.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace import Span, SpanKind, StatusCode

from rocketmesh.model.message import MessageConst, MessageExt
from rocketmesh.model.topics import SCHEDULE_TOPIC
from rocketmesh.telemetry import semconv as sc
from rocketmesh.telemetry.propagation import TRACEPARENT, start_span, traceparent_of

#: ``messaging.operation.name`` of a delivery (its type is ``send``: it writes the message to its topic).
DELIVER = "deliver"
#: Span event of a delivery attempt that did not deliver (the entry is tried again).
ATTEMPT_FAILED_EVENT = "deliver_attempt_failed"


@dataclass(frozen=True)
class ParkedTrace:
    """What a delivery span needs of a parked message, kept instead of the message itself."""

    traceparent: str
    real_topic: str
    message_id: str
    delay_level: int


def parked_trace(msg: MessageExt) -> ParkedTrace | None:
    """The trace of a pulled parked message; None when it carries none (ask only while tracing is on)."""
    props = msg.properties
    tp = props.get(TRACEPARENT)
    if not tp:
        return None
    level = msg.queue_id + 1 if msg.topic == SCHEDULE_TOPIC else 0
    return ParkedTrace(tp, props.get(MessageConst.REAL_TOPIC, msg.topic),
                       props.get(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""), level)


class DeliverySpan:
    """The delivery span of one parked message: started at the first attempt, ended when the broker settles
    the entry; an attempt that fails (or comes before the broker's clock says due) is an event on it, and
    every attempt hands the broker the same context."""

    __slots__ = ("span", "traceparent")

    def __init__(self, span: Span) -> None:
        self.span = span
        #: The context the delivered copy carries (None when the span is invalid: it keeps the one it had).
        self.traceparent = traceparent_of(span)

    def attempt_failed(self, why: str) -> None:
        """An attempt did not deliver; the entry is tried again."""
        if self.span.is_recording():
            self.span.add_event(ATTEMPT_FAILED_EVENT, {sc.ERROR_TYPE: why.split(":", 1)[0], "exception.message": why})

    def end(self, failure: str | None = None) -> None:
        """Delivered, or given up on (``failure`` says why)."""
        if failure is not None and self.span.is_recording():
            self.span.set_status(StatusCode.ERROR, failure)
            self.span.set_attribute(sc.ERROR_TYPE, failure.split(":", 1)[0])
        self.span.end()


def start_delivery(parked: ParkedTrace, group: str, broker_addr: str) -> DeliverySpan:
    """Start the delivery span of one message, a child of its ``traceparent``."""
    span = start_span(sc.span_name(sc.OperationType.SEND.value, parked.real_topic), SpanKind.PRODUCER,
                      parked.traceparent)
    if span.is_recording():
        attrs = {**sc.messaging_attributes(sc.OperationType.SEND.value, DELIVER, parked.real_topic),
                 sc.ROCKETMQ_CLIENT_GROUP: group, sc.ROCKETMQ_MESSAGE_TYPE: sc.MessageType.DELAY.value,
                 **sc.server_attributes(broker_addr)}
        if parked.message_id:
            attrs[sc.MESSAGE_ID] = parked.message_id
        if parked.delay_level:
            attrs[sc.ROCKETMQ_DELAY_TIME_LEVEL] = parked.delay_level
        span.set_attributes(attrs)
    return DeliverySpan(span)
