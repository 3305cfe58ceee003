"""The client SDK's spans: a producer's send, a transaction's settling and check, a consumer's processing
of a message and a PullConsumer's receiving.

Only the OpenTelemetry API and the global tracer provider are used: the
application decides whether anything is recorded (it installs an SDK, or runs
under ``opentelemetry-instrument``). Until a tracer provider is installed
:func:`~rocketmesh.telemetry.propagation.tracing_enabled` is False and every
``start_*`` here returns None, so the hot paths pay one cheap check per call and nothing else: no span, no attribute,
no ``traceparent`` written. Attributes are built only for recording spans; a
span that is sampled out still hands its context on, so the decision travels
with the message (W3C).

A send's context goes into each message's ``traceparent`` property (stored
with the message: a consumer joins the trace hours later) and into the
request header (the broker's span is its child).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from opentelemetry.trace import Link, Span, SpanKind, StatusCode

from rocketmesh.model.message import Message, MessageConst, MessageExt, MessageQueue
from rocketmesh.telemetry import semconv as sc
from rocketmesh.telemetry.propagation import (
    ROOT,
    TRACEPARENT,
    DroppedSpan,
    enter_dropped,
    make_current,
    restore,
    span_context_of,
    start_span,
    traceparent_of,
    tracing_enabled,
)

#: Span event of a send attempt that failed and was retried within the same send.
ATTEMPT_FAILED_EVENT = "send_attempt_failed"

_TAGS = MessageConst.TAGS
_KEYS = MessageConst.KEYS
_DELAY = MessageConst.DELAY_TIME_LEVEL
_DELAYED = (MessageConst.DELAY_TIME_LEVEL, MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_MS)
_TRAN_PREPARED = MessageConst.TRANSACTION_PREPARED
_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_SEND = sc.OperationType.SEND.value
_RECEIVE = sc.OperationType.RECEIVE.value
_PROCESS = sc.OperationType.PROCESS.value
_SETTLE = sc.OperationType.SETTLE.value

# -- common attributes ---------------------------------------------------------------------------------


def _message_attrs(attrs: dict[str, Any], props: dict[str, str]) -> None:
    tag = props.get(_TAGS)
    if tag:
        attrs[sc.ROCKETMQ_MESSAGE_TAG] = tag
    keys = props.get(_KEYS)
    if keys:
        attrs[sc.ROCKETMQ_MESSAGE_KEYS] = keys.split(MessageConst.KEY_SEPARATOR)


def message_type(props: dict[str, str], ordered: bool) -> sc.MessageType:
    """``messaging.rocketmq.message.type`` of a message with ``props``, sent to a chosen queue when ``ordered``."""
    if props.get(_TRAN_PREPARED) == "true":
        return sc.MessageType.TRANSACTION
    for name in _DELAYED:
        if name in props:
            return sc.MessageType.DELAY
    return sc.MessageType.FIFO if ordered else sc.MessageType.NORMAL


_TP_KEY = TRACEPARENT.encode() + b"\x01"


def _traceparent_in(msg: MessageExt) -> str | None:
    """``msg.properties.get("traceparent")`` without decoding every property of a message whose properties
    nobody has read yet (a pulled message keeps them raw until then): a consumer's span reads only this one."""
    try:
        props = msg._properties
        raw = msg._raw_properties
    except AttributeError:  # a Message, not one pulled
        return msg.properties.get(TRACEPARENT)
    if props is not None:
        return props.get(TRACEPARENT)
    for part in (raw[1], raw[0]) if isinstance(raw, tuple) else (raw,):  # the later part wins, as in properties
        if type(part) is not bytes:
            part = bytes(part)
        i = part.rfind(_TP_KEY)
        while i > 0 and part[i - 1] != 2:  # a longer name that ends with ours: look further back
            i = part.rfind(_TP_KEY, 0, i)
        if i >= 0:
            start = i + len(_TP_KEY)
            end = part.find(b"\x02", start)
            return part[start:end if end >= 0 else len(part)].decode()
    return None


