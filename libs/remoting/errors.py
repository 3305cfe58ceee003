"""Typed failures of the remoting layer."""

from __future__ import annotations


class RemotingError(Exception):
    """Base of every remoting failure."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """A request was sent but no response came back within its timeout."""


class RemotingConnectError(RemotingError):
    """The address is unusable, or no connection to it came up before the request timed out."""


class RemotingSendRequestError(RemotingError):
    """A request could not be handed to the wire (too large, client closed, send failed)."""


class ProtocolError(RemotingError):
    """Frames that are not a well-formed command.

    ``opaque`` and ``flag`` are set when the header was readable far enough to
    know them, so a server can still answer the sender with an error response.
    """

    def __init__(self, message: str, opaque: int | None = None, flag: int | None = None) -> None:
        super().__init__(message)
        self.opaque = opaque
        self.flag = flag


class WireFormatError(ProtocolError):
    """Bytes on a RocketMQ remoting TCP connection that are not a frame this side can read: a bad length, an
    unknown header serialize type, a header that is neither JSON nor ROCKETMQ-serialized. The stream has lost
    its framing, so the one thing to do is close that connection."""


class RequestError(Exception):
    """Raised by a request handler to answer with ``code`` and ``remark``.

    The server turns it into a response without logging a traceback, which
    suits bad input from a peer (a missing ext field, an unknown topic).
    """

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark
