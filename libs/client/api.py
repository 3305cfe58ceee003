"""The client's remote calls, one typed method each (RocketMQ's MQClientAPIImpl).

Every request the SDK sends to a name server or a broker is built here, from
a typed header of :mod:`rocketmesh.remoting.protocol.headers`, and every
answer is read here into a typed result. Failures are the SDK's typed
errors: :class:`MQBrokerError` with the server's ``response_code`` and
``remark``, :class:`RequestTimeoutError`, :class:`MQClientError`; a
remoting failure is the ``__cause__`` of the SDK error raised for it.

A :class:`ClientAPI` rides on a client instance (``instance.api``), whose
connections, name server fail-over and signing it uses. Producers,
consumers, Admin, the CLI and the system services call it; none builds a
request of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

from rocketmesh.model.message import MessageQueue
from rocketmesh.remoting import (
    RemotingCommand,
    RemotingError,
    RequestCode,
    ResponseCode,
)
from rocketmesh.remoting.protocol.headers import (
    HeaderError,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from rocketmesh.client.errors import MQBrokerError, MQClientError, MQError, from_remoting
from rocketmesh.client.results import DEFAULT_REGION, STORED_CODES, SendResult

if TYPE_CHECKING:
    from rocketmesh.client.instance import ClientInstance

_SEND_MESSAGE = int(RequestCode.SEND_MESSAGE)
_SEND_BATCH_MESSAGE = int(RequestCode.SEND_BATCH_MESSAGE)
_STORED = STORED_CODES
_SUCCESS = (ResponseCode.SUCCESS,)

#: ``fn(result, None)`` or ``fn(None, error)``: how an async send is told its outcome (on the I/O thread).
SendDone = Callable[[Optional[SendResult], Optional[MQError]], None]


def send_result(resp: RemotingCommand, mq: MessageQueue, msg_id: str, addr: str) -> SendResult:
    """The SendResult of a send's answer (RocketMQ's processSendResponse): MQBrokerError for an answer
    that says the message was not stored, MQClientError for an answer without its header."""
    status = _STORED.get(resp.code)
    if status is None:
        raise MQBrokerError(resp.code, resp.remark, addr)
    try:
        h = SendMessageResponseHeader.from_ext(resp.ext)
    except HeaderError as exc:
        raise MQClientError(f"the send response from {addr} is malformed: {exc}") from None
    if h.queue_id != mq.queue_id:
        mq = MessageQueue(mq.topic, mq.broker_name, h.queue_id)
    return SendResult(status, msg_id, h.msg_id, mq, h.queue_offset, h.transaction_id, DEFAULT_REGION)


class ClientAPI:
    """The remote calls of one client instance. Get it as ``instance.api``."""

    __slots__ = ("_instance",)

    def __init__(self, instance: "ClientInstance") -> None:
        self._instance = instance

    # -- the one helper under every call --------------------------------------

    def _broker(self, addr: str, code: int, header: Any = None, body: bytes = b"", *,
                accept: Iterable[int] = _SUCCESS, timeout_ms: Optional[int] = None,
                traceparent: Optional[str] = None) -> RemotingCommand:
        return self._instance.invoke_broker(addr, code, None if header is None else header.to_ext(), body,
                                            accept=accept, timeout_ms=timeout_ms, traceparent=traceparent)

    # -- sends (the hot path) --------------------------------------------------

    @staticmethod
    def _send_command(header: SendMessageRequestHeader, body: bytes, traceparent: Optional[str]) -> RemotingCommand:
        return RemotingCommand(_SEND_BATCH_MESSAGE if header.batch else _SEND_MESSAGE, 0, 0, None,
                               header.to_ext(), body, traceparent)

    def send_message(self, addr: str, mq: MessageQueue, header: SendMessageRequestHeader, body: bytes,
                     msg_id: str, timeout_ms: int, traceparent: Optional[str] = None) -> SendResult:
        """SEND_MESSAGE (SEND_BATCH_MESSAGE when ``header.batch``) to ``mq`` at ``addr``, waiting for the answer.

        ``msg_id`` is the message's unique id (comma separated for a batch). Raises MQBrokerError when the
        broker did not store it, else the SDK error of the remoting failure (its cause)."""
        try:
            resp = self._instance.remoting.invoke_sync(addr, self._send_command(header, body, traceparent),
                                                       timeout_ms)
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc
        return send_result(resp, mq, msg_id, addr)

    def send_message_async(self, addr: str, mq: MessageQueue, header: SendMessageRequestHeader, body: bytes,
                           msg_id: str, timeout_ms: int, done: SendDone, traceparent: Optional[str] = None) -> None:
        """SEND_MESSAGE (or SEND_BATCH_MESSAGE) without waiting: ``done(result, error)`` is called on the remoting
        I/O thread (short, never blocking). A failure to hand it to the wire is raised here."""
        def on_response(resp: Optional[RemotingCommand], error: Optional[BaseException]) -> None:
            if resp is None:
                if isinstance(error, RemotingError):
                    err = from_remoting(error, addr)
                    err.__cause__ = error
                else:
                    err = MQClientError(f"send to {addr} failed: {error!r}")
                done(None, err)
                return
            try:
                result = send_result(resp, mq, msg_id, addr)
            except MQError as exc:
                done(None, exc)
                return
            done(result, None)

        try:
            self._instance.remoting.invoke_with_callback(addr, self._send_command(header, body, traceparent),
                                                         timeout_ms, on_response)
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc

    def send_message_oneway(self, addr: str, header: SendMessageRequestHeader, body: bytes, timeout_ms: int,
                            traceparent: Optional[str] = None) -> None:
        """SEND_MESSAGE wanting no answer: the broker may or may not store it."""
        try:
            self._instance.remoting.invoke_oneway(addr, self._send_command(header, body, traceparent), timeout_ms)
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc
