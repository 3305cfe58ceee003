"""One pull from a broker: the request, the response decoded, the client-side tag check
(RocketMQ's PullAPIWrapper)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rocketmesh.client.api import PullResponse
from rocketmesh.client.consumer.types import PullResult, PullStatus
from rocketmesh.filter import ExpressionType, SubscriptionData
from rocketmesh.model.codec import decode_records
from rocketmesh.model.message import MessageConst, MessageQueue
from rocketmesh.model.route import MASTER_ID
from rocketmesh.remoting import ResponseCode
from rocketmesh.remoting.protocol.headers import PullMessageRequestHeader, PullSysFlag

if TYPE_CHECKING:
    from rocketmesh.client.instance import ClientInstance

_STATUS: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
_FOUND = ResponseCode.SUCCESS
_TAGS = MessageConst.TAGS
_MIN_OFFSET = MessageConst.MIN_OFFSET
_MAX_OFFSET = MessageConst.MAX_OFFSET


def build_sys_flag(commit_offset: bool, suspend: bool, subscription: bool) -> int:
    """RocketMQ's PullSysFlag.buildSysFlag."""
    return ((PullSysFlag.COMMIT_OFFSET if commit_offset else 0) | (PullSysFlag.SUSPEND if suspend else 0)
            | (PullSysFlag.SUBSCRIPTION if subscription else 0))


def decode_pull_response(answer: PullResponse, sub: SubscriptionData) -> PullResult:
    """A pull's answer as a PullResult: its messages decoded and tag-checked (RocketMQ's processPullResult)."""
    h = answer.header
    status = _STATUS[answer.code]
    result = PullResult(status, h.next_begin_offset, h.min_offset, h.max_offset,
                        suggest_which_broker_id=h.suggest_which_broker_id)
    if status is PullStatus.FOUND and answer.body:
        msgs = decode_records(answer.body, {_MIN_OFFSET: str(result.min_offset), _MAX_OFFSET: str(result.max_offset)})
        # The broker filters by tag hash code; two tags can share one, so check the tag itself.
        if sub.expression_type is ExpressionType.TAG and not sub.matches_all():
            tags_set = sub.tags_set
            msgs = [m for m in msgs if m.properties.get(_TAGS) in tags_set]
        result.messages = msgs
    return result


class PullAPI:
    """Sends pulls for one consumer group through a client instance."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        #: Which broker of its group each queue is pulled from next, as the last answer suggested
        #: (RocketMQ's pullFromWhichNodeTable): a slave while the consumer is far behind, with slaveReadEnable.
        self._from_which: dict[MessageQueue, int] = {}

    def _addr(self, mq: MessageQueue) -> str:
        return self.instance.find_broker_addr(mq, self._from_which.get(mq, MASTER_ID))

    def _heed(self, mq: MessageQueue, result: PullResult) -> None:
        if result.suggest_which_broker_id != self._from_which.get(mq, MASTER_ID):
            self._from_which[mq] = result.suggest_which_broker_id

    def _header(self, mq: MessageQueue, sub: SubscriptionData, offset: int, max_nums: int, sys_flag: int,
                commit_offset: int, suspend_timeout_ms: int) -> PullMessageRequestHeader:
        return PullMessageRequestHeader(self.group, mq.topic, mq.queue_id, offset, max_nums, sys_flag, commit_offset,
                                        suspend_timeout_ms, sub.sub_string, sub.sub_version, sub.expression_type.value)

    def pull_async(self, mq: MessageQueue, sub: SubscriptionData, offset: int, max_nums: int, *,
                   sys_flag: int = 0, commit_offset: int = 0, suspend_timeout_ms: int = 0, timeout_ms: int = 30_000,
                   callback: Callable[[PullResult | None, BaseException | None], None],
                   on_found: Callable[[int], None] | None = None, traceparent: str | None = None) -> None:
        """Pull and call ``callback(result, None)`` or ``callback(None, error)``; the request's header carries
        ``traceparent`` (the pull's span), when given.

        Both callbacks run on the remoting I/O thread, as soon as the answer is read: they must be short
        and never block (queue work elsewhere; a pull they send is queued, not waited for).
        ``on_found(next_begin_offset)``, when given, is called for a FOUND answer that leaves more to read
        before its messages are decoded, so the caller can send its next pull first. An answer that
        reaches the queue's end is decoded and handed on first: the next pull would only wait.
        """
        addr = self._addr(mq)
        header = self._header(mq, sub, offset, max_nums, sys_flag, commit_offset, suspend_timeout_ms)

        def done(answer: PullResponse | None, error: BaseException | None) -> None:
            if answer is None:
                callback(None, error)
                return
            if on_found is not None and answer.code == _FOUND:
                nxt = answer.header.next_begin_offset
                if nxt < answer.header.max_offset:
                    on_found(nxt)
            try:
                result = decode_pull_response(answer, sub)
            except Exception as exc:  # noqa: BLE001 - a bad answer is the caller's error to handle
                callback(None, exc)
                return
            self._heed(mq, result)
            callback(result, None)

        self.instance.api.pull_message_async(addr, header, timeout_ms, done, traceparent)

    def pull_sync(self, mq: MessageQueue, sub: SubscriptionData, offset: int, max_nums: int, *,
                  sys_flag: int = 0, commit_offset: int = 0, suspend_timeout_ms: int = 0,
                  timeout_ms: int = 10_000, traceparent: str | None = None) -> PullResult:
        """Pull and wait for the answer; the request's header carries ``traceparent``, when given."""
        addr = self._addr(mq)
        header = self._header(mq, sub, offset, max_nums, sys_flag, commit_offset, suspend_timeout_ms)
        result = decode_pull_response(self.instance.api.pull_message(addr, header, timeout_ms, traceparent), sub)
        self._heed(mq, result)
        return result
