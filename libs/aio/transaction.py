"""AsyncTransactionProducer: transactional messages from asyncio code.

    class Orders:
        async def execute_local_transaction(self, msg, arg):
            await save_order(arg)
            return LocalTransactionState.COMMIT_MESSAGE
        async def check_local_transaction(self, msg):
            return LocalTransactionState.COMMIT_MESSAGE if await order_saved(msg.keys) else \\
                LocalTransactionState.ROLLBACK_MESSAGE

    async with AsyncTransactionProducer("orders-tx", "127.0.0.1:9876", Orders()) as producer:
        result = await producer.send_message_in_transaction(Message("Orders", b"...", keys="order-1"), arg=order)

The listener's methods may be ``async def`` or plain ``def``. ``execute_local_transaction`` runs on the
loop right after the half message is stored (a plain one too: keep it short). A check the broker pushes
is taken by the producer's check thread, as in TransactionProducer; an ``async def``
``check_local_transaction`` then runs on the loop that started the producer (at most
``check_timeout_s``; past it, or raising, it counts as UNKNOW and a later check asks again), a plain one
on the check thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from rocketmesh.aio.bridge import is_async_callable, resolve, run_on_loop
from rocketmesh.aio.producer import AsyncProducer
from rocketmesh.client.errors import MQClientError
from rocketmesh.client.producer.producer import Producer
from rocketmesh.client.producer.transaction import (
    LocalTransactionState,
    TransactionProducer,
    TransactionSendResult,
    transaction_result,
)
from rocketmesh.client.results import SendStatus
from rocketmesh.client.trace.tracing import start_settle
from rocketmesh.model.message import Message, MessageExt

#: How long an ``async def`` check may run on the loop before it counts as UNKNOW (s).
DEFAULT_CHECK_TIMEOUT_S = 60.0


class AsyncTransactionListener(Protocol):
    """What an AsyncTransactionProducer runs; each method may be ``async def`` or ``def``."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        """Run the local transaction of ``msg`` (its half message is stored); its LocalTransactionState."""

    def check_local_transaction(self, msg: MessageExt) -> Any:
        """The broker asks what became of the transaction of ``msg``; its LocalTransactionState."""


class _OnLoop:
    """The listener as TransactionProducer's check threads call it: an awaitable answer is awaited on the loop."""

    def __init__(self, listener: AsyncTransactionListener, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self.listener = listener
        self.loop = loop
        self.timeout_s = timeout_s

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        raise MQClientError("send transactions with AsyncTransactionProducer.send_message_in_transaction")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        check = self.listener.check_local_transaction
        if is_async_callable(check):
            state: LocalTransactionState = run_on_loop(self.loop, lambda: check(msg), self.timeout_s)
            return state
        answer: LocalTransactionState = check(msg)
        return answer


class AsyncTransactionProducer(AsyncProducer):
    """An AsyncProducer that also sends messages in transactions (see the module docstring).

    Other arguments are TransactionProducer's (``check_thread_pool_nums``, ``check_request_hold_max``) and
    the Producer's settings.
    """

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None,
                 listener: AsyncTransactionListener | None = None, *,
                 check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S, **settings: Any) -> None:
        super().__init__(group, namesrv, **settings)
        if not check_timeout_s > 0:
            raise MQClientError(f"check_timeout_s must be > 0, got {check_timeout_s!r}")
        self.listener = listener
        self.check_timeout_s = check_timeout_s

    @staticmethod
    def _new_producer(group: str, namesrv: str | Sequence[str] | None, settings: dict[str, Any]) -> Producer:
        return TransactionProducer(group, namesrv, None, **settings)

    @property
    def _tp(self) -> TransactionProducer:
        producer = self.producer
        assert isinstance(producer, TransactionProducer)
        return producer

    async def start(self) -> AsyncTransactionProducer:
        """Start as an AsyncProducer and take the checks brokers push for this group."""
        if self.listener is not None:
            self._tp.listener = _OnLoop(self.listener, asyncio.get_running_loop(), self.check_timeout_s)
        await super().start()
        return self

    async def __aenter__(self) -> AsyncTransactionProducer:
        return await self.start()

    async def send_message_in_transaction(self, msg: Message, arg: Any = None, *,
                                          timeout_ms: int | None = None) -> TransactionSendResult:
        """Store ``msg`` as a half message, run (await) the local transaction, send its outcome to the broker:
        :meth:`TransactionProducer.send_message_in_transaction`'s rules (an exception, or no
        LocalTransactionState, counts as UNKNOW; a half message not stored as SEND_OK is rolled back)."""
        listener = self.listener
        if listener is None:
            raise MQClientError("the AsyncTransactionProducer has no transaction listener; give one "
                                "(AsyncTransactionProducer(group, namesrv, listener))")
        tp = self._tp
        if not isinstance(tp.listener, _OnLoop):
            tp.listener = _OnLoop(listener, asyncio.get_running_loop(), self.check_timeout_s)
        tp._half_message(msg)
        result = await self.send(msg, timeout_ms=timeout_ms)
        state = LocalTransactionState.ROLLBACK_MESSAGE
        settle = start_settle(tp.group, msg)
        try:
            if result.send_status is SendStatus.SEND_OK:
                state = await self._run_local(listener, msg, arg, result.msg_id)
            tp._settle_transaction(msg, result, state, settle)
        finally:
            if settle is not None:
                settle.finish(state.value)
        return transaction_result(result, state)

    async def _run_local(self, listener: AsyncTransactionListener, msg: Message, arg: Any,
                         transaction_id: str) -> LocalTransactionState:
        tp = self._tp
        try:
            state = await resolve(listener.execute_local_transaction(msg, arg))
        except Exception:  # noqa: BLE001 - RocketMQ's rule: a failed local transaction is not known yet
            tp._log.exception("local transaction failed; its outcome counts as UNKNOW", transaction_id=transaction_id)
            return LocalTransactionState.UNKNOW
        return tp._checked_state(state, transaction_id)

    def __repr__(self) -> str:
        return f"AsyncTransactionProducer(group={self.group!r}, running={self.running})"
