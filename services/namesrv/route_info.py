"""RouteInfoManager: the name server's tables, as RocketMQ 4.x keeps them.

- topicQueueTable: topic -> brokerName -> QueueData
- brokerAddrTable: brokerName -> BrokerData (cluster, brokerAddrs: brokerId -> addr)
- clusterAddrTable: cluster -> set of brokerNames
- brokerLiveTable: brokerAddr -> BrokerLiveInfo (last register time, data version, HA address, and the
  connection it registered over)

One lock guards them all; every method takes it once, so each is atomic.
Only a master (brokerId 0) creates or updates queue data, and queue data of a
broker name goes only when the last address of that name is gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocketmesh.model.route import MASTER_ID, BrokerData, QueueData, TopicConfig, TopicRouteData


def now_ms() -> int:
    """Wall-clock milliseconds, the unit of every timestamp here."""
    return int(time.time() * 1000)


@dataclass(slots=True)
class BrokerLiveInfo:
    """When a broker address last registered, and what it said."""

    last_update_timestamp: int
    data_version: dict[str, Any] | None
    ha_server_addr: str
    cluster: str
    broker_name: str
    broker_id: int
    #: The client identity the registration came from (RocketMQ's channel): when its connections close,
    #: the broker is gone.
    channel: bytes = b""
    #: The broker's TCP door, "" when it opens none.
    remoting_addr: str = ""


@dataclass(slots=True)
class RegisterBrokerResult:
    """What REGISTER_BROKER answers: the master's HA and broker address, for a slave."""

    ha_server_addr: str | None = None
    master_addr: str | None = None
    #: Why this registration is news, or None for a heartbeat that changed nothing: "new" (an address
    #: not registered before), "address" (the name and id at another address), "role" (the address under
    #: another broker id), "data_version" (the topic configs' data version moved).
    change: str | None = None


