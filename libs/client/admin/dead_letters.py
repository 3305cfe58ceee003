"""Dead letters and retry history: what :class:`~rocketmesh.client.admin.admin.Admin` does with ``%DLQ%<group>``
and ``%RETRY%<group>``.

A dead-letter topic is write-only for users (consumers cannot pull it), so
the admin reads it straight from each broker (:mod:`.queue_reader`).

A resend is a new message to the original topic (RETRY_TOPIC of the
dead-lettered copy) with the copy's body, flag, tags, keys and user
properties; it gets a new message id. The dead-lettered copy stays where it
is (the log is append-only), so resending the same message twice sends it
twice.

A message's retry history is every stored copy of it: the original, each
retry parked in SCHEDULE_TOPIC_XXXX and delivered to ``%RETRY%<group>``, and
the dead-lettered one. Every copy keeps the original's UNIQ_KEY, and the
broker indexes ``topic#UNIQ_KEY``, so each topic's copies are one
QUERY_MESSAGE away.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rocketmesh.client.admin.queue_reader import read_queue
from rocketmesh.client.errors import MQBrokerError, MQClientError, MQError
from rocketmesh.client.results import SendResult
from rocketmesh.client.unique_id import looks_like_message_id
from rocketmesh.client.validators import check_group
from rocketmesh.model.message import Message, MessageConst, MessageExt
from rocketmesh.model.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    dlq_topic,
    retry_topic,
)
from rocketmesh.remoting import ResponseCode

if TYPE_CHECKING:
    from rocketmesh.client.instance import ClientInstance
    from rocketmesh.client.producer.producer import Producer
    from rocketmesh.model.route import TopicRouteData

#: The producer group resends go out with (RocketMQ's MixAll.CLIENT_INNER_PRODUCER_GROUP).
RESEND_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
#: Characters of a body shown in a listing.
BODY_PREVIEW_CHARS = 64
#: Properties of a stored copy that describe its storage, retries or delay, not the message: not resent.
_NOT_RESENT = frozenset({
    MessageConst.RETRY_TOPIC, MessageConst.ORIGIN_MESSAGE_ID, MessageConst.RECONSUME_TIME,
    MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, MessageConst.MAX_RECONSUME_TIMES, MessageConst.DELAY_TIME_LEVEL,
    MessageConst.REAL_TOPIC, MessageConst.REAL_QUEUE_ID, MessageConst.MIN_OFFSET, MessageConst.MAX_OFFSET,
    MessageConst.CONSUME_START_TIME, MessageConst.TRANSACTION_PREPARED, MessageConst.PRODUCER_GROUP,
    MessageConst.TRANSACTION_CHECK_TIMES, MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS,
    MessageConst.WAIT_STORE_MSG_OK, MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_MS,
    MessageConst.TRACE_CONTEXT,
})


def original_topic(msg: MessageExt) -> str:
    """The topic ``msg`` was first sent to: RETRY_TOPIC on a retried or dead-lettered copy, else REAL_TOPIC
    on a parked one, else its own topic."""
    props = msg.properties
    return props.get(MessageConst.RETRY_TOPIC) or props.get(MessageConst.REAL_TOPIC) or msg.topic


def body_preview(body: bytes, limit: int = BODY_PREVIEW_CHARS) -> str:
    """The start of a body as text (undecodable bytes replaced), "..." when cut."""
    text = body[:limit * 4].decode("utf-8", errors="replace")
    return text[:limit] + "..." if len(text) > limit or len(body) > limit * 4 else text


@dataclass
class DeadLetter:
    """One message in a group's dead-letter queue."""

    #: The stored copy in ``%DLQ%<group>`` (its store host names the broker).
    message: MessageExt

    @property
    def msg_id(self) -> str:
        """The message's id as its producer saw it (UNIQ_KEY), else the copy's offset id."""
        return self.message.unique_key or self.message.msg_id

    @property
    def offset_msg_id(self) -> str:
        """The dead-lettered copy's own offset message id (store host + commitlog offset)."""
        return self.message.msg_id

    @property
    def origin_msg_id(self) -> str | None:
        """The offset message id of the original stored message (ORIGIN_MESSAGE_ID)."""
        return self.message.properties.get(MessageConst.ORIGIN_MESSAGE_ID)

    @property
    def original_topic(self) -> str:
        return original_topic(self.message)

    @property
    def reconsume_times(self) -> int:
        return self.message.reconsume_times

    @property
    def store_timestamp(self) -> int:
        return self.message.store_timestamp

    @property
    def body_preview(self) -> str:
        return body_preview(self.message.body)

    def matches(self, msg_id: str) -> bool:
        """``msg_id`` names this message: its unique key, the copy's offset id or the original's."""
        return msg_id in (self.message.unique_key, self.message.msg_id, self.origin_msg_id)


