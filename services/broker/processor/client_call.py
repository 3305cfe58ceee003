"""Admin requests the broker answers by asking one of its consumer clients (RocketMQ's
AdminBrokerProcessor.callConsumer): GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY.

The broker finds the client among the group's members by its client id, forwards the admin's request
over the connection the client's heartbeats came in on (ZeroMQ or the TCP door: the same call) and
relays the client's answer, code, remark and body, to the admin. For CONSUME_MESSAGE_DIRECTLY it first
puts the stored record of the message in the body and its own name in the header, as RocketMQ's broker
does. The wait for the client is bounded and runs on the admin executor, never on an I/O thread.
"""

from __future__ import annotations

from concurrent.futures import Executor, TimeoutError as FutureTimeoutError
from typing import TYPE_CHECKING

from rocketmesh.acl.signer import ACCESS_KEY, SIGNATURE, TIMESTAMP
from rocketmesh.broker.processor.handlers import Handler, register_all
from rocketmesh.model.codec import decode_message_id
from rocketmesh.remoting import (
    RemotingCommand,
    RemotingError,
    RemotingServer,
    RemotingTimeoutError,
    RequestCode,
    RequestContext,
    ResponseCode,
    request,
    response_to,
)
from rocketmesh.remoting.protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.broker.parts import BrokerParts

log = get_logger("broker", component="client_call")

#: The ACL fields of a signed request.
_SIGNATURE_FIELDS = frozenset({ACCESS_KEY, SIGNATURE, TIMESTAMP})
#: The longest a broker waits for a client, whatever an admin asks (a thread of the admin executor waits).
MAX_CALL_TIMEOUT_MS = 60_000


class ClientCallProcessor:
    """Forwards an admin's question to one consumer client and relays its answer; see :meth:`register`."""

    def __init__(self, broker: BrokerParts) -> None:
        self.broker = broker

    def register(self, server: RemotingServer, executor: Executor) -> None:
        handlers: dict[int, tuple[Handler, Executor | None]] = {
            RequestCode.GET_CONSUMER_RUNNING_INFO: (self.get_consumer_running_info, executor),
            RequestCode.CONSUME_MESSAGE_DIRECTLY: (self.consume_message_directly, executor),
        }
        register_all(server, handlers)

    def get_consumer_running_info(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = GetConsumerRunningInfoRequestHeader.from_ext(req.ext)
        return self._call_consumer(req, req.body, h.consumer_group, h.client_id, h.timeout_millis)

    def consume_message_directly(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        h = ConsumeMessageDirectlyResultRequestHeader.from_ext(req.ext)
        try:
            _, _, offset = decode_message_id(h.msg_id or "")
        except (ValueError, OSError) as exc:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"bad msgId {h.msg_id!r}: {exc}")
        store = self.broker.store
        record = store.commitlog.read_record(offset) if offset >= store.commitlog.min_offset else b""
        if not record:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"can not find message by the msgId {h.msg_id}")
        req.ext["brokerName"] = self.broker.config.broker_name
        return self._call_consumer(req, record, h.consumer_group, h.client_id or "", h.timeout_millis)

    def _call_consumer(self, req: RemotingCommand, body: bytes, group: str, client_id: str,
                       timeout_ms: int) -> RemotingCommand:
        info = self.broker.clients.consumer_group(group)
        channel = None if info is None else info.channels.get(client_id)
        if channel is None:
            return response_to(req, ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        timeout_ms = max(1, min(timeout_ms, MAX_CALL_TIMEOUT_MS))
        # The admin's fields, as RocketMQ forwards them, but not its signature: that proves the admin to this
        # broker and is nothing the client needs (nor should be able to send again).
        call = request(req.code, {k: v for k, v in req.ext.items() if k not in _SIGNATURE_FIELDS}, body)
        future = self.broker.server.invoke_client(channel.identity, call, timeout_ms)
        try:
            answer = future.result(timeout_ms / 1000.0 + 1.0)
        except (RemotingTimeoutError, FutureTimeoutError):
            log.info("consumer_call_timeout", group=group, client_id=client_id, code=req.code, timeout_ms=timeout_ms)
            return response_to(req, ResponseCode.CONSUME_MSG_TIMEOUT,
                               f"consumer <{group}> <{client_id}> Timeout: no answer within {timeout_ms} ms")
        except RemotingError as exc:
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
        return response_to(req, answer.code, answer.remark, answer.ext or None, answer.body)
