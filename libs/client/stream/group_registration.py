"""A consumer group that is registered with the brokers but pulls nothing itself.

    with GroupRegistration("reports", namesrv, [make_subscription("Orders")]) as reg:
        ...                                         # `admin consumer-connection -g reports` lists us
        reg.commit({mq: 17})                        # `admin consumer-progress` shows the new offsets

For applications that read queues by offset on their own (a stream processor
whose checkpoint holds the offsets) yet want the mesh to see them as a consumer
group: connections, subscriptions and committed offsets, lag. The client
instance sends the heartbeats (every ``heartbeat_broker_interval_ms``), so the
registration lives exactly as long as this object is open. Offset resets pushed
by an admin are not applied (the application's own offsets are the truth); they
are logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rocketmesh.client.consumer.offset_store import RemoteBrokerOffsetStore
from rocketmesh.client.consumer.types import ConsumeFromWhere, MessageModel
from rocketmesh.client.errors import MQClientError
from rocketmesh.client.instance import ClientInstance
from rocketmesh.client.running_info import PROP_CONSUME_TYPE, ConsumeMessageDirectlyResult, ConsumerRunningInfo
from rocketmesh.client.validators import check_group
from rocketmesh.filter import SubscriptionData
from rocketmesh.model.message import MessageExt, MessageQueue
from rocketmesh.runtime.log import get_logger

log = get_logger("client", component="group_registration")


class GroupRegistration:
    """See the module docstring. ``subscriptions`` are what the heartbeats announce (one per topic)."""

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None,
        subscriptions: Sequence[SubscriptionData],
        *,
        consume_from: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        instance_name: str | None = None,
        heartbeat_broker_interval_ms: int = 30_000,
    ) -> None:
        check_group(group)
        if not subscriptions:
            raise MQClientError("a group registration needs at least one subscription")
        self.group = group
        self.subscriptions = {s.topic: s for s in subscriptions}
        self.consume_from = consume_from
        self._namesrv = namesrv
        self._instance_options: dict[str, Any] = dict(instance_name=instance_name,
                                                      heartbeat_broker_interval_ms=heartbeat_broker_interval_ms)
        self._instance: ClientInstance | None = None
        self._store: RemoteBrokerOffsetStore | None = None

    def start(self, timeout_ms: int = 3000) -> GroupRegistration:
        """Register the group and send a first heartbeat to the topics' brokers (bounded by ``timeout_ms``)."""
        if self._instance is not None:
            return self
        inst = ClientInstance.acquire(self._namesrv, **self._instance_options)
        try:
            inst.register_consumer(self.group, self._heartbeat_entry, self)
            for topic in self.subscriptions:
                inst.add_topic(topic)
                inst.update_topic_route(topic, timeout_ms)
            inst.send_heartbeat_to_all_brokers(timeout_ms)
        except BaseException:
            inst.unregister_consumer(self.group)
            inst.release()
            raise
        self._instance = inst
        self._store = RemoteBrokerOffsetStore(inst, self.group)
        return self

    def close(self) -> None:
        """Leave the group (the brokers are told at once, bounded) and release the client instance."""
        inst, self._instance = self._instance, None
        if inst is None:
            return
        inst.unregister_consumer(self.group)
        inst.release()

    def __enter__(self) -> GroupRegistration:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client_id(self) -> str:
        """The id the brokers list this registration under (``ip@instance``)."""
        return self._require().client_id

    def commit(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Store ``offsets`` (the next offset to consume per queue) as the group's offsets on the queues'
        brokers, all at once; a broker that fails is logged, not raised (the next commit repeats it)."""
        self._require()
        store = self._store
        assert store is not None
        for mq, offset in offsets.items():
            store.update(mq, int(offset), False)
        store.persist_all(list(offsets))

    def committed(self, mq: MessageQueue) -> int | None:
        """The group's offset of ``mq`` as the broker stores it; None when it has none."""
        self._require()
        assert self._store is not None
        return self._store.fetch_from_broker(mq)

    def _require(self) -> ClientInstance:
        if self._instance is None:
            raise MQClientError("the group registration is not started")
        return self._instance

    def _heartbeat_entry(self) -> dict[str, Any]:
        return {"groupName": self.group, "consumeType": "CONSUME_ACTIVELY",
                "messageModel": MessageModel.CLUSTERING.value, "consumeFromWhere": self.consume_from.value,
                "subscriptionDataSet": [s.to_json() for s in self.subscriptions.values()], "unitMode": False}

    # ConsumerHooks: the brokers' pushes about the group.

    def rebalance_now(self) -> None:
        """Nothing to rebalance: the application chooses its queues."""

    def reset_offset(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """Not applied: the application's own offsets are the truth; the reset shows at its next start."""
        log.warning("reset_offset_ignored", group=self.group, topic=topic, queues=len(offsets))

    def running_info(self) -> ConsumerRunningInfo:
        """The group's subscriptions; no queues: the application reads them on its own."""
        return ConsumerRunningInfo({"consumerGroup": self.group, "messageModel": MessageModel.CLUSTERING.value,
                                    "consumeFromWhere": self.consume_from.value,
                                    PROP_CONSUME_TYPE: "CONSUME_ACTIVELY"},
                                   list(self.subscriptions.values()))

    def consume_message_directly(self, msg: MessageExt, broker_name: str) -> ConsumeMessageDirectlyResult | None:
        """None: a registration has no listener."""
        return None
