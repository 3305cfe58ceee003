"""Rebalance: which queues of its subscribed topics this client consumes (RocketMQ's RebalanceImpl).

Clustering: the topic's readable queues and the group's client ids (asked
of a broker) are sorted and handed to the allocate strategy; this client
takes its share. Broadcasting: every queue. Queues that left the share are
dropped (their offsets persisted, orderly locks released); new ones get a
ProcessQueue and a start offset and are handed to the consumer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from rocketmesh.client.consumer.allocate import AllocateStrategy
from rocketmesh.client.consumer.process_queue import ProcessQueue
from rocketmesh.client.consumer.types import MessageModel
from rocketmesh.client.errors import MQBrokerError, MQError
from rocketmesh.filter import SubscriptionData
from rocketmesh.model.message import MessageQueue
from rocketmesh.model.route import Perm, TopicRouteData
from rocketmesh.remoting import ResponseCode
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.client.instance import ClientInstance

log = get_logger("client", component="rebalance")


def subscribe_queues(instance: ClientInstance, topic: str) -> list[MessageQueue]:
    """The readable queues of ``topic`` by its route (sorted), [] when it has no route or none can be had
    now (logged: rebalancing tries again at its next turn)."""
    try:
        route = instance.topic_route(topic)
    except MQError as exc:
        log.warning("route_unavailable", topic=topic, error=str(exc))
        return []
    return [] if route is None else readable_queues(topic, route)


def readable_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The readable queues of ``topic`` in ``route``, sorted."""
    out: list[MessageQueue] = []
    for qd in route.queue_datas:
        if Perm.is_readable(qd.perm):
            out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    return sorted(out)


