"""The client tables: producers and consumers that heartbeat this broker, by group.

A client leaves them when it unregisters, when its connection closes
(``channel_closed``, RocketMQ's doChannelCloseEvent) or, when it hangs with
its connection open, after ``channelExpiredTimeout`` of silence
(``scan_expired``). A consumer group that lost a member is told to rebalance.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocketmesh.remoting.protocol.rocketmq_wire import SERVER_VERSION, LanguageCode
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="client_manager")

# RocketMQ's clients name their enums in a heartbeat (Java, Go, Node) or send their ordinals (the C++
# client): the ordinals, in RocketMQ's declaration order, mapped to the names kept here.
_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
_MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
_CONSUME_FROM = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                 "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                 "CONSUME_FROM_TIMESTAMP")


#: The language and version a Connection names for a client whose protocol does not say (the mesh's SDK,
#: Python, speaking RocketMQ 4.9.4's protocol).
_SDK_LANGUAGE = LanguageCode.PYTHON.name


def _enum_name(value: Any, names: tuple[str, ...], current: str) -> str:
    """``value`` as an enum name: a name as it is, an ordinal by ``names``; ``current`` when absent or unknown."""
    if isinstance(value, str) and value:
        return value
    if type(value) is int and 0 <= value < len(names):
        return names[value]
    return current


@dataclass
class ClientChannel:
    """One connected client instance: its id, how to reach it, when it was last heard."""

    client_id: str
    identity: bytes
    remote: str
    last_update: float = field(default_factory=time.monotonic)
    #: Wall-clock time of the last heartbeat, in ms (what admin tools show).
    last_update_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    #: What the client's heartbeat said it is (a RocketMQ client at the TCP door: JAVA, CPP ... and its
    #: version code); the mesh's SDK says nothing, and is Python.
    language: str = _SDK_LANGUAGE
    version: int = SERVER_VERSION

    def connection(self) -> dict[str, Any]:
        """RocketMQ's Connection JSON of this client, as GET_PRODUCER_CONNECTION_LIST and
        GET_CONSUMER_CONNECTION_LIST list it."""
        return {"clientId": self.client_id, "clientAddr": self.remote, "language": self.language,
                "version": self.version, "lastUpdateTimestamp": self.last_update_ms}


@dataclass
class ConsumerGroupInfo:
    """A consumer group as its heartbeats describe it."""

    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)
    channels: dict[str, ClientChannel] = field(default_factory=dict)
    last_update: float = field(default_factory=time.monotonic)


class ClientManager:
    """Producer and consumer tables; clients go when their connection closes, or after RocketMQ's 120 s
    expiry of silent clients."""

    def __init__(self, expired_ms: int) -> None:
        self.expired_s = expired_ms / 1000
        self.producers: dict[str, dict[str, ClientChannel]] = {}
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self._lock = threading.Lock()
        #: Called with a group whose member list changed (NOTIFY_CONSUMER_IDS_CHANGED).
        self.on_consumer_ids_changed: Callable[[str], None] | None = None
        #: Called with (group, client id) of each consumer that left (unregistered, connection closed,
        #: expired) before its group is told: what it held (its orderly queue locks) is free at once.
        self.on_consumer_left: Callable[[str, str], object] | None = None

    def heartbeat(self, data: dict[str, Any], identity: bytes, remote: str, language: str | None = None,
                  version: int | None = None) -> None:
        """Record a HEARTBEAT body (RocketMQ's HeartbeatData); ``language`` and ``version``: what the
        request's frame said of its client, when its protocol says (RocketMQ's own clients)."""
        client_id = data.get("clientID")
        if not isinstance(client_id, str) or not client_id:
            raise ValueError("heartbeat without clientID")
        now = time.monotonic()
        lang = language or _SDK_LANGUAGE
        ver = SERVER_VERSION if version is None else version

        def channel() -> ClientChannel:
            return ClientChannel(client_id, identity, remote, now, language=lang, version=ver)

        changed = []
        with self._lock:
            for p in data.get("producerDataSet") or []:
                group = p.get("groupName")
                if isinstance(group, str) and group:
                    self.producers.setdefault(group, {})[client_id] = channel()
            for c in data.get("consumerDataSet") or []:
                group = c.get("groupName")
                if not isinstance(group, str) or not group:
                    continue
                info = self.consumers.get(group)
                if info is None:
                    info = self.consumers[group] = ConsumerGroupInfo(group)
                info.consume_type = _enum_name(c.get("consumeType"), _CONSUME_TYPES, info.consume_type)
                info.message_model = _enum_name(c.get("messageModel"), _MESSAGE_MODELS, info.message_model)
                info.consume_from_where = _enum_name(c.get("consumeFromWhere"), _CONSUME_FROM,
                                                     info.consume_from_where)
                subs = c.get("subscriptionDataSet") or []
                info.subscriptions = {s["topic"]: s for s in subs if isinstance(s, dict) and "topic" in s}
                if client_id not in info.channels:
                    changed.append(group)
                info.channels[client_id] = channel()
                info.last_update = now
        for group in changed:
            self._notify(group)

    def unregister(self, client_id: str, producer_group: str | None, consumer_group: str | None) -> None:
        with self._lock:
            if producer_group and producer_group in self.producers:
                self.producers[producer_group].pop(client_id, None)
            removed = False
            if consumer_group and consumer_group in self.consumers:
                removed = self.consumers[consumer_group].channels.pop(client_id, None) is not None
        if removed and consumer_group:
            self._left(consumer_group, client_id)
            self._notify(consumer_group)

    def scan_expired(self) -> int:
        """Drop clients silent longer than channelExpiredTimeout; returns how many went."""
        deadline = time.monotonic() - self.expired_s
        return self._drop(lambda ch: ch.last_update < deadline, "expired")

    def channel_closed(self, identity: bytes) -> int:
        """Drop the producers and consumers whose heartbeats came from the client ``identity``, now that
        its last connection closed; returns how many went. A client that heartbeat since from another
        connection (a restarted process) stays."""
        return self._drop(lambda ch: ch.identity == identity, "channel_closed")

    def _drop(self, gone: Callable[[ClientChannel], bool], reason: str) -> int:
        """Drop the channels ``gone`` picks (logged as ``producer_<reason>`` / ``consumer_<reason>``) and tell
        each consumer group that lost a member; returns how many went."""
        dropped = 0
        left: list[tuple[str, str]] = []
        with self._lock:
            for group, chans in self.producers.items():
                for cid in [c for c, ch in chans.items() if gone(ch)]:
                    del chans[cid]
                    dropped += 1
                    log.info(f"producer_{reason}", group=group, client_id=cid)
            for group, info in self.consumers.items():
                for cid in [c for c, ch in info.channels.items() if gone(ch)]:
                    del info.channels[cid]
                    dropped += 1
                    left.append((group, cid))
                    log.info(f"consumer_{reason}", group=group, client_id=cid)
        for group, cid in left:
            self._left(group, cid)
        for group in dict.fromkeys(group for group, _ in left):
            self._notify(group)
        return dropped

    def producer_channels(self, group: str) -> list[ClientChannel]:
        with self._lock:
            return list(self.producers.get(group, {}).values())

    def groups_subscribing(self, topic: str) -> set[str]:
        """The groups with an online consumer subscribed to ``topic`` (RocketMQ's queryTopicConsumeByWho)."""
        with self._lock:
            return {g for g, info in self.consumers.items() if info.channels and topic in info.subscriptions}

    def subscription(self, group: str, topic: str) -> dict[str, Any] | None:
        """``group``'s subscription of ``topic`` as its heartbeats gave it (RocketMQ's SubscriptionData JSON),
        None when it has none."""
        with self._lock:
            info = self.consumers.get(group)
            return None if info is None else info.subscriptions.get(topic)

    def consumer_group(self, group: str) -> ConsumerGroupInfo | None:
        """A copy of ``group``'s entry (members, subscriptions, model), or None when it has none."""
        with self._lock:
            info = self.consumers.get(group)
            if info is None:
                return None
            return ConsumerGroupInfo(info.group, info.consume_type, info.message_model, info.consume_from_where,
                                     dict(info.subscriptions), dict(info.channels), info.last_update)

    def consumer_groups(self) -> list[str]:
        with self._lock:
            return sorted(g for g, i in self.consumers.items() if i.channels)

    def consumer_ids(self, group: str) -> list[str]:
        with self._lock:
            info = self.consumers.get(group)
            return sorted(info.channels) if info else []

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return (sum(len(c) for c in self.producers.values()),
                    sum(len(i.channels) for i in self.consumers.values()))

    def _left(self, group: str, client_id: str) -> None:
        if self.on_consumer_left is not None:
            try:
                self.on_consumer_left(group, client_id)
            except Exception:  # noqa: BLE001 - a failed release must not keep the others waiting
                log.exception("consumer_left_callback_failed", group=group, client_id=client_id)

    def _notify(self, group: str) -> None:
        if self.on_consumer_ids_changed is not None:
            try:
                self.on_consumer_ids_changed(group)
            except Exception:  # noqa: BLE001 - a failed notify must not break heartbeats
                log.exception("notify_consumer_ids_changed_failed", group=group)
