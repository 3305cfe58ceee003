"""Topic routes as the name server gives them, and what a producer makes of them.

``TopicRouteData`` is the name server's answer to GET_ROUTEINFO_BY_TOPIC;
``TopicPublishInfo`` is the producer's view of it (RocketMQ's
topicRouteData2TopicPublishInfo): the write queues of the brokers that take
writes and have a master, in broker-name order, chosen round-robin.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace
from enum import IntFlag
from typing import Any, Optional

from rocketmesh.message import MessageQueue

#: The brokerId of a master (RocketMQ's MixAll.MASTER_ID).
MASTER_ID = 0


class Perm(IntFlag):
    """Topic and broker permission bits (RocketMQ's PermName)."""

    INHERIT = 1
    WRITE = 2
    READ = 4

    @staticmethod
    def is_writeable(perm: int) -> bool:
        """True when ``perm`` has the write bit."""
        return bool(perm & Perm.WRITE)

    @staticmethod
    def is_readable(perm: int) -> bool:
        """True when ``perm`` has the read bit."""
        return bool(perm & Perm.READ)


@dataclass(frozen=True, slots=True)
class QueueData:
    """A topic's queues on one broker."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = int(Perm.READ | Perm.WRITE)
    topic_sys_flag: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "QueueData":
        """Parse one entry of a route's queueDatas."""
        return cls(
            broker_name=str(d["brokerName"]),
            read_queue_nums=int(d.get("readQueueNums", 0)),
            write_queue_nums=int(d.get("writeQueueNums", 0)),
            perm=int(d.get("perm", Perm.READ | Perm.WRITE)),
            topic_sys_flag=int(d.get("topicSysFlag", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        """The name server's JSON form."""
        return {
            "brokerName": self.broker_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicSysFlag": self.topic_sys_flag,
        }


@dataclass(frozen=True, slots=True)
class BrokerData:
    """One broker name (a master and its slaves): id -> "host:port"."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "BrokerData":
        """Parse one entry of a route's brokerDatas (ids arrive as JSON object keys, strings)."""
        addrs = {int(k): str(v) for k, v in (d.get("brokerAddrs") or {}).items()}
        return cls(cluster=str(d.get("cluster", "")), broker_name=str(d["brokerName"]), broker_addrs=addrs)

    def to_json(self) -> dict[str, Any]:
        """The name server's JSON form."""
        return {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
        }

    @property
    def master_addr(self) -> Optional[str]:
        """The master's address, or None when the master is down."""
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> Optional[str]:
        """The master's address, else any slave's (for reads)."""
        addr = self.broker_addrs.get(MASTER_ID)
        if addr is None and self.broker_addrs:
            addr = random.choice(list(self.broker_addrs.values()))
        return addr


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """Where a topic lives: its queues per broker and the brokers' addresses."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: Optional[str] = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TopicRouteData":
        """Parse the name server's JSON; raises ValueError (or KeyError/TypeError) when malformed."""
        if not isinstance(d, dict):
            raise ValueError("route data is not a JSON object")
        qds = tuple(sorted((QueueData.from_json(q) for q in d.get("queueDatas") or ()), key=lambda q: q.broker_name))
        bds = tuple(sorted((BrokerData.from_json(b) for b in d.get("brokerDatas") or ()), key=lambda b: b.broker_name))
        return cls(qds, bds, d.get("orderTopicConf") or None)

    def to_json(self) -> dict[str, Any]:
        """The name server's JSON form."""
        out: dict[str, Any] = {
            "queueDatas": [q.to_json() for q in self.queue_datas],
            "brokerDatas": [b.to_json() for b in self.broker_datas],
        }
        if self.order_topic_conf:
            out["orderTopicConf"] = self.order_topic_conf
        return out

    def broker_data(self, broker_name: str) -> Optional[BrokerData]:
        """The addresses of ``broker_name``, or None when the route does not list it."""
        for bd in self.broker_datas:
            if bd.broker_name == broker_name:
                return bd
        return None

    def with_queue_nums_capped(self, queue_nums: int) -> "TopicRouteData":
        """This route with every broker's queue counts capped at ``queue_nums``.

        How a producer turns the default topic's (TBW102) route into a route
        for a topic the broker is to create on first send.
        """
        qds = tuple(
            replace(q, read_queue_nums=min(queue_nums, q.read_queue_nums),
                    write_queue_nums=min(queue_nums, q.read_queue_nums))
            for q in self.queue_datas
        )
        return replace(self, queue_datas=qds)

    def to_publish_info(self, topic: str, *, from_default_topic: bool = False) -> "TopicPublishInfo":
        """The producer's view: write queues of writable brokers that have a master."""
        queues: list[MessageQueue] = []
        if self.order_topic_conf:
            # "brokerName:queueNums;brokerName:queueNums" fixes the queues of an ordered topic.
            for item in self.order_topic_conf.split(";"):
                name, _, nums = item.partition(":")
                if name and nums.isdigit():
                    queues.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
            return TopicPublishInfo(topic, queues, order_topic=True, route=self,
                                    from_default_topic=from_default_topic)
        for qd in self.queue_datas:
            if not Perm.is_writeable(qd.perm):
                continue
            bd = self.broker_data(qd.broker_name)
            if bd is None or bd.master_addr is None:
                continue
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
        return TopicPublishInfo(topic, queues, route=self, from_default_topic=from_default_topic)


class TopicPublishInfo:
    """A topic's writable queues and the round-robin position over them.

    The position starts at a random index (as RocketMQ's ThreadLocalIndex
    does) so that many producers do not all begin on the same queue.
    ``select_one`` is safe from any thread: ``next()`` on an
    ``itertools.count`` is atomic under the GIL.
    """

    __slots__ = ("topic", "message_queues", "order_topic", "route", "from_default_topic", "broker_count",
                 "_counter", "_n")

    def __init__(
        self,
        topic: str,
        message_queues: list[MessageQueue],
        *,
        order_topic: bool = False,
        route: Optional[TopicRouteData] = None,
        from_default_topic: bool = False,
        start: Optional[int] = None,
    ) -> None:
        self.topic = topic
        self.message_queues: tuple[MessageQueue, ...] = tuple(message_queues)
        self.order_topic = order_topic
        self.route = route
        self.from_default_topic = from_default_topic
        self._n = len(self.message_queues)
        #: How many brokers hold a queue: a failed send has somewhere else to go only when > 1.
        self.broker_count = len({mq.broker_name for mq in self.message_queues})
        self._counter = itertools.count(random.randrange(1 << 16) if start is None else start)

    def ok(self) -> bool:
        """True when there is at least one queue to write to."""
        return self._n > 0

    def next_index(self) -> int:
        """The next round-robin position (not yet reduced modulo the queue count)."""
        return next(self._counter)

    def select_one(self, last_broker_name: Optional[str] = None) -> MessageQueue:
        """The next queue round-robin, skipping queues of ``last_broker_name`` when another broker has one."""
        mqs = self.message_queues
        n = self._n
        if last_broker_name is None:
            return mqs[next(self._counter) % n]
        for _ in range(n):
            mq = mqs[next(self._counter) % n]
            if mq.broker_name != last_broker_name:
                return mq
        return mqs[next(self._counter) % n]

    def write_queue_nums(self, broker_name: str) -> int:
        """How many write queues ``broker_name`` has for this topic (0 when none)."""
        if self.route is not None:
            for qd in self.route.queue_datas:
                if qd.broker_name == broker_name:
                    return qd.write_queue_nums
            return 0
        return sum(1 for mq in self.message_queues if mq.broker_name == broker_name)

    def broker_names(self) -> list[str]:
        """The brokers that hold a queue, in queue order."""
        return list(dict.fromkeys(mq.broker_name for mq in self.message_queues))

    def __repr__(self) -> str:
        return (f"TopicPublishInfo(topic={self.topic!r}, queues={len(self.message_queues)}, "
                f"order_topic={self.order_topic}, from_default_topic={self.from_default_topic})")
