"""AsyncAdmin: what an application asks of the mesh at run time, from asyncio code.

    async with AsyncAdmin("127.0.0.1:9876") as admin:
        await admin.create_topic("Orders", read_queue_nums=4, write_queue_nums=4)
        await admin.wait_topic_route("Orders")
        stats = await admin.consume_stats("orders-consumer", "Orders")
        print("lag:", stats.total_diff())

Each method is :class:`~rocketmesh.client.admin.admin.Admin`'s of the same name, with the same arguments,
return types and errors, run in a worker thread (``asyncio.to_thread``): admin calls are rare, so a thread
for the time of one costs little, and the loop never waits on the network. The operators' calls
(clusters, subscription groups, offset resets, dead letters, transactions) stay on Admin and the CLI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from rocketmesh.client.admin.admin import Admin
from rocketmesh.client.api import DEFAULT_TIMEOUT_MS
from rocketmesh.client.results import (
    ConsumerConnection,
    ConsumeStats,
    ConsumeStatsList,
    ProducerConnection,
    TopicOffset,
)
from rocketmesh.model.message import MessageExt, MessageQueue
from rocketmesh.model.route import Perm, TopicRouteData


class AsyncAdmin:
    """Run-time administration over a name server list (``"host:port;host:port"``, a list, or NAMESRV_ADDR),
    with :class:`~rocketmesh.client.admin.admin.Admin`'s settings. Use ``async with`` (or ``await start()`` and
    ``await close()``); a call before ``start()`` starts it. Failures are Admin's: MQBrokerError with the
    server's ``response_code`` and ``remark``, RequestTimeoutError, MQClientError for bad input."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        instance_name: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        self._admin = Admin(namesrv, timeout_ms=timeout_ms, instance_name=instance_name, access_key=access_key,
                            secret_key=secret_key)

    @property
    def admin(self) -> Admin:
        """The threaded Admin underneath (its calls block: from the loop, use this class's)."""
        return self._admin

    # -- life cycle ------------------------------------------------------------

    async def start(self) -> AsyncAdmin:
        """Join the client instance (idempotent; in a worker thread); returns self."""
        await asyncio.to_thread(self._admin.start)
        return self

    async def close(self) -> None:
        """Leave the client instance (in a worker thread)."""
        await asyncio.to_thread(self._admin.close)

    async def __aenter__(self) -> AsyncAdmin:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- topics ----------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        read_queue_nums: int = 8,
        write_queue_nums: int = 8,
        perm: int = int(Perm.READ | Perm.WRITE),
        broker_addr: str | None = None,
        cluster: str | None = None,
        *,
        order: bool = False,
        topic_sys_flag: int = 0,
    ) -> list[str]:
        """Create or update ``topic`` on ``broker_addr``, else on every master of ``cluster``, else of all
        clusters; the broker addresses written to. The route appears shortly after: see
        :meth:`wait_topic_route`."""
        return await asyncio.to_thread(self._admin.create_topic, topic, read_queue_nums, write_queue_nums, perm,
                                       broker_addr, cluster, order=order, topic_sys_flag=topic_sys_flag)

    async def topic_list(self) -> list[str]:
        """Every topic the name servers know, sorted."""
        return await asyncio.to_thread(self._admin.topic_list)

    async def topic_route(self, topic: str) -> TopicRouteData:
        """The name server's current route of ``topic``; MQBrokerError(TOPIC_NOT_EXIST) when it has none."""
        return await asyncio.to_thread(self._admin.topic_route, topic)

    async def wait_topic_route(self, topic: str, timeout_s: float = 10.0, interval_s: float = 0.1
                               ) -> TopicRouteData:
        """Until the name servers have a route for ``topic`` (after create_topic), at most ``timeout_s``; raises
        the last MQBrokerError(TOPIC_NOT_EXIST) when none appeared in time. The waiting is Admin's, in the
        worker thread."""
        return await asyncio.to_thread(self._admin.wait_topic_route, topic, timeout_s, interval_s)

    async def topic_status(self, topic: str) -> dict[MessageQueue, TopicOffset]:
        """Per queue of ``topic``: min and max offset and last update time, in queue order."""
        return await asyncio.to_thread(self._admin.topic_status, topic)

    # -- offsets ---------------------------------------------------------------

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset one past the last message of ``mq``."""
        return await asyncio.to_thread(self._admin.max_offset, mq)

    async def min_offset(self, mq: MessageQueue) -> int:
        """The offset of the first message of ``mq`` still stored."""
        return await asyncio.to_thread(self._admin.min_offset, mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``mq`` stored at or after ``timestamp_ms``."""
        return await asyncio.to_thread(self._admin.search_offset, mq, timestamp_ms)

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        """The store time (epoch ms) of the first message of ``mq`` still stored."""
        return await asyncio.to_thread(self._admin.earliest_msg_store_time, mq)

    # -- consumer groups -------------------------------------------------------

    async def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """``group``'s progress per queue (broker offset, consumer offset, lag; ``total_diff()`` sums the lag).
        MQClientError(CONSUMER_NOT_ONLINE) when no broker knows the group."""
        return await asyncio.to_thread(self._admin.consume_stats, group, topic)

    async def consumer_connection(self, group: str) -> ConsumerConnection:
        """``group``'s running clients and subscriptions. MQClientError(CONSUMER_NOT_ONLINE) when none runs."""
        return await asyncio.to_thread(self._admin.consumer_connection, group)

    async def topic_consumers(self, topic: str) -> list[str]:
        """The consumer groups of ``topic``, sorted: subscribed by an online consumer or with an offset committed
        in it, on any master of its route."""
        return await asyncio.to_thread(self._admin.topic_consumers, topic)

    async def broker_consume_stats(self, broker_addr: str, is_order: bool = False) -> ConsumeStatsList:
        """The progress of every consumer group with offsets on the broker at ``broker_addr``, in one request:
        per group the ConsumeStats of each of its topics, and the broker's total lag."""
        return await asyncio.to_thread(self._admin.broker_consume_stats, broker_addr, is_order)

    # -- producer groups -------------------------------------------------------

    async def producer_connection(self, group: str) -> ProducerConnection:
        """``group``'s online producer clients. MQBrokerError(SYSTEM_ERROR, "the producer group[...] not exist")
        when none runs."""
        return await asyncio.to_thread(self._admin.producer_connection, group)

    # -- messages --------------------------------------------------------------

    async def query_msg_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                               end_ms: int | None = None) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their KEYS, stored in [begin_ms, end_ms], in store-time
        order."""
        return await asyncio.to_thread(self._admin.query_msg_by_key, topic, key, max_num, begin_ms, end_ms)

    async def query_msg_by_id(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """A message by either id: an offset message id is read from its broker; a client message id (a
        SendResult's ``msg_id``) is looked up in ``topic``'s index, so it needs ``topic``."""
        return await asyncio.to_thread(self._admin.query_msg_by_id, msg_id, topic)

    async def query_msg_by_unique_key(self, topic: str, unique_key: str) -> MessageExt:
        """The message of ``topic`` whose UNIQ_KEY (client message id) is ``unique_key``."""
        return await asyncio.to_thread(self._admin.query_msg_by_unique_key, topic, unique_key)

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message with this offset message id (a SendResult's ``offset_msg_id``)."""
        return await asyncio.to_thread(self._admin.view_message, offset_msg_id)

    def __repr__(self) -> str:
        return f"AsyncAdmin(namesrv={';'.join(self._admin.namesrv_addrs)!r})"