class Rebalance:
    """See the module docstring. The consumer supplies the hooks:

    - ``on_added(mq, pq) -> bool``: a queue was assigned; return False to give it up again
      (its start offset could not be computed);
    - ``on_removed(mq, pq)``: a queue was taken away (persist its offset);
    """

    def __init__(self, instance: ClientInstance, group: str, model: MessageModel, strategy: AllocateStrategy,
                 orderly: bool, on_added: Callable[[MessageQueue, ProcessQueue], bool],
                 on_removed: Callable[[MessageQueue, ProcessQueue], None]) -> None:
        self.instance = instance
        self.group = group
        self.model = model
        self.strategy = strategy
        self.orderly = orderly
        self.on_added = on_added
        self.on_removed = on_removed
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self._lock = threading.RLock()
        #: Set when a queue could not be locked, so the next rebalance comes soon.
        self.retry_soon = False

    # --- one rebalance ---

    def do_rebalance(self) -> bool:
        """Rebalance every subscribed topic; True when the assignment changed."""
        with self._lock:
            self.retry_soon = False
            changed = False
            for topic in list(self.subscriptions):
                try:
                    changed |= self._rebalance_topic(topic)
                except MQError as exc:
                    log.warning("rebalance_failed", group=self.group, topic=topic, error=str(exc))
                    self.retry_soon = True
            # Queues of topics no longer subscribed.
            for mq in [mq for mq in self.process_queues if mq.topic not in self.subscriptions]:
                self._drop(mq)
                changed = True
            return changed

    def _rebalance_topic(self, topic: str) -> bool:
        mqs = subscribe_queues(self.instance, topic)
        if not mqs:
            return False
        if self.model is MessageModel.BROADCASTING:
            return self._update(topic, set(mqs))
        cids = self.find_consumer_ids(topic)
        if not cids:
            log.warning("no_consumer_ids", group=self.group, topic=topic)
            return False
        cids.sort()
        try:
            mine = self.strategy.allocate(self.group, self.instance.client_id, mqs, cids)
        except Exception:  # noqa: BLE001 - a broken strategy must not stop the consumer
            log.exception("allocate_failed", group=self.group, strategy=getattr(self.strategy, "name", "?"))
            return False
        changed = self._update(topic, set(mine))
        if changed:
            log.info("rebalance_changed", group=self.group, topic=topic, client_id=self.instance.client_id,
                     clients=len(cids), queues=len(mqs), mine=[str(m) for m in sorted(mine)])
        return changed

    def find_consumer_ids(self, topic: str) -> list[str]:
        """The group's client ids, asked of a broker serving ``topic``."""
        # Brokers this client cannot reach are asked last: each would cost a timeout first.
        reachable = self.instance.unreachable.is_available
        names = sorted({mq.broker_name for mq in subscribe_queues(self.instance, topic)},
                       key=lambda n: (not reachable(n), n))
        for name in names:
            addr = self.instance.broker_addr(name)  # the master, or a slave while it is gone
            if addr is None:
                continue
            res = self.instance.api.get_consumer_id_list([addr], self.group)[0]
            if isinstance(res, MQBrokerError) and res.response_code == ResponseCode.SYSTEM_ERROR:
                continue  # the broker knows no client of the group (yet)
            if isinstance(res, MQError):
                log.warning("get_consumer_list_failed", broker=name, error=str(res))
                # The broker may be gone (its slave then serves the topic): look at the route again soon.
                self.instance.request_route_refresh(topic)
                continue
            if res:
                return res
        return []

    def _update(self, topic: str, mine: set[MessageQueue]) -> bool:
        changed = False
        for mq in [mq for mq in self.process_queues if mq.topic == topic and mq not in mine]:
            self._drop(mq)
            changed = True
        new = sorted(mq for mq in mine if mq not in self.process_queues)
        if new and self.orderly and self.model is MessageModel.CLUSTERING:
            locked = self.lock_batch(new)
            if len(locked) < len(new):
                self.retry_soon = True
                log.info("lock_pending", group=self.group, queues=[str(m) for m in new if m not in locked])
            new = [mq for mq in new if mq in locked]
        for mq in new:
            pq = ProcessQueue()
            if self.orderly:
                pq.locked = True
                pq.last_lock_timestamp = time.monotonic()
            self.process_queues[mq] = pq
            if not self.on_added(mq, pq):
                del self.process_queues[mq]
                if self.orderly and self.model is MessageModel.CLUSTERING:
                    self.unlock_batch([mq])
                continue
            changed = True
        return changed

    def _drop(self, mq: MessageQueue) -> None:
        pq = self.process_queues.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        if not (self.orderly and self.model is MessageModel.CLUSTERING):
            self._removed(mq, pq)
            return

        # Orderly: the batch being consumed (if any) finishes and commits first; only then is the
        # offset persisted and the broker lock released, so the next owner starts right after it.
        def release() -> None:
            with pq.consume_lock:
                self._removed(mq, pq)
                self.unlock_batch([mq])
        threading.Thread(target=release, name="unlock-" + str(mq), daemon=True).start()

    def _removed(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        try:
            self.on_removed(mq, pq)
        except Exception:  # noqa: BLE001
            log.exception("remove_queue_failed", mq=str(mq))

    def drop_all(self) -> None:
        with self._lock:
            for mq in list(self.process_queues):
                self._drop(mq)

    # --- orderly locks ---

    @staticmethod
    def _by_broker(mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        return by_broker

    def lock_batch(self, mqs: Iterable[MessageQueue]) -> set[MessageQueue]:
        """Lock ``mqs`` on their brokers for this client; returns those locked."""
        locked: set[MessageQueue] = set()
        for broker, group_mqs in self._by_broker(mqs).items():
            addr = self.instance.master_addr(broker)
            if addr is None:
                continue
            try:
                locked |= self.instance.api.lock_batch_mq(addr, self.group, self.instance.client_id, group_mqs)
            except MQError as exc:
                log.warning("lock_batch_failed", broker=broker, error=str(exc))
        return locked

    def unlock_batch(self, mqs: Iterable[MessageQueue]) -> None:
        for broker, group_mqs in self._by_broker(mqs).items():
            addr = self.instance.master_addr(broker)
            if addr is None:
                continue
            try:
                self.instance.api.unlock_batch_mq(addr, self.group, self.instance.client_id, group_mqs, 1000)
            except MQError as exc:
                log.warning("unlock_batch_failed", broker=broker, error=str(exc))

    def lock_all(self) -> None:
        """Renew the locks of every queue held (orderly, every 20 s); queues not re-locked stop consuming."""
        with self._lock:
            held = dict(self.process_queues)
        if not held:
            return
        locked = self.lock_batch(held)
        now = time.monotonic()
        for mq, pq in held.items():
            if mq in locked:
                pq.locked = True
                pq.last_lock_timestamp = now
            else:
                pq.locked = False

    def unlock_all(self) -> None:
        with self._lock:
            mqs = list(self.process_queues)
        if mqs:
            self.unlock_batch(mqs)

    def assigned(self) -> list[MessageQueue]:
        with self._lock:
            return sorted(self.process_queues)

    def process_queue(self, mq: MessageQueue) -> ProcessQueue | None:
        return self.process_queues.get(mq)
