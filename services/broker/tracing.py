"""The broker's SERVER spans: its handling of sends, pulls, end-transactions, send-backs and check-backs.

Each is a child of the caller's span when the request header carries a
``traceparent`` (the producer's ``send <topic>``, a consumer's pull or
retry), and ends when the answer goes out, which for a durable send or a held
pull is later than the handler's return. With no SDK configured the handlers
run unwrapped but for one check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from rocketmesh.remoting import RemotingCommand, RequestCode, RequestContext, ResponseCode
from rocketmesh.remoting.protocol.command import ONEWAY_FLAG
from rocketmesh.telemetry import semconv
from rocketmesh.telemetry.propagation import (
    DroppedSpan,
    enter_dropped,
    make_current,
    restore,
    start_span,
    tracing_enabled,
)

Handler = Callable[[RemotingCommand, RequestContext], RemotingCommand | None]

#: (operation type, operation name, the ext field naming the topic, the ext field naming the group).
_TRACED: dict[int, tuple[semconv.OperationType, str, str, str | None]] = {
    RequestCode.SEND_MESSAGE: (semconv.OperationType.SEND, "send", "topic", "producerGroup"),
    RequestCode.SEND_MESSAGE_V2: (semconv.OperationType.SEND, "send", "b", "a"),
    RequestCode.SEND_BATCH_MESSAGE: (semconv.OperationType.SEND, "send", "topic", "producerGroup"),
    RequestCode.PULL_MESSAGE: (semconv.OperationType.RECEIVE, "receive", "topic", "consumerGroup"),
    RequestCode.CONSUMER_SEND_MSG_BACK: (semconv.OperationType.SETTLE, "send_back", "originTopic", "group"),
    RequestCode.END_TRANSACTION: (semconv.OperationType.SETTLE, "end_transaction", "", "producerGroup"),
    RequestCode.CHECK_HALF_MESSAGE: (semconv.OperationType.SETTLE, "check", "", None),
}

#: Answers that are not failures of the request (a pull that found nothing yet, and the like).
_NOT_ERRORS = frozenset({ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY,
                         ResponseCode.PULL_OFFSET_MOVED})


def traced(code: int, fn: Handler) -> Handler:
    """``fn`` inside a SERVER span when ``code`` is one the broker traces (else ``fn`` itself)."""
    what = _TRACED.get(code)
    if what is None:
        return fn
    op_type, op_name, topic_key, group_key = what

    def handler(req: RemotingCommand, ctx: RequestContext) -> RemotingCommand | None:
        if not tracing_enabled():
            return fn(req, ctx)
        dropped = enter_dropped(DroppedSpan, req.traceparent)
        if dropped is not None:
            # Sampled out: nothing to record or end, only the context to hand on (logs, a check-back).
            try:
                return fn(req, ctx)
            finally:
                dropped.exit()
        ext: Any = req.ext if isinstance(req.ext, dict) else {}
        topic = ext.get(topic_key, "") if topic_key else ""
        span = start_span(semconv.span_name(op_type.value, topic) if topic else op_name, SpanKind.SERVER,
                          req.traceparent)
        if span.is_recording():
            attrs = semconv.messaging_attributes(op_type.value, op_name, str(topic))
            attrs[semconv.SERVER_ADDRESS] = ctx.server.address
            group = ext.get(group_key) if group_key else None
            if group:
                attrs[semconv.CONSUMER_GROUP_NAME if op_type is not semconv.OperationType.SEND
                      else semconv.ROCKETMQ_CLIENT_GROUP] = str(group)
            if "queueId" in ext:
                attrs[semconv.DESTINATION_PARTITION_ID] = str(ext["queueId"])
            span.set_attributes(attrs)
        ctx.on_respond = lambda resp: _end(span, resp)
        token = make_current(span)
        try:
            resp = fn(req, ctx)
        except BaseException as exc:
            if isinstance(exc, Exception) and span.is_recording():
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            span.end()
            raise
        finally:
            restore(token)
        if req.flag & ONEWAY_FLAG:
            span.end()
        return resp

    handler.__name__ = getattr(fn, "__name__", "handler")
    return handler


def _end(span: trace.Span, resp: RemotingCommand) -> None:
    if resp.code not in _NOT_ERRORS and span.is_recording():
        span.set_status(Status(StatusCode.ERROR, resp.remark or None))
        span.set_attribute(semconv.ERROR_TYPE, str(resp.code))
    span.end()
