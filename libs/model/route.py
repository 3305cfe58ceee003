"""The route model the name server, the brokers and the clients share (RocketMQ's TopicConfig,
QueueData, BrokerData, TopicRouteData and PermName), with its JSON forms.

A broker registers its ``TopicConfig``s; the name server keeps a ``QueueData``
per topic and broker name and a ``BrokerData`` per broker name, and answers
GET_ROUTEINFO_BY_TOPIC with a ``TopicRouteData``; clients parse it back. JSON
field names are RocketMQ's camelCase ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from enum import IntFlag
from typing import Any

#: The brokerId of a master (RocketMQ's MixAll.MASTER_ID); slaves have ids above it.
MASTER_ID = 0
#: Queues of a topic a broker creates when nothing says otherwise (RocketMQ's TopicConfig default).
DEFAULT_QUEUE_NUMS = 16


class Perm(IntFlag):
    """Topic and broker permission bits (RocketMQ's PermName)."""

    INHERIT = 0x1
    WRITE = 0x2
    READ = 0x4
    PRIORITY = 0x8

    @staticmethod
    def is_writeable(perm: int) -> bool:
        """True when ``perm`` has the write bit."""
        return bool(perm & _WRITE)

    @staticmethod
    def is_readable(perm: int) -> bool:
        """True when ``perm`` has the read bit."""
        return bool(perm & _READ)


# Plain ints for the checks each send and pull makes: ``int & IntFlag`` goes through the enum machinery
# (about 2 us a time), ``int & int`` does not.
_WRITE, _READ = int(Perm.WRITE), int(Perm.READ)
#: Read and write: what a topic gets unless told otherwise.
PERM_READ_WRITE = int(Perm.READ | Perm.WRITE)


@dataclass
class TopicConfig:
    """A topic as a broker serves and registers it."""

    topic_name: str
    read_queue_nums: int = DEFAULT_QUEUE_NUMS
    write_queue_nums: int = DEFAULT_QUEUE_NUMS
    perm: int = PERM_READ_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def __post_init__(self) -> None:
        # A plain int whatever it was built from (``Perm`` bits): every send tests it, and an IntFlag
        # operand sends ``&`` through the enum machinery.
        self.perm = int(self.perm)

    def to_json(self) -> dict[str, Any]:
        """The JSON form (topics.json, REGISTER_BROKER's topicConfigTable)."""
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm,
                "topicFilterType": self.topic_filter_type, "topicSysFlag": self.topic_sys_flag,
                "order": self.order}

    @classmethod
    def from_json(cls, d: dict[str, Any], name: str | None = None) -> TopicConfig:
        """Parse the JSON form; ``name`` stands in for a missing topicName (a table keyed by topic)."""
        return cls(str(d.get("topicName") or name), int(d.get("readQueueNums", DEFAULT_QUEUE_NUMS)),
                   int(d.get("writeQueueNums", DEFAULT_QUEUE_NUMS)), int(d.get("perm", PERM_READ_WRITE)),
                   str(d.get("topicFilterType", "SINGLE_TAG")), int(d.get("topicSysFlag", 0)),
                   bool(d.get("order", False)))

    @property
    def writable(self) -> bool:
        return Perm.is_writeable(self.perm)

    @property
    def readable(self) -> bool:
        return Perm.is_readable(self.perm)


@dataclass(frozen=True, slots=True)
class QueueData:
    """A topic's queues on one broker name."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    topic_sys_flag: int = 0

    @classmethod
    def of(cls, broker_name: str, tc: TopicConfig) -> QueueData:
        """The queue data a broker's registration of ``tc`` makes."""
        return cls(broker_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QueueData:
        """Parse one entry of a route's queueDatas."""
        return cls(
            broker_name=str(d["brokerName"]),
            read_queue_nums=int(d.get("readQueueNums", 0)),
            write_queue_nums=int(d.get("writeQueueNums", 0)),
            perm=int(d.get("perm", PERM_READ_WRITE)),
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

    def with_write(self, writable: bool) -> QueueData:
        """This queue data with the write bit set or wiped (RocketMQ's wipeWritePermOfBroker)."""
        perm = self.perm | Perm.WRITE if writable else self.perm & ~Perm.WRITE
        return replace(self, perm=int(perm))


@dataclass(frozen=True, slots=True)
class BrokerData:
    """One broker name (a master and its slaves): id -> "host:port".

    The name server keeps one per broker name and changes its ``broker_addrs``
    in place as brokers come and go; a route hands out copies. ``remoting_addrs``
    are the TCP doors (RocketMQ's own remoting protocol) of those brokers that
    open one, by the same ids: a route asked over ZeroMQ carries them beside the
    ZeroMQ addresses (JSON ``remotingAddrs``), one asked over a TCP door has them
    as its ``brokerAddrs`` (see :meth:`for_tcp`).
    """

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    remoting_addrs: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BrokerData:
        """Parse one entry of a route's brokerDatas (ids arrive as JSON object keys, strings)."""
        addrs = {int(k): str(v) for k, v in (d.get("brokerAddrs") or {}).items()}
        doors = {int(k): str(v) for k, v in (d.get("remotingAddrs") or {}).items()}
        return cls(str(d.get("cluster", "")), str(d["brokerName"]), addrs, doors)

    def to_json(self) -> dict[str, Any]:
        """The name server's JSON form."""
        out: dict[str, Any] = {
            "cluster": self.cluster,
            "brokerName": self.broker_name,
            "brokerAddrs": {str(k): v for k, v in sorted(self.broker_addrs.items())},
        }
        if self.remoting_addrs:
            out["remotingAddrs"] = {str(k): v for k, v in sorted(self.remoting_addrs.items())}
        return out

    def copy(self) -> BrokerData:
        """A copy whose addresses do not change with this one's."""
        return BrokerData(self.cluster, self.broker_name, dict(self.broker_addrs), dict(self.remoting_addrs))

    def for_tcp(self) -> BrokerData:
        """This broker name as a client of a TCP door sees it: the brokers' door addresses as
        ``broker_addrs`` (a broker with no door left out)."""
        return BrokerData(self.cluster, self.broker_name, dict(self.remoting_addrs))

    def mesh_addr_of(self, addr: str) -> str | None:
        """The ZeroMQ address of the broker whose TCP door (or ZeroMQ socket) is ``addr``; None when no
        broker of this name is there. An offset message id names the door when the broker opens one."""
        if addr in self.broker_addrs.values():
            return addr
        for bid, door in self.remoting_addrs.items():
            if door == addr:
                return self.broker_addrs.get(bid)
        return None

    @property
    def master_addr(self) -> str | None:
        """The master's address, or None when the master is down."""
        return self.broker_addrs.get(MASTER_ID)

    def select_addr(self) -> str | None:
        """The master's address, else any slave's (for reads)."""
        addr = self.broker_addrs.get(MASTER_ID)
        if addr is None and self.broker_addrs:
            addr = random.choice(list(self.broker_addrs.values()))
        return addr


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """Where a topic lives: its queues per broker name and those brokers' addresses (both sorted by
    broker name)."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TopicRouteData:
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

    def for_tcp(self) -> TopicRouteData:
        """The route as a client of a TCP door sees it: the brokers' door addresses; the queues of a
        broker name none of whose brokers opens a door are left out (such a client cannot reach them)."""
        bds = tuple(b.for_tcp() for b in self.broker_datas if b.remoting_addrs)
        names = {b.broker_name for b in bds}
        return TopicRouteData(tuple(q for q in self.queue_datas if q.broker_name in names), bds, self.order_topic_conf)

    def broker_data(self, broker_name: str) -> BrokerData | None:
        """The addresses of ``broker_name``, or None when the route does not list it."""
        for bd in self.broker_datas:
            if bd.broker_name == broker_name:
                return bd
        return None

    def with_queue_nums_capped(self, queue_nums: int) -> TopicRouteData:
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