@dataclass
class ResendResult:
    """A dead letter resent to its original topic: the new message (``sent``) or why not (``error``)."""

    letter: DeadLetter
    sent: SendResult | None = None
    error: str | None = None


class AdminCalls(Protocol):
    """What dead letters need of an :class:`~rocketmesh.client.admin.admin.Admin` (which builds them)."""

    timeout_ms: int

    @property
    def instance(self) -> ClientInstance: ...

    def topic_list(self) -> list[str]: ...

    def topic_route(self, topic: str) -> TopicRouteData: ...

    def view_message(self, offset_msg_id: str) -> MessageExt: ...

    def inner_producer(self, group: str) -> Producer: ...

    def _query(self, topic: str, key: str, max_num: int, begin_ms: int,
               end_ms: int | None) -> list[MessageExt]: ...


class DeadLetters:
    """Dead-letter listing, resends and retry history over an :class:`Admin` (see the module docstring)."""

    def __init__(self, admin: AdminCalls) -> None:
        self.admin = admin

    # --- dead-letter queue ---

    def iter_dead_letters(self, group: str) -> Iterator[DeadLetter]:
        """Every message stored in ``group``'s dead-letter queue, broker by broker, queue offset order.
        Nothing when the group never dead-lettered a message; entries whose message is gone are skipped."""
        check_group(group)
        topic = dlq_topic(group)
        route = self._route_or_none(topic)
        if route is None:
            return
        queues = {qd.broker_name: max(qd.read_queue_nums, qd.write_queue_nums) for qd in route.queue_datas}
        for bd in sorted(route.broker_datas, key=lambda b: b.broker_name):
            addr = bd.select_addr()
            if addr is None:
                continue
            for queue_id in range(queues.get(bd.broker_name, 0)):
                for msg in self._read_queue(addr, topic, queue_id):
                    yield DeadLetter(msg)

    def list(self, group: str, max_num: int = 100) -> list[DeadLetter]:
        """Up to ``max_num`` messages of ``group``'s dead-letter queue (the oldest first per broker)."""
        if max_num < 1:
            raise MQClientError(f"max_num must be at least 1, got {max_num}", ResponseCode.MESSAGE_ILLEGAL)
        out = []
        for letter in self.iter_dead_letters(group):
            out.append(letter)
            if len(out) >= max_num:
                break
        return out

    def resend(self, group: str, msg_id: str | None = None) -> builtins.list[ResendResult]:
        """Resend the dead letter ``msg_id`` of ``group`` (any of its ids, see :meth:`DeadLetter.matches`),
        or with ``msg_id=None`` every one, to its original topic.

        MQClientError(NO_MESSAGE) when the message is not (or no longer) in the dead-letter queue, or the
        queue holds nothing. One result per message; a failed send is reported in its result, not raised.
        """
        check_group(group)
        if msg_id is not None:
            # By unique key the index finds it at once; by an offset id the queue is read through.
            chosen = [DeadLetter(m) for m in self._copies_in(dlq_topic(group), msg_id, None)]
            chosen = chosen or [d for d in self.iter_dead_letters(group) if d.matches(msg_id)]
            if not chosen:
                raise MQClientError(f"no message {msg_id} in the dead-letter queue of group {group} "
                                    f"({dlq_topic(group)}): never dead-lettered, or no longer stored",
                                    ResponseCode.NO_MESSAGE)
            # A message dead-lettered twice (say, by two consumers) is resent once.
            chosen = sorted(chosen, key=lambda d: (d.store_timestamp, d.message.commitlog_offset))[:1]
        else:
            chosen = list(self.iter_dead_letters(group))
            if not chosen:
                raise MQClientError(f"the dead-letter queue of group {group} ({dlq_topic(group)}) holds no "
                                    "message", ResponseCode.NO_MESSAGE)
        producer = self.admin.inner_producer(RESEND_PRODUCER_GROUP)
        out = []
        for letter in chosen:
            m = letter.message
            props = {k: v for k, v in m.properties.items() if k not in _NOT_RESENT}
            try:
                sent = producer.send(Message(letter.original_topic, m.body, properties=props, flag=m.flag))
            except MQError as exc:
                out.append(ResendResult(letter, error=str(exc)))
                continue
            out.append(ResendResult(letter, sent))
        return out

    # --- retry history ---

    def retry_history(self, msg_id: str, group: str | None = None,
                      topic: str | None = None) -> builtins.list[MessageExt]:
        """Every stored copy of the message ``msg_id`` (its unique key or the offset id of any copy), oldest
        first: the original in its topic, parked retries in SCHEDULE_TOPIC_XXXX, delivered retries in
        ``%RETRY%<group>`` and a dead-lettered copy in ``%DLQ%<group>``.

        ``group`` limits the retry and dead-letter topics searched (default: every group's); ``topic`` names
        the original topic when ``msg_id`` is a unique key (otherwise it is found from the copies).
        MQClientError(NO_MESSAGE) when no copy is found.
        """
        if not isinstance(msg_id, str) or not looks_like_message_id(msg_id):
            raise MQClientError(f"{msg_id!r} is not a message id (32 hex characters)", ResponseCode.MESSAGE_ILLEGAL)
        if group is not None:
            check_group(group)
        admin = self.admin
        seed = self._view_if_offset_id(msg_id)
        uniq = msg_id
        origin: str | None = None
        groups = [group] if group else []
        topics = [topic] if topic else []
        if seed is not None:
            if seed.unique_key is None:
                # A message sent without a unique key is indexed under none: only the copy itself is known.
                return [seed]
            uniq = seed.unique_key
            origin = seed.properties.get(MessageConst.ORIGIN_MESSAGE_ID) or seed.msg_id
            topics.append(original_topic(seed))
            for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
                if not group and seed.topic.startswith(prefix):
                    groups.append(seed.topic[len(prefix):])
        if groups:
            topics += [t for g in groups for t in (retry_topic(g), dlq_topic(g))]
        else:
            prefixes = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)
            topics += [t for t in admin.topic_list() if t.startswith(prefixes)]
        found: dict[tuple[str, int], MessageExt] = {}
        searched: set[str] = set()
        pending = list(dict.fromkeys(topics + [SCHEDULE_TOPIC]))
        while pending:
            t = pending.pop(0)
            searched.add(t)
            for m in self._copies_in(t, uniq, origin):
                if t == SCHEDULE_TOPIC and m.properties.get(MessageConst.REAL_TOPIC) not in topics:
                    continue
                found[(m.store_host, m.commitlog_offset)] = m
                # A retried copy names the original topic: search it too when it was not given.
                first = original_topic(m)
                if first not in searched and first not in pending:
                    topics.append(first)
                    pending.append(first)
        if seed is not None:
            found.setdefault((seed.store_host, seed.commitlog_offset), seed)
        if not found:
            raise MQClientError(f"no stored copy of message {msg_id} in {', '.join(topics) or 'any topic'}",
                                ResponseCode.NO_MESSAGE)
        return sorted(found.values(), key=lambda m: (m.store_timestamp, m.commitlog_offset))

    def _copies_in(self, topic: str, uniq: str, origin: str | None) -> builtins.list[MessageExt]:
        """The copies of the message in ``topic``'s index under its unique key ([] when no such topic)."""
        try:
            copies = self.admin._query(topic, uniq, 64, 0, None)
        except MQBrokerError as exc:
            if exc.response_code == ResponseCode.TOPIC_NOT_EXIST:
                return []
            raise
        return [m for m in copies if m.unique_key == uniq
                or (origin is not None and m.properties.get(MessageConst.ORIGIN_MESSAGE_ID) == origin)]

    # --- reading a queue whatever its permission ---

    def _read_queue(self, addr: str, topic: str, queue_id: int) -> Iterator[MessageExt]:
        return read_queue(self.admin.instance.api, addr, topic, queue_id, self.admin.timeout_ms)

    def _route_or_none(self, topic: str) -> TopicRouteData | None:
        try:
            return self.admin.topic_route(topic)
        except MQBrokerError as exc:
            if exc.response_code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            raise

    def _view_if_offset_id(self, msg_id: str) -> MessageExt | None:
        """The copy ``msg_id`` names when it is the offset id of a known broker's message, else None."""
        try:
            return self.admin.view_message(msg_id)
        except MQBrokerError:
            return None
        except MQClientError as exc:
            if exc.response_code == ResponseCode.MESSAGE_ILLEGAL:  # not a known broker's offset id
                return None
            raise

