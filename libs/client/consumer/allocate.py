"""Queue allocation strategies for clustered consumers (RocketMQ's AllocateMessageQueueStrategy).

On every rebalance each consumer of a group lists the topic's queues and the
group's client ids, both sorted, and asks its strategy which queues are its
own. Every member runs the same strategy over the same lists, so the answers
fit together without any coordination: each queue goes to exactly one client.

The six strategies give the same assignment as RocketMQ's Java ones for the
same inputs. Where RocketMQ throws for an empty queue list or client list,
these return ``[]``.
"""

from __future__ import annotations

import bisect
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from rocketmesh.model.message import MessageQueue
from rocketmesh.runtime.log import get_logger

log = get_logger("client", component="allocate")


class AllocateStrategy(ABC):
    """Decides which of ``mq_all`` belong to ``current_cid`` among the clients ``cid_all``.

    ``allocate`` checks its arguments the same way for every strategy: an empty
    ``current_cid`` raises ValueError; an empty ``mq_all`` or a ``current_cid``
    missing from ``cid_all`` (the client's view of the group is stale) gives
    ``[]``. Subclasses implement ``_assign`` for the rest.
    """

    name: str

    def allocate(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        """The queues of ``mq_all`` that ``current_cid`` should consume.

        ``mq_all`` and ``cid_all`` must be sorted the same way on every client.
        """
        if not current_cid:
            raise ValueError("current_cid is empty")
        if not mq_all:
            return []
        if current_cid not in cid_all:
            log.info("allocate_cid_not_in_group", group=consumer_group, client_id=current_cid,
                     cid_all=list(cid_all))
            return []
        return self._assign(consumer_group, current_cid, mq_all, cid_all)

    @abstractmethod
    def _assign(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                cid_all: Sequence[str]) -> list[MessageQueue]:
        """The allocation proper; arguments are already checked (``current_cid`` is in ``cid_all``)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class AllocateAveragely(AllocateStrategy):
    """Contiguous blocks of nearly equal size; the first ``len(mq) % len(cid)`` clients get one more.

    8 queues over 3 clients: [q0 q1 q2] [q3 q4 q5] [q6 q7]. The default strategy.
    """

    name = "AVG"

    def _assign(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                cid_all: Sequence[str]) -> list[MessageQueue]:
        index = list(cid_all).index(current_cid)
        n_mq, n_cid = len(mq_all), len(cid_all)
        base, extra = divmod(n_mq, n_cid)
        if index < extra:
            start, size = index * (base + 1), base + 1
        else:
            start, size = index * base + extra, base
        return list(mq_all[start:start + size])


class AllocateAveragelyByCircle(AllocateStrategy):
    """Round robin: client ``i`` of ``n`` gets queues ``i, i+n, i+2n, ...``."""

    name = "AVG_BY_CIRCLE"

    def _assign(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                cid_all: Sequence[str]) -> list[MessageQueue]:
        index = list(cid_all).index(current_cid)
        return list(mq_all[index::len(cid_all)])


class AllocateByConfig(AllocateStrategy):
    """A fixed list of queues, whatever the group looks like (each client is configured by hand)."""

    name = "CONFIG"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        self.queues: list[MessageQueue] = list(queues)

    def _assign(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                cid_all: Sequence[str]) -> list[MessageQueue]:
        return list(self.queues)

    def __repr__(self) -> str:
        return f"AllocateByConfig({self.queues!r})"


def _java_split(s: str, sep: str) -> list[str]:
    # Java's String.split drops trailing empty strings: "room1@" is ["room1"], not ["room1", ""].
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class AllocateByMachineRoom(AllocateStrategy):
    """Only queues of brokers in ``consumer_idcs``, spread over all clients.

    Broker names are ``"<idc>@<broker>"``; a queue whose broker name is not of
    that form, or whose idc is not in ``consumer_idcs``, goes to no one. As in
    RocketMQ the client ids are not looked at: every client of the group takes
    part (by convention they are named ``"<idc>@..."`` and run in those rooms).
    Each client gets ``len // n`` consecutive queues, and the first
    ``len % n`` clients one more from the tail.
    """

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self.consumer_idcs: set[str] = set(consumer_idcs)

    def _assign(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                cid_all: Sequence[str]) -> list[MessageQueue]:
        index = list(cid_all).index(current_cid)
        in_rooms = []
        for mq in mq_all:
            parts = _java_split(mq.broker_name, "@")
            if len(parts) == 2 and parts[0] in self.consumer_idcs:
                in_rooms.append(mq)
        n = len(cid_all)
        per, rem = divmod(len(in_rooms), n)
        result = in_rooms[index * per:(index + 1) * per]
        if index < rem:
            result.append(in_rooms[per * n + index])
        return result

    def __repr__(self) -> str:
        return f"AllocateByMachineRoom({sorted(self.consumer_idcs)!r})"


@runtime_checkable
class MachineRoomResolver(Protocol):
    """Where brokers and consumers run (RocketMQ's AllocateMachineRoomNearby.MachineRoomResolver).

    Neither method may return an empty string.
    """

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        """The machine room of the broker holding ``mq``."""
        ...

    def consumer_deploy_in(self, client_id: str) -> str:
        """The machine room of the consumer ``client_id``."""
        ...


class _CallableResolver:
    """One function answering for both queues and client ids."""

    def __init__(self, fn: Callable[[MessageQueue | str], str]) -> None:
        self.fn = fn

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return self.fn(mq)

    def consumer_deploy_in(self, client_id: str) -> str:
        return self.fn(client_id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self.fn, '__qualname__', type(self.fn).__name__)})"


class AllocateMachineRoomNearby(AllocateStrategy):
    """Consume in your own machine room; share out rooms that have no consumer.

    Queues are grouped by ``resolver.broker_deploy_in(mq)`` and clients by
    ``resolver.consumer_deploy_in(cid)``. The current client gets ``inner``'s
    share of its own room's queues among that room's clients, plus ``inner``'s
    share among all clients of every room that has queues but no consumer.
    ``resolver`` is a :class:`MachineRoomResolver` or one function that takes a
    MessageQueue or a client id. An empty room name raises ValueError.
    """

    name = "MACHINE_ROOM_NEARBY"

    def __init__(self, inner: AllocateStrategy,
                 resolver: MachineRoomResolver | Callable[[MessageQueue | str], str]) -> None:
        if inner is None:
            raise ValueError("inner strategy is None")
        if resolver is None:
            raise ValueError("resolver is None")
        self.inner = inner
        if isinstance(resolver, MachineRoomResolver):
            self.resolver: MachineRoomResolver = resolver
        elif callable(resolver):
            self.resolver = _CallableResolver(resolver)
        else:
            raise TypeError("resolver must be a MachineRoomResolver or a callable")
        # RocketMQ reports the inner strategy in the name: "MACHINE_ROOM_NEARBY-AVG".
        self.name = f"MACHINE_ROOM_NEARBY-{inner.name}"

    def _assign(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                cid_all: Sequence[str]) -> list[MessageQueue]:
        mqs_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            room = self.resolver.broker_deploy_in(mq)
            if not room:
                raise ValueError(f"machine room is empty for queue {mq}")
            mqs_by_room.setdefault(room, []).append(mq)
        cids_by_room: dict[str, list[str]] = {}
        for cid in cid_all:
            room = self.resolver.consumer_deploy_in(cid)
            if not room:
                raise ValueError(f"machine room is empty for consumer {cid}")
            cids_by_room.setdefault(room, []).append(cid)

        result: list[MessageQueue] = []
        my_room = self.resolver.consumer_deploy_in(current_cid)
        mine = mqs_by_room.pop(my_room, None)
        if mine:
            result.extend(self.inner.allocate(consumer_group, current_cid, mine, cids_by_room[my_room]))
        # Sorted as RocketMQ's TreeMap, so the order of the answer matches too.
        for room in sorted(mqs_by_room):
            if room not in cids_by_room:
                result.extend(self.inner.allocate(consumer_group, current_cid, mqs_by_room[room], cid_all))
        return result

    def __repr__(self) -> str:
        return f"AllocateMachineRoomNearby({self.inner!r}, {self.resolver!r})"


def md5_hash(key: str) -> int:
    """RocketMQ's ConsistentHashRouter default hash: the first 4 bytes of MD5(UTF-8), big-endian, unsigned."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def java_mq_key(mq: MessageQueue) -> str:
    """Java's ``MessageQueue.toString()``, the key RocketMQ hashes a queue by."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class AllocateConsistentHash(AllocateStrategy):
    """Queues on a hash ring of clients, so a client joining or leaving moves only its own share.

    As RocketMQ: each client id is placed on the ring ``virtual_node_count``
    times under the keys ``"<cid>-0"``, ``"<cid>-1"``, ...; a queue is hashed by
    its Java ``toString()`` (:func:`java_mq_key`) and goes to the first virtual
    node at or after its hash, wrapping round. With the default ``hash_fn``
    (:func:`md5_hash`) the assignment equals RocketMQ's.
    """

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_node_count: int = 10, hash_fn: Callable[[str], int] = md5_hash) -> None:
        if virtual_node_count < 0:
            raise ValueError(f"illegal virtual_node_count: {virtual_node_count}")
        self.virtual_node_count = virtual_node_count
        self.hash_fn = hash_fn

    def _ring(self, cid_all: Sequence[str]) -> tuple[list[int], list[str]]:
        ring: dict[int, str] = {}
        for cid in cid_all:
            # A cid listed twice gets further replica numbers, as RocketMQ's addNode does.
            existing = sum(1 for owner in ring.values() if owner == cid)
            for i in range(self.virtual_node_count):
                # A colliding hash replaces the earlier node (TreeMap.put).
                ring[self.hash_fn(f"{cid}-{i + existing}")] = cid
        points = sorted(ring)
        return points, [ring[p] for p in points]

    def _assign(self, consumer_group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                cid_all: Sequence[str]) -> list[MessageQueue]:
        points, owners = self._ring(cid_all)
        if not points:
            return []
        result = []
        for mq in mq_all:
            i = bisect.bisect_left(points, self.hash_fn(java_mq_key(mq)))
            if owners[i % len(points)] == current_cid:
                result.append(mq)
        return result

    def __repr__(self) -> str:
        return f"AllocateConsistentHash(virtual_node_count={self.virtual_node_count})"


_BY_NAME: dict[str, Callable[..., AllocateStrategy]] = {
    AllocateAveragely.name: AllocateAveragely,
    AllocateAveragelyByCircle.name: AllocateAveragelyByCircle,
    AllocateConsistentHash.name: AllocateConsistentHash,
}


def strategy_by_name(name: str, **kwargs: object) -> AllocateStrategy:
    """A new strategy from its RocketMQ name: "AVG", "AVG_BY_CIRCLE" or "CONSISTENT_HASH".

    ``kwargs`` go to its constructor (``virtual_node_count=``, ``hash_fn=`` for
    CONSISTENT_HASH). The strategies that need more set-up (CONFIG,
    MACHINE_ROOM, MACHINE_ROOM_NEARBY) are built with their classes.
    """
    factory = _BY_NAME.get(name)
    if factory is None:
        raise ValueError(f"unknown allocate strategy {name!r}; valid names are {', '.join(sorted(_BY_NAME))}")
    return factory(**kwargs)
