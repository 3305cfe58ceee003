"""What a producer makes of a topic's route (RocketMQ's topicRouteData2TopicPublishInfo).

``TopicPublishInfo`` is the producer's view of a ``TopicRouteData`` (the
route model itself is ``rocketmesh.model.route``, shared with the name server and
the brokers): the write queues of the brokers that take writes and have a
master, in broker-name order, chosen round-robin.
"""

from __future__ import annotations

import itertools
import random

from rocketmesh.model.message import MessageQueue
from rocketmesh.model.route import Perm, TopicRouteData


def publish_info(route: TopicRouteData, topic: str, *, from_default_topic: bool = False) -> TopicPublishInfo:
    """The producer's view of ``route``: write queues of writable brokers that have a master."""
    queues: list[MessageQueue] = []
    if route.order_topic_conf:
        # "brokerName:queueNums;brokerName:queueNums" fixes the queues of an ordered topic.
        for item in route.order_topic_conf.split(";"):
            name, _, nums = item.partition(":")
            if name and nums.isdigit():
                queues.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
        return TopicPublishInfo(topic, queues, order_topic=True, route=route, from_default_topic=from_default_topic)
    for qd in route.queue_datas:
        if not Perm.is_writeable(qd.perm):
            continue
        bd = route.broker_data(qd.broker_name)
        if bd is None or bd.master_addr is None:
            continue
        queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return TopicPublishInfo(topic, queues, route=route, from_default_topic=from_default_topic)


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
        route: TopicRouteData | None = None,
        from_default_topic: bool = False,
        start: int | None = None,
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

    def select_one(self, last_broker_name: str | None = None) -> MessageQueue:
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