def _fail(span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute(sc.ERROR_TYPE, type(exc).__qualname__)
    span.set_status(StatusCode.ERROR, str(exc))


# -- producer --------------------------------------------------------------------------------------------


class SendTrace:
    """The span of one send call (one message, or one batch), from before the message is encoded until its
    answer; retries inside the call stay in it (each failed attempt is an event)."""

    __slots__ = ("span", "traceparent", "recording")

    def __init__(self, span: Span, traceparent: str | None) -> None:
        self.span = span
        #: The span's context as the messages and the request header carry it (None when invalid).
        self.traceparent = traceparent
        self.recording = span.is_recording()

    def attempt(self, addr: str, mq: MessageQueue) -> None:
        """An attempt goes to ``mq`` on the broker at ``addr``."""
        if self.recording:
            attrs = sc.server_attributes(addr)
            attrs[sc.DESTINATION_PARTITION_ID] = str(mq.queue_id)
            self.span.set_attributes(attrs)

    def attempt_failed(self, addr: str, exc: BaseException) -> None:
        """An attempt failed and the send goes on (another attempt, another broker)."""
        if self.recording:
            attrs = sc.server_attributes(addr)
            attrs[sc.ERROR_TYPE] = type(exc).__qualname__
            attrs["exception.message"] = str(exc)
            self.span.add_event(ATTEMPT_FAILED_EVENT, attrs)

    def finish(self, exc: BaseException | None = None) -> None:
        """End the span: sent, or failed with ``exc``."""
        if exc is not None and self.recording:
            _fail(self.span, exc)
        self.span.end()

    def finish_future(self, fut: Future[Any]) -> None:
        """End the span as ``fut`` (a send's Future) completed (a done-callback)."""
        exc = None if fut.cancelled() else fut.exception()
        self.finish(exc)

    def __enter__(self) -> SendTrace:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Around a sync send: the span ends with the block, failed when it raised."""
        self.finish(exc)


class _Untraced:
    """Stands in for a SendTrace around a sync send when tracing is off (``with st or UNTRACED:``)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None


UNTRACED = _Untraced()


def start_send(group: str, topic: str, msgs: Sequence[Message], *, ordered: bool = False,
               batch: bool = False) -> SendTrace | None:
    """Start the ``send <topic>`` span (PRODUCER, a child of the current span) of one send call and write its
    context into each message's ``traceparent`` property; call before the messages are encoded. None when
    tracing is off."""
    if not tracing_enabled():
        return None
    span = start_span(sc.span_name(_SEND, topic), SpanKind.PRODUCER)
    tp = traceparent_of(span)
    if tp is not None:
        for m in msgs:
            m.properties[TRACEPARENT] = tp
    st = SendTrace(span, tp)
    if st.recording:
        attrs = sc.messaging_attributes(_SEND, _SEND, topic)
        attrs[sc.ROCKETMQ_CLIENT_GROUP] = group
        if batch:
            attrs[sc.BATCH_MESSAGE_COUNT] = len(msgs)
        elif msgs:
            msg = msgs[0]
            props = msg.properties
            attrs[sc.ROCKETMQ_MESSAGE_TYPE] = message_type(props, ordered).value
            uniq = props.get(_UNIQ_KEY)
            if uniq:
                attrs[sc.MESSAGE_ID] = uniq
            attrs[sc.MESSAGE_BODY_SIZE] = len(msg.body)
            _message_attrs(attrs, props)
            delay = props.get(_DELAY)
            if delay:
                attrs[sc.ROCKETMQ_DELAY_TIME_LEVEL] = int(delay)
        span.set_attributes(attrs)
    return st


# -- transactions ----------------------------------------------------------------------------------------


class SettleTrace:
    """The span around settling a transaction: the local transaction (or the check) runs with it current,
    and the END_TRANSACTION request carries it."""

    __slots__ = ("span", "traceparent", "_token")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.traceparent = traceparent_of(span)
        self._token = make_current(span)

    def finish(self, state: str | None, exc: BaseException | None = None) -> None:
        """End the span with the transaction's outcome (``state``), or the error that kept it from being sent."""
        span = self.span
        if span.is_recording():
            if state is not None:
                span.set_attribute(sc.ROCKETMQ_TRANSACTION_STATE, state)
            if exc is not None:
                _fail(span, exc)
        restore(self._token)
        span.end()


def start_settle(group: str, msg: Message | MessageExt, *, check: bool = False,
                 caller: str | None = None) -> SettleTrace | None:
    """Start and make current the span of settling ``msg``'s transaction, parented to the message's
    ``traceparent`` (its send span): ``settle <topic>`` (CLIENT) after the send, or ``check <topic>``
    (CONSUMER) for a check the broker pushed, linked to the pusher's span (``caller``, a traceparent).
    None when tracing is off."""
    if not tracing_enabled():
        return None
    props = msg.properties
    links = None
    if caller:
        sctx = span_context_of(caller)
        if sctx is not None:
            links = [Link(sctx)]
    name = "check" if check else _SETTLE
    span = start_span(sc.span_name(name, msg.topic), SpanKind.CONSUMER if check else SpanKind.CLIENT,
                      props.get(TRACEPARENT), links)
    if span.is_recording():
        attrs = sc.messaging_attributes(_SETTLE, name, msg.topic)
        attrs[sc.ROCKETMQ_CLIENT_GROUP] = group
        attrs[sc.ROCKETMQ_MESSAGE_TYPE] = sc.MessageType.TRANSACTION.value
        uniq = props.get(_UNIQ_KEY)
        if uniq:
            attrs[sc.MESSAGE_ID] = uniq
        span.set_attributes(attrs)
    return SettleTrace(span)


# -- consumers -------------------------------------------------------------------------------------------


class ListenerTrace(Protocol):
    """What a consume service does with the process span of a listener call (:func:`start_process`)."""

    def raised(self, exc: BaseException) -> None: ...

    def failed(self, status: Any) -> None: ...

    def finish(self) -> None: ...


class ProcessTrace:
    """The ``process <topic>`` span of one listener call, current while it runs (user spans nest under it)
    and while failed messages are sent back."""

    __slots__ = ("span", "_token", "recording", "_errored")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.recording = span.is_recording()
        self._token = make_current(span)
        #: The span's status is ERROR already (the API's Span does not show its status).
        self._errored = False

    def raised(self, exc: BaseException) -> None:
        """The listener raised ``exc`` (it counts as a failure)."""
        if self.recording:
            _fail(self.span, exc)
            self._errored = True

    def failed(self, status: Any) -> None:
        """The listener returned ``status``, which is not a success (the messages will be consumed again)."""
        if self.recording and not self._errored:
            self._errored = True
            self.span.set_attribute(sc.ERROR_TYPE, str(getattr(status, "value", status)))
            self.span.set_status(StatusCode.ERROR, f"the listener returned {getattr(status, 'value', status)}")

    def finish(self) -> None:
        """End the span and restore the context the consume thread had."""
        restore(self._token)
        self.span.end()


class _SampledOutProcessSpan(DroppedSpan):
    """The process span of one listener call on one message when the sampler drops it: the span and its
    ListenerTrace in one object. Its parent is the message, whose ``traceparent`` is looked up only if
    anyone asks for the span's context."""

    @staticmethod
    def traceparent_in(parent: Any) -> str | None:
        return _traceparent_in(parent)
    recording = False

    @property
    def span(self) -> Span:
        return self

    def raised(self, exc: BaseException) -> None:
        """Nothing is recorded."""

    def failed(self, status: Any) -> None:
        """Nothing is recorded."""

    #: Restore the context the consume thread had.
    finish = DroppedSpan.exit


def start_process(group: str, mq: MessageQueue, msgs: Sequence[MessageExt]) -> ListenerTrace | None:
    """Start and make current the ``process <topic>`` span (CONSUMER) of a listener call on ``msgs`` (pulled
    from ``mq``; their topic is the one the listener sees). One message: the span is a child of its
    ``traceparent`` (it joins the producer's trace). Several: a new trace with a link to each. None when
    tracing is off."""
    if not tracing_enabled() or not msgs:
        return None
    first = msgs[0]
    topic = first.topic
    if len(msgs) == 1:
        # A span the sampler drops for sure: only made current, the message's traceparent read if anyone asks.
        dropped = enter_dropped(_SampledOutProcessSpan, first)
        if dropped is not None:
            return dropped
        span = start_span(sc.span_name(_PROCESS, topic), SpanKind.CONSUMER, _traceparent_in(first))
    else:
        links = []
        for m in msgs:
            sctx = span_context_of(_traceparent_in(m))
            if sctx is not None:
                links.append(Link(sctx))
        # A batch has many parents, so it starts a trace of its own (not the consume thread's context).
        span = start_span(sc.span_name(_PROCESS, topic), SpanKind.CONSUMER, ROOT, links)
    if span.is_recording():
        attrs = sc.messaging_attributes(_PROCESS, _PROCESS, topic)
        attrs.update({
            sc.DESTINATION_PARTITION_ID: str(mq.queue_id),
            sc.CONSUMER_GROUP_NAME: group,
            sc.ROCKETMQ_CLIENT_GROUP: group,
        })
        if len(msgs) == 1:
            props = first.properties
            attrs[sc.MESSAGE_ID] = first.unique_key or first.msg_id
            attrs[sc.MESSAGE_BODY_SIZE] = len(first.body)
            _message_attrs(attrs, props)
        else:
            attrs[sc.BATCH_MESSAGE_COUNT] = len(msgs)
        span.set_attributes(attrs)
    return ProcessTrace(span)


class ReceiveTrace:
    """The ``receive <topic>`` span of one pull: from the request until its answer (which may be held by the
    broker's long polling)."""

    __slots__ = ("span", "traceparent")

    def __init__(self, span: Span) -> None:
        self.span = span
        #: What the PULL_MESSAGE request header carries.
        self.traceparent = traceparent_of(span)

    def finish(self, msgs: Sequence[MessageExt] | None, exc: BaseException | None = None) -> None:
        """End the span with what the pull brought (a link to each message's send), or its error."""
        span = self.span
        if span.is_recording():
            if exc is not None:
                _fail(span, exc)
            n = len(msgs) if msgs else 0
            span.set_attribute(sc.BATCH_MESSAGE_COUNT, n)
            for m in msgs or ():
                sctx = span_context_of(_traceparent_in(m))
                if sctx is not None:
                    span.add_link(sctx, {sc.MESSAGE_ID: m.unique_key or m.msg_id})
        span.end()


def start_receive(group: str, mq: MessageQueue, addr: str | None = None) -> ReceiveTrace | None:
    """Start the ``receive <topic>`` span (CLIENT) of a pull from ``mq``; None when tracing is off."""
    if not tracing_enabled():
        return None
    span = start_span(sc.span_name(_RECEIVE, mq.topic), SpanKind.CLIENT)
    if span.is_recording():
        attrs = sc.messaging_attributes(_RECEIVE, "pull", mq.topic)
        attrs.update({
            sc.DESTINATION_PARTITION_ID: str(mq.queue_id),
            sc.CONSUMER_GROUP_NAME: group,
            sc.ROCKETMQ_CLIENT_GROUP: group,
        })
        if addr:
            attrs.update(sc.server_attributes(addr))
        span.set_attributes(attrs)
    return ReceiveTrace(span)


def current_traceparent() -> str | None:
    """The current span's ``traceparent`` for a request header; None when tracing is off or no span is current."""
    return traceparent_of() if tracing_enabled() else None
