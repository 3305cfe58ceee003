"""Dispatcher: a server's processor table, and how a request is run through it.

One table serves every door of a server (the ZeroMQ ROUTER, the RocketMQ TCP door): a door reads a
request, makes the context that answers it over that door, and hands both to :meth:`Dispatcher.dispatch`.
Whatever door a request came by, it meets the same handler, executor, queue bound (SYSTEM_BUSY), request
hook (the ACL check) and error answers.

A handler registered without an executor runs on the thread of the door that read the request; a server
with two doors runs such handlers on two threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

from rocketmesh.remoting.errors import RequestError
from rocketmesh.remoting.protocol.codes import ResponseCode, code_name
from rocketmesh.remoting.protocol.command import RemotingCommand, response_to
from rocketmesh.remoting.protocol.headers import HeaderError
from rocketmesh.runtime.log import get_logger

#: ``handler(cmd, ctx) -> response | None``; ``ctx`` is the door's RequestContext.
AnyHandler = Callable[[RemotingCommand, Any], RemotingCommand | None]


class Answerable(Protocol):
    """What the dispatcher needs of a request's context: who sent it, and how to answer it."""

    remote: str

    def respond(self, response: RemotingCommand) -> bool:
        """Send ``response`` to the requester (from any thread); False when nothing was sent."""
        ...


@dataclass(slots=True, eq=False)
class Processor:
    """One registered code: its handler, where it runs, and how many of its requests may wait there."""

    handler: AnyHandler
    executor: Executor | None
    queue_capacity: int
    #: Requests handed to ``executor`` and not finished (guarded by ``lock``).
    inflight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Dispatcher:
    """The processor table of the server named ``name``: register handlers, then ``dispatch`` requests."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: code -> Processor. Doors may look codes up here themselves (and then call ``invoke`` or ``submit``)
        #: where a method call less per request counts.
        self.processors: dict[int, Processor] = {}
        #: Handles every code nothing is registered for, inline; None: REQUEST_CODE_NOT_SUPPORTED.
        self.default_handler: AnyHandler | None = None
        #: ``hook(cmd, ctx)`` before each request's handler, on the handler's thread (the ACL check); it
        #: refuses a request by raising RequestError, which is the answer.
        self.request_hook: AnyHandler | None = None
        self._log = get_logger("remoting", server=name)

    def register(self, code: int, handler: AnyHandler, executor: Executor | None = None,
                 queue_capacity: int = 0) -> None:
        """Route requests with ``code`` to ``handler`` (see ``RemotingServer.register``)."""
        self.processors[int(code)] = Processor(handler, executor, queue_capacity)

    def dispatch(self, cmd: RemotingCommand, ctx: Answerable) -> None:
        """Run ``cmd`` through its handler: inline, on its executor, or answered at once (unknown code,
        queue full). The answer goes through ``ctx.respond``."""
        proc = self.processors.get(cmd.code)
        if proc is None:
            self.no_processor(cmd, ctx)
        elif proc.executor is None:
            self.invoke(proc, cmd, ctx)
        else:
            self.submit(proc, proc.executor, cmd, ctx)

    def busy(self) -> bool:
        """True while any request handed to an executor has not finished."""
        return any(p.inflight for p in list(self.processors.values()))

    def no_processor(self, cmd: RemotingCommand, ctx: Answerable) -> None:
        """Handle a code nothing is registered for: the default handler, else REQUEST_CODE_NOT_SUPPORTED."""
        if self.default_handler is not None:
            self.invoke(Processor(self.default_handler, None, 0), cmd, ctx)
            return
        ctx.respond(
            response_to(
                cmd,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request code {code_name(cmd.code, False)} is not supported by {self.name}",
            )
        )

    def submit(self, proc: Processor, executor: Executor, cmd: RemotingCommand, ctx: Answerable) -> None:
        """Hand ``cmd`` to ``executor``, or answer SYSTEM_BUSY when ``proc``'s queue is full."""
        with proc.lock:
            if proc.queue_capacity and proc.inflight >= proc.queue_capacity:
                busy = True
            else:
                busy = False
                proc.inflight += 1
        if busy:
            ctx.respond(
                response_to(
                    cmd,
                    ResponseCode.SYSTEM_BUSY,
                    f"system busy: {proc.queue_capacity} {code_name(cmd.code, False)} requests queued, try later",
                )
            )
            return
        try:
            executor.submit(self.invoke, proc, cmd, ctx)
        except RuntimeError as exc:  # executor shut down
            with proc.lock:
                proc.inflight -= 1
            ctx.respond(response_to(cmd, ResponseCode.SYSTEM_BUSY, f"not accepting requests: {exc}"))

    def invoke(self, proc: Processor, cmd: RemotingCommand, ctx: Answerable) -> None:
        """Run the request hook and ``proc``'s handler on this thread, and answer what they return or raise."""
        try:
            try:
                hook = self.request_hook
                if hook is not None:
                    hook(cmd, ctx)
                response = proc.handler(cmd, ctx)
            except RequestError as exc:
                response = response_to(cmd, exc.code, exc.remark)
            except HeaderError as exc:  # a malformed header is the peer's error: answered, no traceback
                response = response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
            except Exception as exc:
                self._log.exception("request_handler_failed", code=code_name(cmd.code, False), peer=ctx.remote)
                response = response_to(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            if response is not None:
                ctx.respond(response)
        finally:
            # After the response is queued, so that a stopping server waits for it.
            if proc.executor is not None:
                with proc.lock:
                    proc.inflight -= 1
