"""The client's remote calls, one typed method each (RocketMQ's MQClientAPIImpl).

Every request the SDK sends to a name server or a broker is built here, from
a typed header of :mod:`rocketmesh.remoting.protocol.headers`, and every
answer is read here into a typed result. Failures are the SDK's typed
errors: :class:`MQBrokerError` with the server's ``response_code`` and
``remark``, :class:`RequestTimeoutError`, :class:`MQClientError`; a remoting
failure is the ``__cause__`` of the SDK error raised for it.

A :class:`ClientAPI` rides on one RemotingClient: a client instance owns one
(``instance.api``), with its name server list; a tool that asks one address
(``rocketmesh health``, the ha service) makes its own over a bare client.
Methods that ask several brokers at once take the addresses and return one
outcome per address, in order: the result, or the MQError of that address.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, TimeoutError as FutureTimeoutError, wait as wait_futures
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

import orjson

from rocketmesh.client.cluster import ClusterInfo
from rocketmesh.client.errors import (
    ClientErrorCode,
    MQBrokerError,
    MQClientError,
    MQError,
    RequestTimeoutError,
    from_remoting,
)
from rocketmesh.client.results import DEFAULT_REGION, STORED_CODES, ConsumeStatsList, SendResult
from rocketmesh.client.running_info import ConsumeMessageDirectlyResult, ConsumerRunningInfo
from rocketmesh.model.message import MessageQueue
from rocketmesh.model.route import TopicRouteData
from rocketmesh.remoting import (
    RemotingClient,
    RemotingCommand,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RequestCode,
    ResponseCode,
)
from rocketmesh.remoting.protocol.headers import (
    CheckHalfMessageRequestHeader,
    CheckHalfMessageResponseHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerGroupRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeliverDueMessagesRequestHeader,
    DeliverDueMessagesResponseHeader,
    EarliestMsgStoretimeResponseHeader,
    EndTransactionRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetRouteInfoRequestHeader,
    HaAppendRequestHeader,
    HaAppendResponseHeader,
    HalfCheckOutcome,
    HaTransferRequestHeader,
    HaTransferResponseHeader,
    Header,
    HeaderError,
    PendingHalfMessagesRequestHeader,
    ProducerGroupRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    QueueOffsetRequestHeader,
    QueueOffsetResponseHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    SubscriptionGroupRequestHeader,
    TopicRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)

H = TypeVar("H", bound=Header)
T = TypeVar("T")

DEFAULT_TIMEOUT_MS = 3000

_SEND_MESSAGE = int(RequestCode.SEND_MESSAGE)
_SEND_BATCH_MESSAGE = int(RequestCode.SEND_BATCH_MESSAGE)
_PULL_MESSAGE = int(RequestCode.PULL_MESSAGE)
_STORED = STORED_CODES
_SUCCESS = (ResponseCode.SUCCESS,)
#: The answers to a pull that are no error: found, nothing new, nothing matched, offset moved.
PULL_ANSWER_CODES = frozenset({ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                               ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED})

#: ``fn(result, None)`` or ``fn(None, error)``: how an async send is told its outcome (on the I/O thread).
SendDone = Callable[[SendResult | None, MQError | None], None]
#: ``fn(response, None)`` or ``fn(None, error)``: how an async pull is told its outcome (on the I/O thread).
PullDone = Callable[[Optional["PullResponse"], BaseException | None], None]


@dataclass(slots=True)
class PullResponse:
    """A pull's answer as the broker gave it: one of :data:`PULL_ANSWER_CODES`, the offsets, and the
    records (RocketMQ's PullResultExt before its messages are decoded)."""

    code: int
    header: PullMessageResponseHeader
    body: bytes


@dataclass(slots=True)
class HaAppendAnswer:
    """A slave's answer to HA_APPEND: taken or not, where its commitlog ends (None when it did not say),
    and why it refused."""

    accepted: bool
    offset: int | None
    remark: str


@dataclass(slots=True)
class DeliverDueAnswer:
    """A broker's answer to DELIVER_DUE_MESSAGES: the counts, and the body (which offsets were done,
    missing, or not due yet)."""

    header: DeliverDueMessagesResponseHeader
    body: dict[str, Any]


def send_result(resp: RemotingCommand, mq: MessageQueue, msg_id: str, addr: str) -> SendResult:
    """The SendResult of a send's answer (RocketMQ's processSendResponse): MQBrokerError for an answer
    that says the message was not stored, MQClientError for an answer without its header."""
    status = _STORED.get(resp.code)
    if status is None:
        raise MQBrokerError(resp.code, resp.remark, addr)
    h = _response_header(SendMessageResponseHeader, resp, addr)
    if h.queue_id != mq.queue_id:
        mq = MessageQueue(mq.topic, mq.broker_name, h.queue_id)
    return SendResult(status, msg_id, h.msg_id, mq, h.queue_offset, h.transaction_id, DEFAULT_REGION)


class _SendAnswer:
    """Turns the answer to one async send into ``done(result, error)`` (on the remoting I/O thread).

    One small object a send rather than a closure: a closure over four names is six objects for the
    garbage collector to track, and a producer keeps thousands of sends in flight."""

    __slots__ = ("addr", "mq", "msg_id", "done")

    def __init__(self, addr: str, mq: MessageQueue, msg_id: str, done: SendDone) -> None:
        self.addr = addr
        self.mq = mq
        self.msg_id = msg_id
        self.done = done

    def __call__(self, resp: RemotingCommand | None, error: BaseException | None) -> None:
        addr = self.addr
        if resp is None:
            if isinstance(error, RemotingError):
                err = from_remoting(error, addr)
                err.__cause__ = error
            else:
                err = MQClientError(f"send to {addr} failed: {error!r}")
            self.done(None, err)
            return
        try:
            result = send_result(resp, self.mq, self.msg_id, addr)
        except MQError as exc:
            self.done(None, exc)
            return
        self.done(result, None)


def _response_header(cls: type[H], resp: RemotingCommand, addr: str) -> H:
    try:
        return cls.from_ext(resp.ext)
    except HeaderError as exc:
        raise MQClientError(f"the answer from {addr} is malformed: {exc}") from None


def _json(resp: RemotingCommand, addr: str) -> Any:
    """The JSON body of ``resp`` ({} when empty); MQClientError when it is not JSON."""
    if not resp.body:
        return {}
    try:
        return orjson.loads(resp.body)
    except orjson.JSONDecodeError as exc:
        raise MQClientError(f"the answer from {addr} is not JSON: {exc}") from None


def _json_object(resp: RemotingCommand, addr: str) -> dict[str, Any]:
    data = _json(resp, addr)
    if not isinstance(data, dict):
        raise MQClientError(f"the answer from {addr} is not a JSON object")
    return data


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def raise_first(outcomes: Sequence[Any]) -> None:
    """Raise the first MQError among ``outcomes`` (of a call to several brokers), if any."""
    for res in outcomes:
        if isinstance(res, MQError):
            raise res


class ClientAPI:
    """The remote calls over one RemotingClient; ``namesrv_addrs`` are the name servers it fails over
    between (none for a client that only asks given addresses)."""

    def __init__(self, remoting: RemotingClient, namesrv_addrs: Sequence[str] = (),
                 timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        self.remoting = remoting
        self.namesrv_addrs = tuple(namesrv_addrs)
        self.timeout_ms = timeout_ms
        #: Which name server is asked first: a random one, so clients spread over the list.
        self._ns_index = random.randrange(len(self.namesrv_addrs)) if self.namesrv_addrs else 0

    # -- the one request/response helper under every call --------------------

    def _timeout(self, timeout_ms: int | None) -> int:
        return self.timeout_ms if timeout_ms is None else timeout_ms

    def invoke(self, addr: str, code: int, header: Header | None = None, body: bytes = b"", *,
               accept: Iterable[int] = _SUCCESS, timeout_ms: int | None = None,
               traceparent: str | None = None) -> RemotingCommand:
        """One request to ``addr`` (its header carrying ``traceparent``, when given); raises MQBrokerError for
        a code not in ``accept``, else the SDK error of the remoting failure."""
        cmd = RemotingCommand(code, 0, 0, None, {} if header is None else header.to_ext(), body, traceparent)
        try:
            resp = self.remoting.invoke_sync(addr, cmd, self._timeout(timeout_ms))
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc
        if resp.code not in accept:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return resp

    def _oneway(self, addr: str, code: int, header: Header, timeout_ms: int | None,
                traceparent: str | None = None) -> None:
        cmd = RemotingCommand(code, 0, 0, None, header.to_ext(), b"", traceparent)
        try:
            self.remoting.invoke_oneway(addr, cmd, self._timeout(timeout_ms))
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc

    def _invoke_all(self, calls: Sequence[tuple[str, RemotingCommand]], timeout_ms: int | None,
                    accept: Iterable[int] = _SUCCESS) -> list[RemotingCommand | MQError]:
        """Send each ``(addr, cmd)`` at once and wait for all (bounded): per call its answer, or its error
        (MQBrokerError for a code not in ``accept``)."""
        remoting = self.remoting
        timeout = self._timeout(timeout_ms)
        futures: list[Future[RemotingCommand] | MQError] = []
        for addr, cmd in calls:
            try:
                futures.append(remoting.invoke_async(addr, cmd, timeout))
            except RemotingError as exc:
                futures.append(from_remoting(exc, addr))
        pending = [f for f in futures if isinstance(f, Future)]
        wait_futures(pending, timeout=timeout / 1000.0 + 1.0)
        accepted = frozenset(accept)
        out: list[RemotingCommand | MQError] = []
        for (addr, _), f in zip(calls, futures, strict=False):
            if not isinstance(f, Future):
                out.append(f)
                continue
            try:
                resp = f.result(timeout=0)
            except FutureTimeoutError:
                out.append(RequestTimeoutError(f"no response from {addr} within {timeout} ms"))
                continue
            except RemotingError as exc:
                out.append(from_remoting(exc, addr))
                continue
            out.append(resp if resp.code in accepted else MQBrokerError(resp.code, resp.remark, addr))
        return out

    def _each(self, addrs: Sequence[str], code: int, header: Header | None = None, body: bytes = b"",
              timeout_ms: int | None = None, accept: Iterable[int] = _SUCCESS) -> list[RemotingCommand | MQError]:
        """The same request to every address at once; see :meth:`_invoke_all`."""
        ext = None if header is None else header.to_ext()
        return self._invoke_all([(a, RemotingCommand(code, 0, 0, None, {} if ext is None else dict(ext), body))
                                 for a in addrs], timeout_ms, accept)

    @staticmethod
    def _map(addrs: Sequence[str], outcomes: Sequence[RemotingCommand | MQError],
             read: Callable[[RemotingCommand, str], T]) -> list[T | MQError]:
        out: list[T | MQError] = []
        for addr, res in zip(addrs, outcomes, strict=False):
            if isinstance(res, MQError):
                out.append(res)
                continue
            try:
                out.append(read(res, addr))
            except MQError as exc:
                out.append(exc)
        return out

    def _namesrv(self, code: int, header: Header | None = None, body: bytes = b"", *,
                 accept: Iterable[int] = _SUCCESS, timeout_ms: int | None = None) -> tuple[RemotingCommand, str]:
        """Ask a name server, failing over to the next one in the list on a connection failure or timeout:
        (the answer, who answered).

        Each attempt gets an equal share of what is left of ``timeout_ms``, so a dead name server cannot use
        up the whole budget. Raises MQBrokerError for a response code not in ``accept``, RequestTimeoutError
        / MQClientError when no name server answered.
        """
        addrs = self.namesrv_addrs
        n = len(addrs)
        if not n:
            raise MQClientError("no name server address", ClientErrorCode.NO_NAME_SERVER_EXCEPTION)
        timeout = self._timeout(timeout_ms)
        deadline = time.monotonic() + timeout / 1000.0
        ext = {} if header is None else header.to_ext()
        last: RemotingError | None = None
        for attempt in range(n):
            index = self._ns_index
            addr = addrs[index % n]
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            cmd = RemotingCommand(code, 0, 0, None, dict(ext), body)
            try:
                resp = self.remoting.invoke_sync(addr, cmd, max(1, remaining_ms // (n - attempt)))
            except (RemotingConnectError, RemotingTimeoutError) as exc:
                last = exc
                if self._ns_index == index:
                    self._ns_index = index + 1
                continue
            except RemotingSendRequestError as exc:
                raise from_remoting(exc, addr) from exc
            if resp.code not in accept:
                raise MQBrokerError(resp.code, resp.remark, addr)
            return resp, addr
        if last is None or isinstance(last, RemotingTimeoutError):
            raise RequestTimeoutError(
                f"no name server of {';'.join(addrs)} answered within {timeout} ms",
                ClientErrorCode.ACCESS_BROKER_TIMEOUT,
            )
        raise MQClientError(f"no name server of {';'.join(addrs)} reachable: {last}",
                            ClientErrorCode.NO_NAME_SERVER_EXCEPTION) from last

    # -- name server -----------------------------------------------------------

    def get_topic_route(self, topic: str, timeout_ms: int | None = None) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC: ``topic``'s route; MQBrokerError(TOPIC_NOT_EXIST) when the name server has none."""
        resp, addr = self._namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic),
                                   timeout_ms=timeout_ms)
        try:
            return TopicRouteData.from_json(_json_object(resp, addr))
        except (ValueError, KeyError, TypeError) as exc:
            raise MQClientError(f"malformed route of topic {topic!r} from the name server: {exc}") from exc

    def get_broker_cluster_info(self, timeout_ms: int | None = None, addr: str | None = None) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO: the cluster table, from the name servers (or the one at ``addr``)."""
        if addr is None:
            resp, addr = self._namesrv(RequestCode.GET_BROKER_CLUSTER_INFO, timeout_ms=timeout_ms)
        else:
            resp = self.invoke(addr, RequestCode.GET_BROKER_CLUSTER_INFO, timeout_ms=timeout_ms)
        try:
            return ClusterInfo.from_json(_json_object(resp, addr))
        except (KeyError, TypeError, ValueError) as exc:
            raise MQClientError(f"malformed cluster info: {exc}") from exc

    def get_all_topic_list(self, timeout_ms: int | None = None) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER: every topic the name servers know."""
        resp, addr = self._namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout_ms=timeout_ms)
        return [str(t) for t in _json_object(resp, addr).get("topicList") or []]

    def delete_topic_in_namesrv(self, addrs: Sequence[str], topic: str, timeout_ms: int | None = None
                                ) -> list[MQError | None]:
        """DELETE_TOPIC_IN_NAMESRV on each name server at ``addrs``: per address None, or its error."""
        return [r if isinstance(r, MQError) else None
                for r in self._each(addrs, RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                    DeleteTopicFromNamesrvRequestHeader(topic), timeout_ms=timeout_ms)]

    # -- sends (the hot path) --------------------------------------------------

    @staticmethod
    def _send_command(header: SendMessageRequestHeader, body: bytes, traceparent: str | None) -> RemotingCommand:
        return RemotingCommand(_SEND_BATCH_MESSAGE if header.batch else _SEND_MESSAGE, 0, 0, None,
                               header.to_ext(), body, traceparent)

    def send_message(self, addr: str, mq: MessageQueue, header: SendMessageRequestHeader, body: bytes,
                     msg_id: str, timeout_ms: int, traceparent: str | None = None) -> SendResult:
        """SEND_MESSAGE (SEND_BATCH_MESSAGE when ``header.batch``) to ``mq`` at ``addr``, waiting for the answer.

        ``msg_id`` is the message's unique id (comma separated for a batch). Raises MQBrokerError when the
        broker did not store it, else the SDK error of the remoting failure (its cause)."""
        try:
            resp = self.remoting.invoke_sync(addr, self._send_command(header, body, traceparent), timeout_ms)
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc
        return send_result(resp, mq, msg_id, addr)

    async def send_message_from_loop(self, addr: str, mq: MessageQueue, header: SendMessageRequestHeader,
                                     body: bytes, msg_id: str, timeout_ms: int,
                                     traceparent: str | None = None) -> SendResult:
        """:meth:`send_message` awaited on the running event loop, through the loop's own socket to ``addr``
        (``RemotingClient.invoke_from_loop``): the same answer and errors, without blocking the loop."""
        try:
            resp = await self.remoting.invoke_from_loop(addr, self._send_command(header, body, traceparent),
                                                        timeout_ms)
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc
        return send_result(resp, mq, msg_id, addr)

    def send_message_async(self, addr: str, mq: MessageQueue, header: SendMessageRequestHeader, body: bytes,
                           msg_id: str, timeout_ms: int, done: SendDone, traceparent: str | None = None) -> None:
        """SEND_MESSAGE (or SEND_BATCH_MESSAGE) without waiting: ``done(result, error)`` is called on the remoting
        I/O thread (short, never blocking). A failure to hand it to the wire is raised here."""
        try:
            self.remoting.invoke_with_callback(addr, self._send_command(header, body, traceparent), timeout_ms,
                                               _SendAnswer(addr, mq, msg_id, done))
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc

    def send_message_oneway(self, addr: str, header: SendMessageRequestHeader, body: bytes, timeout_ms: int,
                            traceparent: str | None = None) -> None:
        """SEND_MESSAGE wanting no answer: the broker may or may not store it."""
        try:
            self.remoting.invoke_oneway(addr, self._send_command(header, body, traceparent), timeout_ms)
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc

    # -- pulls (the other hot path) -------------------------------------------

    @staticmethod
    def _pull_response(resp: RemotingCommand, addr: str) -> PullResponse:
        if resp.code not in PULL_ANSWER_CODES:
            raise MQBrokerError(resp.code, resp.remark, addr)
        return PullResponse(resp.code, _response_header(PullMessageResponseHeader, resp, addr), resp.body)

    def pull_message(self, addr: str, header: PullMessageRequestHeader, timeout_ms: int,
                     traceparent: str | None = None) -> PullResponse:
        """PULL_MESSAGE, waiting for the answer; MQBrokerError for a refusal."""
        cmd = RemotingCommand(_PULL_MESSAGE, 0, 0, None, header.to_ext(), b"", traceparent)
        try:
            resp = self.remoting.invoke_sync(addr, cmd, timeout_ms)
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc
        return self._pull_response(resp, addr)

    def pull_message_async(self, addr: str, header: PullMessageRequestHeader, timeout_ms: int, done: PullDone,
                           traceparent: str | None = None) -> None:
        """PULL_MESSAGE without waiting: ``done(response, None)`` or ``done(None, error)`` on the remoting I/O
        thread (short, never blocking). A failure to hand it to the wire is raised here."""
        def on_response(resp: RemotingCommand | None, error: BaseException | None) -> None:
            if resp is None:
                done(None, from_remoting(error, addr) if isinstance(error, RemotingError) else error)
                return
            try:
                answer = self._pull_response(resp, addr)
            except MQError as exc:
                done(None, exc)
                return
            done(answer, None)

        cmd = RemotingCommand(_PULL_MESSAGE, 0, 0, None, header.to_ext(), b"", traceparent)
        try:
            self.remoting.invoke_with_callback(addr, cmd, timeout_ms, on_response)
        except RemotingError as exc:
            raise from_remoting(exc, addr) from exc

    # -- clients and groups ----------------------------------------------------

    def heartbeat(self, addrs: Sequence[str], data: dict[str, Any], timeout_ms: int | None = None
                  ) -> list[MQError | None]:
        """HEART_BEAT (RocketMQ's HeartbeatData: client id, producer and consumer groups) to every address:
        per address None when it took it, or the error (MQBrokerError: it answered, and refused)."""
        return [r if isinstance(r, MQError) else None
                for r in self._each(addrs, RequestCode.HEART_BEAT, body=orjson.dumps(data), timeout_ms=timeout_ms)]

    def unregister_client(self, addrs: Sequence[str], header: UnregisterClientRequestHeader,
                          timeout_ms: int | None = None) -> list[MQError | None]:
        """UNREGISTER_CLIENT at every address: per address None, or its error."""
        return [r if isinstance(r, MQError) else None
                for r in self._each(addrs, RequestCode.UNREGISTER_CLIENT, header, timeout_ms=timeout_ms)]

    def check_client_config(self, addr: str, group: str, subscription: dict[str, Any],
                            timeout_ms: int | None = None) -> None:
        """CHECK_CLIENT_CONFIG: can the broker run ``subscription`` (SubscriptionData as JSON)? MQBrokerError if not."""
        body = orjson.dumps({"group": group, "subscriptionData": subscription})
        self.invoke(addr, RequestCode.CHECK_CLIENT_CONFIG, body=body, timeout_ms=timeout_ms)

    def get_consumer_id_list(self, addrs: Sequence[str], group: str, timeout_ms: int | None = None
                             ) -> list[list[str] | MQError]:
        """GET_CONSUMER_LIST_BY_GROUP at every address: the client ids of ``group`` each knows (a broker
        that knows none answers SYSTEM_ERROR: an MQBrokerError here)."""
        outcomes = self._each(addrs, RequestCode.GET_CONSUMER_LIST_BY_GROUP, ConsumerGroupRequestHeader(group),
                              timeout_ms=timeout_ms)
        return self._map(addrs, outcomes,
                         lambda r, a: [str(i) for i in _json_object(r, a).get("consumerIdList") or []])

    def get_consumer_connection_list(self, addrs: Sequence[str], group: str, timeout_ms: int | None = None
                                     ) -> list[dict[str, Any] | MQError]:
        """GET_CONSUMER_CONNECTION_LIST at every address: RocketMQ's ConsumerConnection as JSON."""
        outcomes = self._each(addrs, RequestCode.GET_CONSUMER_CONNECTION_LIST, ConsumerGroupRequestHeader(group),
                              timeout_ms=timeout_ms)
        return self._map(addrs, outcomes, _json_object)

    def get_consume_stats(self, addrs: Sequence[str], header: GetConsumeStatsRequestHeader,
                          timeout_ms: int | None = None) -> list[dict[str, Any] | MQError]:
        """GET_CONSUME_STATS at every address: RocketMQ's ConsumeStats as JSON."""
        return self._map(addrs, self._each(addrs, RequestCode.GET_CONSUME_STATS, header, timeout_ms=timeout_ms),
                         _json_object)

    def get_producer_connection_list(self, addrs: Sequence[str], group: str, timeout_ms: int | None = None
                                     ) -> list[dict[str, Any] | MQError]:
        """GET_PRODUCER_CONNECTION_LIST at every address: RocketMQ's ProducerConnection as JSON (a broker with
        no client of the group answers SYSTEM_ERROR: an MQBrokerError here)."""
        outcomes = self._each(addrs, RequestCode.GET_PRODUCER_CONNECTION_LIST, ProducerGroupRequestHeader(group),
                              timeout_ms=timeout_ms)
        return self._map(addrs, outcomes, _json_object)

    def query_topic_consume_by_who(self, addrs: Sequence[str], topic: str, timeout_ms: int | None = None
                                   ) -> list[list[str] | MQError]:
        """QUERY_TOPIC_CONSUME_BY_WHO at every address: the groups each broker knows to consume ``topic``
        (subscribed by an online consumer, or with an offset committed there)."""
        outcomes = self._each(addrs, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, TopicRequestHeader(topic),
                              timeout_ms=timeout_ms)
        return self._map(addrs, outcomes, lambda r, a: [str(g) for g in _json_object(r, a).get("groupList") or []])

    def get_broker_consume_stats(self, addr: str, is_order: bool = False, timeout_ms: int | None = None
                                 ) -> ConsumeStatsList:
        """GET_BROKER_CONSUME_STATS: the progress of every group with offsets on the broker at ``addr``
        (``is_order``: in ordered topics only)."""
        resp = self.invoke(addr, RequestCode.GET_BROKER_CONSUME_STATS, GetConsumeStatsInBrokerHeader(is_order),
                           timeout_ms=timeout_ms)
        try:
            return ConsumeStatsList.from_json(_json(resp, addr))
        except ValueError as exc:
            raise MQClientError(f"the consume stats of {addr} are malformed: {exc}") from None

    def lock_batch_mq(self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue],
                      timeout_ms: int | None = None) -> set[MessageQueue]:
        """LOCK_BATCH_MQ: lock ``mqs`` (of the broker at ``addr``) for ``client_id``; the queues locked."""
        body = orjson.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": [_mq_json(m) for m in mqs]})
        resp = self.invoke(addr, RequestCode.LOCK_BATCH_MQ, body=body, timeout_ms=timeout_ms)
        try:
            return {MessageQueue(d["topic"], d["brokerName"], int(d["queueId"]))
                    for d in _json_object(resp, addr).get("lockOKMQSet") or []}
        except (KeyError, TypeError, ValueError) as exc:
            raise MQClientError(f"malformed lock answer from {addr}: {exc}") from exc

    def unlock_batch_mq(self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue],
                        timeout_ms: int | None = None) -> None:
        """UNLOCK_BATCH_MQ: release ``client_id``'s locks of ``mqs``."""
        body = orjson.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": [_mq_json(m) for m in mqs]})
        self.invoke(addr, RequestCode.UNLOCK_BATCH_MQ, body=body, timeout_ms=timeout_ms)

    def consumer_send_msg_back(self, addr: str, header: ConsumerSendMsgBackRequestHeader,
                               timeout_ms: int | None = None, traceparent: str | None = None) -> None:
        """CONSUMER_SEND_MSG_BACK: have the broker retry (or dead-letter) a message the group failed to consume."""
        self.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header, timeout_ms=timeout_ms, traceparent=traceparent)

    # -- offsets ---------------------------------------------------------------

    def get_max_offset(self, addr: str, mq: MessageQueue, timeout_ms: int | None = None) -> int:
        """GET_MAX_OFFSET: the offset one past the last message of ``mq``."""
        resp = self.invoke(addr, RequestCode.GET_MAX_OFFSET, QueueOffsetRequestHeader(mq.topic, mq.queue_id),
                           timeout_ms=timeout_ms)
        return _response_header(QueueOffsetResponseHeader, resp, addr).offset

    def get_min_offset(self, addr: str, mq: MessageQueue, timeout_ms: int | None = None) -> int:
        """GET_MIN_OFFSET: the offset of the first message of ``mq`` still stored."""
        resp = self.invoke(addr, RequestCode.GET_MIN_OFFSET, QueueOffsetRequestHeader(mq.topic, mq.queue_id),
                           timeout_ms=timeout_ms)
        return _response_header(QueueOffsetResponseHeader, resp, addr).offset

    def get_earliest_msg_storetime(self, addr: str, mq: MessageQueue, timeout_ms: int | None = None) -> int:
        """GET_EARLIEST_MSG_STORETIME: the store time (epoch ms) of the first message of ``mq`` still stored."""
        resp = self.invoke(addr, RequestCode.GET_EARLIEST_MSG_STORETIME,
                           QueueOffsetRequestHeader(mq.topic, mq.queue_id), timeout_ms=timeout_ms)
        return _response_header(EarliestMsgStoretimeResponseHeader, resp, addr).timestamp

    def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int, timeout_ms: int | None = None) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the first offset of ``mq`` stored at or after ``timestamp_ms``."""
        resp = self.invoke(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                           SearchOffsetRequestHeader(mq.topic, mq.queue_id, int(timestamp_ms)), timeout_ms=timeout_ms)
        return _response_header(QueueOffsetResponseHeader, resp, addr).offset

    def query_consumer_offset(self, addr: str, header: QueryConsumerOffsetRequestHeader,
                              timeout_ms: int | None = None) -> int | None:
        """QUERY_CONSUMER_OFFSET: the group's stored offset of one queue; None when it has none."""
        resp = self.invoke(addr, RequestCode.QUERY_CONSUMER_OFFSET, header,
                           accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), timeout_ms=timeout_ms)
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return _response_header(QueueOffsetResponseHeader, resp, addr).offset

    def update_consumer_offset(self, addr: str, header: UpdateConsumerOffsetRequestHeader,
                               timeout_ms: int | None = None) -> None:
        """UPDATE_CONSUMER_OFFSET: store the group's offset of one queue."""
        self.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout_ms=timeout_ms)

    def update_consumer_offsets(self, calls: Sequence[tuple[str, UpdateConsumerOffsetRequestHeader]],
                                timeout_ms: int | None = None) -> list[MQError | None]:
        """UPDATE_CONSUMER_OFFSET of each ``(addr, header)``, all at once: per call None, or its error."""
        outcomes = self._invoke_all([(a, RemotingCommand(RequestCode.UPDATE_CONSUMER_OFFSET, 0, 0, None, h.to_ext()))
                                     for a, h in calls], timeout_ms)
        return [r if isinstance(r, MQError) else None for r in outcomes]

    def invoke_broker_to_reset_offset(self, addrs: Sequence[str], header: ResetOffsetRequestHeader,
                                      timeout_ms: int | None = None) -> list[dict[str, Any] | MQError]:
        """INVOKE_BROKER_TO_RESET_OFFSET at every address: each broker's new offsets ({"offsetTable": [...]})."""
        return self._map(addrs, self._each(addrs, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header,
                                           timeout_ms=timeout_ms), _json_object)

    # -- topics and subscription groups (admin) --------------------------------

    def update_and_create_topic(self, addrs: Sequence[str], header: CreateTopicRequestHeader,
                                timeout_ms: int | None = None) -> None:
        """UPDATE_AND_CREATE_TOPIC on every address; raises the first failure once all answered."""
        raise_first(self._each(addrs, RequestCode.UPDATE_AND_CREATE_TOPIC, header, timeout_ms=timeout_ms))

    def delete_topic_in_broker(self, addrs: Sequence[str], topic: str, timeout_ms: int | None = None) -> None:
        """DELETE_TOPIC_IN_BROKER on every address; raises the first failure once all answered."""
        raise_first(self._each(addrs, RequestCode.DELETE_TOPIC_IN_BROKER, TopicRequestHeader(topic),
                               timeout_ms=timeout_ms))

    def get_all_topic_config(self, addr: str, timeout_ms: int | None = None) -> dict[str, dict[str, Any]]:
        """GET_ALL_TOPIC_CONFIG: topic -> RocketMQ's TopicConfig fields."""
        resp = self.invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG, timeout_ms=timeout_ms)
        return dict(_json_object(resp, addr).get("topicConfigTable") or {})

    def get_topic_stats_info(self, addrs: Sequence[str], topic: str, timeout_ms: int | None = None
                             ) -> list[dict[str, Any] | MQError]:
        """GET_TOPIC_STATS_INFO at every address: RocketMQ's TopicStatsTable as JSON."""
        return self._map(addrs, self._each(addrs, RequestCode.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic),
                                           timeout_ms=timeout_ms), _json_object)

    def update_and_create_subscription_group(self, addrs: Sequence[str], config: dict[str, Any],
                                             timeout_ms: int | None = None) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (RocketMQ's SubscriptionGroupConfig as JSON) on every address;
        raises the first failure once all answered."""
        raise_first(self._each(addrs, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=orjson.dumps(config),
                               timeout_ms=timeout_ms))

    def get_all_subscription_group(self, addr: str, timeout_ms: int | None = None) -> dict[str, dict[str, Any]]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: group -> RocketMQ's SubscriptionGroupConfig fields."""
        resp = self.invoke(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, timeout_ms=timeout_ms)
        return dict(_json_object(resp, addr).get("subscriptionGroupTable") or {})

    def delete_subscription_group(self, addrs: Sequence[str], group: str, timeout_ms: int | None = None) -> None:
        """DELETE_SUBSCRIPTIONGROUP on every address; raises the first failure once all answered."""
        raise_first(self._each(addrs, RequestCode.DELETE_SUBSCRIPTIONGROUP, SubscriptionGroupRequestHeader(group),
                               timeout_ms=timeout_ms))

    # -- brokers' state --------------------------------------------------------

    def get_broker_runtime_info(self, addr: str, timeout_ms: int | None = None) -> dict[str, Any]:
        """GET_BROKER_RUNTIME_INFO: RocketMQ's KVTable, name -> value."""
        resp = self.invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout_ms=timeout_ms)
        return dict(_json_object(resp, addr).get("table") or {})

    def get_broker_metrics(self, addr: str, timeout_ms: int | None = None) -> tuple[str, list[dict[str, Any]]]:
        """GET_BROKER_METRICS: (the broker's Prometheus URL, '' when disabled; its samples)."""
        body = _json_object(self.invoke(addr, RequestCode.GET_BROKER_METRICS, timeout_ms=timeout_ms), addr)
        return str(body.get("url") or ""), list(body.get("metrics") or [])

    def get_acl_account(self, addr: str, timeout_ms: int | None = None) -> dict[str, Any]:
        """GET_ACL_ACCOUNT: what the account this client signs as may do on the broker ``addr`` (JSON)."""
        return _json_object(self.invoke(addr, RequestCode.GET_ACL_ACCOUNT, timeout_ms=timeout_ms), addr)

    def get_broker_config(self, addr: str, timeout_ms: int | None = None) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings (RocketMQ's ``key=value`` lines)."""
        resp = self.invoke(addr, RequestCode.GET_BROKER_CONFIG, timeout_ms=timeout_ms)
        return dict(line.split("=", 1) for line in resp.body.decode(errors="replace").splitlines() if "=" in line)

    def get_consumer_running_info(self, addr: str, timeout_ms: int | None = None) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO: a system service's status (scheduler, txn-checker, ha) as JSON."""
        data = _json(self.invoke(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, timeout_ms=timeout_ms), addr)
        return data if isinstance(data, dict) else {}

    def get_client_running_info(self, addr: str, header: GetConsumerRunningInfoRequestHeader,
                                timeout_ms: int | None = None) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO through the broker at ``addr``, which asks the consumer client the header
        names over that client's own connection: its ConsumerRunningInfo."""
        resp = self.invoke(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, header, timeout_ms=timeout_ms)
        try:
            return ConsumerRunningInfo.decode(resp.body)
        except ValueError as exc:
            raise MQClientError(f"the running info of client {header.client_id} (through {addr}) is malformed: "
                                f"{exc}") from None

    def consume_message_directly(self, addr: str, header: ConsumeMessageDirectlyResultRequestHeader,
                                 timeout_ms: int | None = None) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY through the broker at ``addr`` (the one storing the message): the consumer
        client the header names runs the message through its listener and says how that went."""
        resp = self.invoke(addr, RequestCode.CONSUME_MESSAGE_DIRECTLY, header, timeout_ms=timeout_ms)
        try:
            return ConsumeMessageDirectlyResult.decode(resp.body)
        except ValueError as exc:
            raise MQClientError(f"the answer of client {header.client_id} (through {addr}) is malformed: "
                                f"{exc}") from None

    # -- messages --------------------------------------------------------------

    def view_message(self, addr: str, offset: int, timeout_ms: int | None = None) -> bytes:
        """VIEW_MESSAGE_BY_ID: the record at commitlog ``offset``."""
        return self.invoke(addr, RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset),
                           timeout_ms=timeout_ms).body

    def view_messages(self, addr: str, offsets: Sequence[int], timeout_ms: int | None = None
                      ) -> list[bytes | MQError]:
        """VIEW_MESSAGE_BY_ID of each of ``offsets``, all at once: per offset its record, or the error."""
        outcomes = self._invoke_all([(addr, RemotingCommand(RequestCode.VIEW_MESSAGE_BY_ID, 0, 0, None,
                                                            ViewMessageRequestHeader(o).to_ext()))
                                     for o in offsets], timeout_ms)
        return [r if isinstance(r, MQError) else r.body for r in outcomes]

    def query_message(self, addrs: Sequence[str], header: QueryMessageRequestHeader,
                      timeout_ms: int | None = None) -> list[bytes | MQError]:
        """QUERY_MESSAGE by key at every address: the matching records back to back (QUERY_NOT_FOUND is an
        MQBrokerError here)."""
        return [r if isinstance(r, MQError) else r.body
                for r in self._each(addrs, RequestCode.QUERY_MESSAGE, header, timeout_ms=timeout_ms)]

    def query_consume_queue(self, addr: str, header: QueryConsumeQueueRequestHeader,
                            timeout_ms: int | None = None) -> dict[str, Any]:
        """QUERY_CONSUME_QUEUE: entries of one consume queue ({"queueData": [...], "maxQueueIndex", ...})."""
        return _json_object(self.invoke(addr, RequestCode.QUERY_CONSUME_QUEUE, header, timeout_ms=timeout_ms), addr)

    # -- transactions ----------------------------------------------------------

    def end_transaction_oneway(self, addr: str, header: EndTransactionRequestHeader,
                               timeout_ms: int | None = None, traceparent: str | None = None) -> None:
        """END_TRANSACTION, wanting no answer (as RocketMQ sends it)."""
        self._oneway(addr, RequestCode.END_TRANSACTION, header, timeout_ms, traceparent)

    def get_pending_half_messages(self, addrs: Sequence[str], header: PendingHalfMessagesRequestHeader,
                                  timeout_ms: int | None = None) -> list[list[dict[str, Any]] | MQError]:
        """GET_PENDING_HALF_MESSAGES at every address: each broker's undecided half messages as JSON."""
        def read(resp: RemotingCommand, addr: str) -> list[dict[str, Any]]:
            data = _json(resp, addr) if resp.body else []
            if not isinstance(data, list):
                raise MQClientError(f"the answer from {addr} is not a JSON list")
            return data
        return self._map(addrs, self._each(addrs, RequestCode.GET_PENDING_HALF_MESSAGES, header,
                                           timeout_ms=timeout_ms), read)

    def check_half_messages(self, addr: str, checks: Sequence[tuple[CheckHalfMessageRequestHeader, str | None]],
                            timeout_ms: int | None = None) -> list[HalfCheckOutcome | MQError]:
        """CHECK_HALF_MESSAGE of each ``(header, traceparent)`` at ``addr``, all at once: per check what the
        broker did, or the error."""
        outcomes = self._invoke_all([(addr, RemotingCommand(RequestCode.CHECK_HALF_MESSAGE, 0, 0, None, h.to_ext(),
                                                            b"", tp)) for h, tp in checks], timeout_ms)

        def read(resp: RemotingCommand, addr: str) -> HalfCheckOutcome:
            outcome = _response_header(CheckHalfMessageResponseHeader, resp, addr).outcome
            try:
                return HalfCheckOutcome(outcome)
            except ValueError:
                raise MQClientError(f"the answer from {addr} names an unknown outcome {outcome!r}") from None
        return self._map([addr] * len(checks), outcomes, read)

    # -- system services -------------------------------------------------------

    def deliver_due_messages(self, calls: Sequence[tuple[str, DeliverDueMessagesRequestHeader, bytes]],
                             timeout_ms: int | None = None) -> list[DeliverDueAnswer | MQError]:
        """DELIVER_DUE_MESSAGES of each ``(addr, header, body)``, all at once: per call the broker's answer,
        or the error."""
        outcomes = self._invoke_all([(a, RemotingCommand(RequestCode.DELIVER_DUE_MESSAGES, 0, 0, None, h.to_ext(), b))
                                     for a, h, b in calls], timeout_ms)
        return self._map([a for a, _, _ in calls], outcomes, lambda r, a: DeliverDueAnswer(
            _response_header(DeliverDueMessagesResponseHeader, r, a), _json_object(r, a)))

    def ha_transfer(self, master: str, header: HaTransferRequestHeader, timeout_ms: int | None = None
                    ) -> tuple[HaTransferResponseHeader, bytes]:
        """HA_TRANSFER: commitlog bytes from the master (the answer's header, the bytes)."""
        resp = self.invoke(master, RequestCode.HA_TRANSFER, header, timeout_ms=timeout_ms)
        return _response_header(HaTransferResponseHeader, resp, master), resp.body

    def ha_append(self, slave: str, header: HaAppendRequestHeader, data: bytes,
                  timeout_ms: int | None = None) -> HaAppendAnswer:
        """HA_APPEND: hand the master's bytes to the slave; taken or refused, it says where its commitlog ends."""
        # A refusal (SYSTEM_ERROR) still says where the slave's commitlog ends: the sender goes on from there.
        resp = self.invoke(slave, RequestCode.HA_APPEND, header, data,
                           accept=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR), timeout_ms=timeout_ms)
        accepted = resp.code == ResponseCode.SUCCESS
        try:
            offset: int | None = HaAppendResponseHeader.from_ext(resp.ext).offset
        except HeaderError as exc:
            if accepted:
                raise MQClientError(f"the answer from {slave} is malformed: {exc}") from None
            offset = None
        return HaAppendAnswer(accepted, offset, resp.remark or "")
