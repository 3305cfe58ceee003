"""TransactionProducer: transactional messages (RocketMQ's TransactionMQProducer).

    class Orders:
        def execute_local_transaction(self, msg, arg):     # runs right after the half message is stored
            save_order(arg)
            return LocalTransactionState.COMMIT_MESSAGE
        def check_local_transaction(self, msg):             # the broker asks again later (msg: a MessageExt)
            return LocalTransactionState.COMMIT_MESSAGE if order_saved(msg.keys) else \\
                LocalTransactionState.ROLLBACK_MESSAGE

    with TransactionProducer("orders-tx", "127.0.0.1:9876", Orders()) as producer:
        result = producer.send_message_in_transaction(Message("Orders", b"...", keys="order-1"), arg=order)

``send_message_in_transaction`` stores a half message (invisible to
consumers), runs ``execute_local_transaction`` and tells the broker the outcome
with a oneway END_TRANSACTION: COMMIT_MESSAGE delivers the message,
ROLLBACK_MESSAGE drops it, UNKNOW (also what an exception in the local
transaction counts as) leaves it to a check. A txn-checker has the broker ask a
live producer of the group, any instance, with ``check_local_transaction``;
those checks run on the producer's check threads and are answered the same way.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from rocketmesh.client.errors import MQClientError, MQError
from rocketmesh.client.instance import ClientInstance
from rocketmesh.client.producer.producer import Producer
from rocketmesh.client.results import SendResult, SendStatus
from rocketmesh.client.trace.msg_trace import store_host_of
from rocketmesh.client.trace.tracing import SettleTrace, start_settle
from rocketmesh.model.codec import CorruptRecord, decode_message_id, decode_record
from rocketmesh.model.message import Message, MessageConst, MessageExt, SysFlag
from rocketmesh.remoting import RemotingCommand, RequestCode, ResponseCode, response_to
from rocketmesh.remoting.protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    HeaderError,
)

_ILLEGAL = ResponseCode.MESSAGE_ILLEGAL


class LocalTransactionState(Enum):
    """The outcome of a local transaction (RocketMQ's LocalTransactionState, spelling included)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


#: The END_TRANSACTION value of each outcome (a SysFlag transaction value).
_END_FLAG = {
    LocalTransactionState.COMMIT_MESSAGE: int(SysFlag.TRANSACTION_COMMIT),
    LocalTransactionState.ROLLBACK_MESSAGE: int(SysFlag.TRANSACTION_ROLLBACK),
    LocalTransactionState.UNKNOW: 0,
}


class TransactionListener(Protocol):
    """What a TransactionProducer runs (RocketMQ's TransactionListener)."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Run the local transaction of ``msg`` (its half message is stored); return its outcome."""

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """The broker asks: what became of the transaction of ``msg``? (``msg.topic`` and ``msg.queue_id``
        are the real ones; ``msg.unique_key`` is the transaction id, as in the send's result.)"""


@dataclass(slots=True)
class TransactionSendResult(SendResult):
    """A SendResult with the local transaction's outcome; ``transaction_id`` is the message's unique id."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


def transaction_result(result: SendResult, state: LocalTransactionState) -> TransactionSendResult:
    """The TransactionSendResult of a half message's send ``result`` whose transaction came to ``state``."""
    return TransactionSendResult(result.send_status, result.msg_id, result.offset_msg_id, result.message_queue,
                                 result.queue_offset, result.msg_id, result.region_id, state)


class TransactionProducer(Producer):
    """A Producer that also sends messages in transactions (see the module docstring).

    ``listener`` may be set later (``producer.listener = ...``) but before the
    first transaction. Checks the brokers push are run on
    ``check_thread_pool_nums`` threads; at most ``check_request_hold_max`` wait,
    further ones are refused (the broker asks another producer or later).
    Other settings are the Producer's.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        listener: TransactionListener | None = None,
        *,
        check_thread_pool_nums: int = 1,
        check_request_hold_max: int = 2000,
        **options: Any,
    ) -> None:
        super().__init__(group, namesrv, **options)
        for name, value in (("check_thread_pool_nums", check_thread_pool_nums),
                            ("check_request_hold_max", check_request_hold_max)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise MQClientError(f"{name} must be an integer >= 1, got {value!r}")
        self.listener = listener
        self.check_thread_pool_nums = check_thread_pool_nums
        self.check_request_hold_max = check_request_hold_max
        self._checks: ThreadPoolExecutor | None = None
        self._checks_waiting = 0
        self._checks_lock = threading.Lock()

    # -- life cycle ------------------------------------------------------------

    def start(self) -> TransactionProducer:
        """Start as a Producer and take the checks brokers push for this group (idempotent)."""
        super().start()
        with self._checks_lock:
            if self._checks is None:
                self._checks = ThreadPoolExecutor(self.check_thread_pool_nums,
                                                  thread_name_prefix=f"transaction-check-{self.group}")
                _CheckRouter.add(self._instance, self)
                # As RocketMQ's producers do: follow the default topic's route, so heartbeats reach every
                # broker that has it and any of them can push checks here before this producer sent anything.
                self._instance.add_topic(self.create_topic_key)
                try:
                    self._instance.update_topic_route(self.create_topic_key)
                except MQError as exc:
                    self._log.warning("default_topic_route_unavailable", topic=self.create_topic_key,
                                      error=str(exc))
        return self

    def shutdown(self, timeout_s: float = 3.0) -> None:
        """Stop taking checks, then shut down as a Producer; checks still waiting are dropped."""
        with self._checks_lock:
            checks, self._checks = self._checks, None
        if checks is not None:
            _CheckRouter.remove(self._instance, self)
            checks.shutdown(wait=False, cancel_futures=True)
        super().shutdown(timeout_s)

    close = shutdown

    def __enter__(self) -> TransactionProducer:
        return self.start()

    # -- transactions ----------------------------------------------------------

    def send_message_in_transaction(self, msg: Message, arg: Any = None, *,
                                    timeout_ms: int | None = None) -> TransactionSendResult:
        """Store ``msg`` as a half message, run the local transaction, send its outcome to the broker.

        The send is a sync send (retried as :meth:`send` is); its errors are
        raised and no local transaction runs then. A half message the broker did
        not store as SEND_OK (a flush timed out) is rolled back. An exception in
        ``execute_local_transaction`` counts as UNKNOW: a check decides later.
        A failed END_TRANSACTION is logged, not raised: a check decides then too.
        """
        listener = self._half_message(msg)
        result = self.send(msg, timeout_ms=timeout_ms)
        state = LocalTransactionState.ROLLBACK_MESSAGE
        # The local transaction runs in a span parented to the half message's send span (user spans nest in
        # it); the END_TRANSACTION request carries it, so the broker's handling joins the message's trace.
        settle = start_settle(self.group, msg)
        try:
            if result.send_status is SendStatus.SEND_OK:
                state = self._run_local(lambda: listener.execute_local_transaction(msg, arg), result.msg_id)
            self._settle_transaction(msg, result, state, settle)
        finally:
            if settle is not None:
                settle.finish(state.value)
        return transaction_result(result, state)

    def _half_message(self, msg: Message) -> TransactionListener:
        """Check that ``msg`` may go in a transaction and mark it a half message of this group; the listener
        to run. Raises MQClientError."""
        if isinstance(msg, (list, tuple)):
            raise MQClientError("a batch cannot be sent in a transaction; send each message in a transaction "
                                "of its own", _ILLEGAL)
        listener = self.listener
        if listener is None:
            raise MQClientError("the TransactionProducer has no transaction listener; give one "
                                "(TransactionProducer(group, namesrv, listener) or producer.listener = ...)")
        if isinstance(msg, Message):
            if msg.delay_level > 0:
                raise MQClientError("a transactional message cannot be delayed (delay_level); it is delivered "
                                    "when its transaction commits", _ILLEGAL)
            if msg.deliver_at_ms is not None or msg.delay_ms is not None:
                raise MQClientError("a transactional message cannot be a timer message (deliver_at_ms / "
                                    "delay_ms); it is delivered when its transaction commits", _ILLEGAL)
            msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
            msg.properties[MessageConst.PRODUCER_GROUP] = self.group
        return listener

    def _settle_transaction(self, msg: Message, result: SendResult, state: LocalTransactionState,
                            settle: SettleTrace | None) -> None:
        """Tell the broker the outcome ``state`` of the half message ``result`` stored (oneway, in ``settle``'s
        span) and record it in the message trace."""
        self._end_transaction(result, state, None if settle is None else settle.traceparent)
        if self._msg_trace is not None:
            self._msg_trace.end_transaction(msg, result.msg_id, store_host_of(result.offset_msg_id), state.value,
                                            False)

    def _run_local(self, call: Any, transaction_id: str) -> LocalTransactionState:
        try:
            state = call()
        except Exception:  # noqa: BLE001 - RocketMQ's rule: a failed local transaction is not known yet
            self._log.exception("local transaction failed; its outcome counts as UNKNOW",
                                transaction_id=transaction_id)
            return LocalTransactionState.UNKNOW
        return self._checked_state(state, transaction_id)

    def _checked_state(self, state: object, transaction_id: str) -> LocalTransactionState:
        """``state`` when it is a LocalTransactionState, else UNKNOW (logged)."""
        if not isinstance(state, LocalTransactionState):
            self._log.warning("the transaction listener returned no LocalTransactionState; counted as UNKNOW",
                              transaction_id=transaction_id, returned=repr(state))
            return LocalTransactionState.UNKNOW
        return state

    def _end_transaction(self, result: SendResult, state: LocalTransactionState,
                         traceparent: str | None = None) -> None:
        """Oneway END_TRANSACTION to the broker holding the half message (the request carrying ``traceparent``);
        failures are logged."""
        try:
            _ip, _port, commitlog_offset = decode_message_id(result.offset_msg_id)
            addr = self._instance.find_master_addr(result.message_queue)
        except (ValueError, MQError) as exc:
            self._log.warning("end transaction not sent; a check will decide", transaction_id=result.msg_id,
                              state=state.value, error=str(exc))
            return
        header = EndTransactionRequestHeader(self.group, result.queue_offset, commitlog_offset, _END_FLAG[state],
                                             False, result.msg_id, result.msg_id)
        self._send_end(addr, header, traceparent)

    def _send_end(self, addr: str, header: EndTransactionRequestHeader, traceparent: str | None = None) -> None:
        try:
            self._instance.api.end_transaction_oneway(addr, header, self.send_msg_timeout_ms, traceparent)
        except MQError as exc:
            self._log.warning("end transaction failed; a check will decide", transaction_id=header.transaction_id,
                              broker=addr, error=str(exc))

    # -- checks pushed by brokers ----------------------------------------------

    def _accept_check(self, addr: str, cmd: RemotingCommand, header: CheckTransactionStateRequestHeader,
                      msg: MessageExt) -> RemotingCommand:
        """Queue a pushed check (on a push thread: never blocks); the answer says whether it was taken."""
        with self._checks_lock:
            checks = self._checks
            if checks is None or self.listener is None:
                return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"the producer of group {self.group} is not running")
            if self._checks_waiting >= self.check_request_hold_max:
                return response_to(cmd, ResponseCode.SYSTEM_BUSY,
                                   f"{self._checks_waiting} transaction checks are waiting already")
            self._checks_waiting += 1
        try:
            checks.submit(self._run_check, addr, header, msg, cmd.traceparent)
        except RuntimeError:  # shut down meanwhile
            with self._checks_lock:
                self._checks_waiting -= 1
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"the producer of group {self.group} is shutting down")
        return response_to(cmd, ResponseCode.SUCCESS)

    def _run_check(self, addr: str, header: CheckTransactionStateRequestHeader, msg: MessageExt,
                   caller: str | None = None) -> None:
        """Run a pushed check in a span parented to the half message's send (linked to the pusher's span,
        ``caller``) and answer it with END_TRANSACTION."""
        with self._checks_lock:
            self._checks_waiting -= 1
        listener = self.listener
        tid = header.transaction_id or msg.unique_key or ""
        if listener is None:
            return
        span = start_settle(self.group, msg, check=True, caller=caller)
        state = LocalTransactionState.UNKNOW
        try:
            state = self._run_local(lambda: listener.check_local_transaction(msg), tid)
            end = EndTransactionRequestHeader(self.group, header.tran_state_table_offset, header.commit_log_offset,
                                              _END_FLAG[state], True, msg.unique_key, tid)
            self._send_end(addr, end, None if span is None else span.traceparent)
            if self._msg_trace is not None:
                self._msg_trace.end_transaction(msg, msg.unique_key or tid, msg.store_host, state.value, True)
        finally:
            if span is not None:
                span.finish(state.value)

    def __repr__(self) -> str:
        return (f"TransactionProducer(group={self.group!r}, namesrv={';'.join(self.namesrv_addrs)!r}, "
                f"running={self.running})")


class _CheckRouter:
    """Hands the CHECK_TRANSACTION_STATE pushes a client instance receives to its TransactionProducer of the
    half message's producer group (several producers may share one instance)."""

    _lock = threading.Lock()
    _tables: weakref.WeakKeyDictionary[ClientInstance, dict[str, TransactionProducer]] = weakref.WeakKeyDictionary()

    @classmethod
    def add(cls, instance: ClientInstance, producer: TransactionProducer) -> None:
        with cls._lock:
            table = cls._tables.get(instance)
            if table is None:
                table = cls._tables[instance] = {}
                instance.register_push_handler(RequestCode.CHECK_TRANSACTION_STATE,
                                               lambda addr, cmd: cls._dispatch(table, addr, cmd))
            table[producer.group] = producer

    @classmethod
    def remove(cls, instance: ClientInstance, producer: TransactionProducer) -> None:
        with cls._lock:
            table = cls._tables.get(instance)
            if table is not None and table.get(producer.group) is producer:
                del table[producer.group]

    @staticmethod
    def _dispatch(table: dict[str, TransactionProducer], addr: str, cmd: RemotingCommand) -> RemotingCommand:
        try:
            header = CheckTransactionStateRequestHeader.from_ext(cmd.ext)
            msg = decode_record(cmd.body)
        except (HeaderError, CorruptRecord, ValueError) as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"bad CHECK_TRANSACTION_STATE request: {exc}")
        props = msg.properties
        producer = table.get(props.get(MessageConst.PRODUCER_GROUP, ""))
        if producer is None:
            return response_to(cmd, ResponseCode.TRANSACTION_STATE_GROUP_WRONG,
                               f"no transaction producer of group {props.get(MessageConst.PRODUCER_GROUP)!r} here")
        # The listener sees the message as it was sent: its real topic and queue.
        real_topic = props.get(MessageConst.REAL_TOPIC)
        if real_topic:
            msg.topic = real_topic
            try:
                msg.queue_id = int(props.get(MessageConst.REAL_QUEUE_ID, ""))
            except ValueError:
                pass
        return producer._accept_check(addr, cmd, header, msg)
