"""A connection to the mesh for a program that keeps its own offsets: exact offset ranges, a group's offsets.

    with StreamClient(namesrv) as client:
        sub = make_subscription("Orders", "TagA || TagB")
        for chunk in client.pull_range("reports", mq, sub, 100, 200):
            handle(chunk.records)
        client.commit_offsets("reports", {mq: 200})
        client.committed_offset("reports", mq)            # 200

It registers no consumer group (a :class:`~rocketmesh.client.stream.GroupRegistration` does that) and never
waits for new messages: a stream processor whose checkpoint holds the offsets reads what it planned, and
tells the brokers how far its group got so that the mesh's tools show its progress and lag.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from rocketmesh.client.consumer.offset_store import RemoteBrokerOffsetStore
from rocketmesh.client.errors import MQClientError
from rocketmesh.client.instance import DEFAULT_TIMEOUT_MS, ClientInstance
from rocketmesh.client.stream.range_pull import RangeChunk, pull_range
from rocketmesh.filter import SubscriptionData
from rocketmesh.model.message import MessageQueue


class StreamClient:
    """One connection to the mesh's name servers and brokers (shared with the SDK's other clients of the same
    name servers, instance name and account), usable from several threads. Close it when done."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        instance_name: str | None = None,
        request_timeout_ms: int = DEFAULT_TIMEOUT_MS,
        access_key: str | None = None,
        secret_key: str | None = None,
    ) -> None:
        """Connect to ``namesrv`` (``"host:port;host:port"``, a list, or None for NAMESRV_ADDR)."""
        self._instance: ClientInstance | None = ClientInstance.acquire(
            namesrv, instance_name=instance_name, request_timeout_ms=request_timeout_ms,
            access_key=access_key, secret_key=secret_key)

    @property
    def closed(self) -> bool:
        """True once closed (by :meth:`close`, or the connection shut down underneath)."""
        return self._instance is None or self._instance.closed

    def close(self) -> None:
        """Give the connection back (idempotent)."""
        inst, self._instance = self._instance, None
        if inst is not None:
            inst.release()

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pull_range(
        self,
        group: str,
        mq: MessageQueue,
        subscription: SubscriptionData,
        start: int,
        end: int,
        *,
        pull_batch_size: int = 1024,
        timeout_ms: int = 10_000,
    ) -> Iterator[RangeChunk]:
        """The records of ``mq`` whose queue offsets are in [``start``, ``end``), in order, one chunk per pull,
        as ``group`` (the broker checks the group's permission and applies ``subscription``'s filter).

        Offsets the broker no longer stores are skipped with a warning; the range stops early at the queue's
        end. Each pull is bounded by ``timeout_ms``. Raises MQBrokerError for a broker's refusal and the SDK's
        timeout and connection errors.
        """
        return pull_range(self._require(), group, mq, subscription, start, end,
                          pull_batch_size=pull_batch_size, timeout_ms=timeout_ms)

    def committed_offset(self, group: str, mq: MessageQueue) -> int | None:
        """``group``'s offset of ``mq`` as its broker stores it (the next message to consume); None when the
        group has none. Raises MQError when the broker cannot be asked."""
        return RemoteBrokerOffsetStore(self._require(), group).fetch_from_broker(mq)

    def commit_offsets(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        """Store ``offsets`` (the next offset to consume per queue) as ``group``'s on the queues' brokers, all
        at once; a broker that fails is logged, not raised (the next commit repeats it)."""
        store = RemoteBrokerOffsetStore(self._require(), group)
        for mq, offset in offsets.items():
            store.update(mq, int(offset), False)
        store.persist_all(list(offsets))

    def _require(self) -> ClientInstance:
        if self._instance is None:
            raise MQClientError("the stream client is closed; create a new one")
        return self._instance