class RouteInfoManager:
    """The route tables and the operations on them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}

    # -- brokers ----------------------------------------------------------

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_configs: dict[str, TopicConfig] | None,
        data_version: dict[str, Any] | None,
        now: int | None = None,
        channel: bytes = b"",
        remoting_addr: str = "",
    ) -> RegisterBrokerResult:
        """Record a broker's (re-)registration and, from a master, its topics.

        Topic configs are applied when this is the first registration of the
        address or the data version changed (or none was sent). Topics absent
        from the table are left alone, as in RocketMQ 4.x: a broker may send
        only the topics that changed. ``channel`` is the client identity the
        registration came from (see ``on_channel_destroy``); ``remoting_addr`` its TCP door, if any.
        """
        now = now_ms() if now is None else now
        result = RegisterBrokerResult()
        with self._lock:
            self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
            broker_data = self.broker_addr_table.get(broker_name)
            first = broker_data is None
            if broker_data is None:
                broker_data = BrokerData(cluster_name, broker_name)
                self.broker_addr_table[broker_name] = broker_data
            # One address holds one role: a slave promoted to master (or the
            # reverse) drops its entry under the old id.
            for bid in [i for i, a in broker_data.broker_addrs.items() if a == broker_addr and i != broker_id]:
                del broker_data.broker_addrs[bid]
            old_addr = broker_data.broker_addrs.get(broker_id)
            broker_data.broker_addrs[broker_id] = broker_addr
            first = first or old_addr is None

            prev = self.broker_live_table.get(broker_addr)
            changed = prev is None or data_version is None or prev.data_version != data_version
            if old_addr is not None and old_addr != broker_addr:
                result.change = "address"
            elif prev is None:
                result.change = "new"
            elif prev.broker_id != broker_id or prev.broker_name != broker_name:
                result.change = "role"
            elif data_version is not None and prev.data_version != data_version:
                result.change = "data_version"
            if topic_configs is not None and broker_id == MASTER_ID and (changed or first):
                for tc in topic_configs.values():
                    self._create_and_update_queue_data(broker_name, tc)

            self.broker_live_table[broker_addr] = BrokerLiveInfo(
                now, data_version, ha_server_addr, cluster_name, broker_name, broker_id, channel, remoting_addr
            )
            if broker_id != MASTER_ID:
                master_addr = broker_data.broker_addrs.get(MASTER_ID)
                if master_addr is not None:
                    master_live = self.broker_live_table.get(master_addr)
                    if master_live is not None:
                        result.ha_server_addr = master_live.ha_server_addr
                        result.master_addr = master_addr
        return result

    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        """Forget one broker address; the routes of its name go with the name's last address."""
        with self._lock:
            self.broker_live_table.pop(broker_addr, None)
            broker_data = self.broker_addr_table.get(broker_name)
            if broker_data is not None and broker_data.broker_addrs.get(broker_id) == broker_addr:
                del broker_data.broker_addrs[broker_id]
            self._drop_if_empty(broker_name, cluster_name)

    def scan_not_active_broker(self, expired_ms: int, now: int | None = None) -> list[str]:
        """Drop every broker silent for more than ``expired_ms``; returns their addresses."""
        now = now_ms() if now is None else now
        return self._remove_brokers(lambda live: live.last_update_timestamp + expired_ms < now)

    def on_channel_destroy(self, channel: bytes) -> list[str]:
        """Drop every broker that registered over ``channel`` (a client identity whose connections all
        closed), as RocketMQ's onChannelDestroy does; returns their addresses. A broker that registered
        again over another connection since (a restart) stays."""
        if not channel:
            return []
        return self._remove_brokers(lambda live: live.channel == channel)

    def _remove_brokers(self, gone: Callable[[BrokerLiveInfo], bool]) -> list[str]:
        """Drop the live brokers ``gone`` picks, with their addresses and, a name's last address going, its
        queue data; returns the addresses dropped."""
        removed: list[str] = []
        with self._lock:
            for addr, live in list(self.broker_live_table.items()):
                if not gone(live):
                    continue
                del self.broker_live_table[addr]
                removed.append(addr)
                for name, broker_data in list(self.broker_addr_table.items()):
                    for bid in [i for i, a in broker_data.broker_addrs.items() if a == addr]:
                        del broker_data.broker_addrs[bid]
                    self._drop_if_empty(name, broker_data.cluster)
        return removed

    def _drop_if_empty(self, broker_name: str, cluster_name: str) -> None:
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None or broker_data.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        for cluster in {cluster_name, broker_data.cluster}:
            names = self.cluster_addr_table.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster]
        for topic, by_broker in list(self.topic_queue_table.items()):
            if by_broker.pop(broker_name, None) is not None and not by_broker:
                del self.topic_queue_table[topic]

    def _create_and_update_queue_data(self, broker_name: str, tc: TopicConfig) -> None:
        self.topic_queue_table.setdefault(tc.topic_name, {})[broker_name] = QueueData.of(broker_name, tc)

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: dict[str, Any] | None) -> bool:
        """True when the namesrv's data version for ``broker_addr`` differs from ``data_version``."""
        with self._lock:
            live = self.broker_live_table.get(broker_addr)
            return live is None or data_version is None or live.data_version != data_version

    def data_version_of(self, broker_addr: str) -> dict[str, Any] | None:
        """The data version ``broker_addr`` last registered with."""
        with self._lock:
            live = self.broker_live_table.get(broker_addr)
            return None if live is None else live.data_version

    def touch_broker(self, broker_addr: str, now: int | None = None) -> bool:
        """Refresh a live broker's timestamp (for QUERY_DATA_VERSION); False when unknown."""
        with self._lock:
            live = self.broker_live_table.get(broker_addr)
            if live is None:
                return False
            live.last_update_timestamp = now_ms() if now is None else now
            return True

    def set_write_perm(self, broker_name: str, writable: bool) -> int:
        """Wipe (or add back) the write permission of every queue data of ``broker_name``; returns how many."""
        count = 0
        with self._lock:
            for by_broker in self.topic_queue_table.values():
                qd = by_broker.get(broker_name)
                if qd is not None:
                    by_broker[broker_name] = qd.with_write(writable)
                    count += 1
        return count

    # -- topics -----------------------------------------------------------

    def pick_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, or None when no live broker holds it."""
        with self._lock:
            by_broker = self.topic_queue_table.get(topic)
            if not by_broker:
                return None
            queue_datas = tuple(q for _, q in sorted(by_broker.items()))  # frozen: shared safely
            broker_datas = tuple(
                self._published(bd) for name in sorted(by_broker)
                if (bd := self.broker_addr_table.get(name)) is not None
            )
        if not broker_datas:
            return None
        return TopicRouteData(queue_datas, broker_datas)

    def _published(self, bd: BrokerData) -> BrokerData:
        """A copy of ``bd`` with its brokers' TCP doors (under the lock)."""
        live = self.broker_live_table
        doors = {bid: info.remoting_addr for bid, addr in bd.broker_addrs.items()
                 if (info := live.get(addr)) is not None and info.remoting_addr}
        return BrokerData(bd.cluster, bd.broker_name, dict(bd.broker_addrs), doors)

    def delete_topic(self, topic: str) -> bool:
        """Forget ``topic``'s routes; True when it was known."""
        with self._lock:
            return self.topic_queue_table.pop(topic, None) is not None

    def all_topics(self) -> list[str]:
        """Every topic with routes, sorted."""
        with self._lock:
            return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        """Topics with a queue on any broker name of ``cluster``, sorted."""
        with self._lock:
            names = self.cluster_addr_table.get(cluster, set())
            return sorted(t for t, by_broker in self.topic_queue_table.items() if names & by_broker.keys())

    def cluster_info(self, tcp: bool = False) -> dict[str, Any]:
        """RocketMQ's ClusterInfo:
        ``{"brokerAddrTable": {name: BrokerData}, "clusterAddrTable": {cluster: [names]}}``; with ``tcp``
        as a client of a TCP door sees it (the brokers' door addresses, see ``BrokerData.for_tcp``)."""
        with self._lock:
            datas = {name: self._published(bd) for name, bd in sorted(self.broker_addr_table.items())}
            return {
                "brokerAddrTable": {name: (bd.for_tcp() if tcp else bd).to_json() for name, bd in datas.items()},
                "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())},
            }
