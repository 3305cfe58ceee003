"""What the broker's request processors share: the success answer and guarded registration."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor

import orjson

from rocketmesh.broker.tracing import traced
from rocketmesh.remoting import RemotingCommand, RemotingServer, RequestContext, ResponseCode, response_to
from rocketmesh.remoting.protocol.headers import Header, HeaderError

Handler = Callable[[RemotingCommand, RequestContext], RemotingCommand | None]

#: Bad input a handler may meet in a request's header or body: answered, never a traceback.
BAD_REQUEST_ERRORS = (HeaderError, ValueError, TypeError, KeyError, orjson.JSONDecodeError)


def ok(req: RemotingCommand, header: Header | None = None, body: bytes = b"") -> RemotingCommand:
    """SUCCESS for ``req``, with the response ``header`` and ``body``."""
    return response_to(req, ResponseCode.SUCCESS, None, None if header is None else header.to_ext(), body)


def guarded(fn: Handler, errors: tuple[type[Exception], ...] = (HeaderError,)) -> Handler:
    """``fn``, answering SYSTEM_ERROR when it raises one of ``errors``: a bad header names its field
    (RocketMQ's answer), other bad input says which request it spoiled."""
    def handler(req: RemotingCommand, ctx: RequestContext) -> RemotingCommand | None:
        try:
            return fn(req, ctx)
        except HeaderError as exc:
            return response_to(req, ResponseCode.SYSTEM_ERROR, str(exc))
        except errors as exc:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"bad {fn.__name__} request: {exc}")
    handler.__name__ = fn.__name__
    return handler


def register_all(server: RemotingServer, handlers: dict[int, tuple[Handler, Executor | None]],
                 errors: tuple[type[Exception], ...] = (HeaderError,)) -> None:
    """Register each ``code: (handler, executor)`` guarded against ``errors`` (None: on the I/O thread),
    in a span when it is a request the broker traces."""
    for code, (fn, executor) in handlers.items():
        server.register(code, traced(code, guarded(fn, errors)), executor)
