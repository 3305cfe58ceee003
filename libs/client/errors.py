"""Typed failures of the client SDK, all under one base, :class:`MQError`.

``response_code`` is RocketMQ's: a :class:`~rocketmesh.remoting.ResponseCode`
for what a broker or name server answered, a :class:`ClientErrorCode` for what
went wrong on the way there (RocketMQ's ClientErrorCode numbers).
"""

from __future__ import annotations

from enum import IntEnum

from rocketmesh.remoting import (
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from rocketmesh.remoting.protocol.codes import code_name


class ClientErrorCode(IntEnum):
    """Codes of failures that happen in the client, not on a server (RocketMQ's ClientErrorCode)."""

    CONNECT_BROKER_EXCEPTION = 10001
    ACCESS_BROKER_TIMEOUT = 10002
    BROKER_NOT_EXIST_EXCEPTION = 10003
    NO_NAME_SERVER_EXCEPTION = 10004
    NOT_FOUND_TOPIC_EXCEPTION = 10005
    REQUEST_TIMEOUT_EXCEPTION = 10006


def _code_text(code: int | None) -> str:
    if code is None:
        return "-"
    try:
        return ClientErrorCode(code).name
    except ValueError:
        return code_name(code, True)


class MQError(Exception):
    """Base of every SDK failure; ``response_code`` says what kind (may be None)."""

    def __init__(self, message: str, response_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.response_code = response_code


class MQClientError(MQError):
    """A failure found by the client: bad input, no route, no name server, broker unreachable.

    Validation failures carry ``ResponseCode.MESSAGE_ILLEGAL``, as RocketMQ's
    Validators do; routing and connection failures a :class:`ClientErrorCode`.
    """

    def __str__(self) -> str:
        if self.response_code is None:
            return self.message
        return f"{self.message} (code {_code_text(self.response_code)})"


class MQBrokerError(MQError):
    """A broker (or name server) answered with an error ``response_code`` and ``remark``."""

    #: Always set: the code the broker answered.
    response_code: int

    def __init__(self, response_code: int, remark: str | None, broker_addr: str | None = None) -> None:
        self.remark = remark or ""
        self.broker_addr = broker_addr
        text = f"CODE: {_code_text(response_code)} DESC: {self.remark}"
        if broker_addr:
            text += f" BROKER: {broker_addr}"
        super().__init__(text, response_code)


class RequestTimeoutError(MQError, TimeoutError):
    """No answer within the timeout (a request, or a whole send with its retries)."""

    def __init__(self, message: str, response_code: int | None = ClientErrorCode.ACCESS_BROKER_TIMEOUT) -> None:
        super().__init__(message, response_code)


def from_remoting(exc: RemotingError, addr: str) -> MQError:
    """The SDK error for a remoting failure talking to ``addr``."""
    if isinstance(exc, RemotingTimeoutError):
        return RequestTimeoutError(f"no response from {addr}: {exc}")
    if isinstance(exc, RemotingConnectError):
        return MQClientError(f"cannot reach {addr}: {exc}", ClientErrorCode.CONNECT_BROKER_EXCEPTION)
    if isinstance(exc, RemotingSendRequestError):
        return MQClientError(f"request to {addr} not sent: {exc}", ClientErrorCode.CONNECT_BROKER_EXCEPTION)
    return MQClientError(f"remoting failure talking to {addr}: {exc}")


__all__ = [
    "ClientErrorCode",
    "MQBrokerError",
    "MQClientError",
    "MQError",
    "RequestTimeoutError",
    "from_remoting",
]
