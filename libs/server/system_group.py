"""Membership of a system consumer group, for the mesh's own services (scheduler, txn-checker).

Such a service pulls system topics of every master broker as a member of
one group, so that its replicas split the queues by rebalance and its
progress lives on the brokers as that group's offsets. This module holds the
settings they share and builds the ConsumerCore they pull with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rocketmesh.client.consumer.allocate import AllocateAveragelyByCircle
from rocketmesh.client.consumer.core import ConsumerCore, ConsumerHooks
from rocketmesh.client.consumer.options import ConsumerOptions
from rocketmesh.client.consumer.types import ConsumeFromWhere, MessageModel
from rocketmesh.server.service_identity import ServiceConfig


@dataclass
class SystemGroupConfig(ServiceConfig):
    """Settings every system-group service has (times in ms); a service's config extends this."""

    #: The system consumer group every replica joins.
    consumer_group: str = ""
    #: Messages per pull of a system queue.
    pull_batch_size: int = 256
    rebalance_interval_ms: int = 20_000
    #: How often progress is committed to the brokers.
    persist_offset_interval_ms: int = 1000
    heartbeat_broker_interval_ms: int = 30_000
    poll_name_server_interval_ms: int = 30_000


def system_group_core(config: SystemGroupConfig, instance_name: str, hooks: ConsumerHooks) -> ConsumerCore:
    """A ConsumerCore of ``config.consumer_group``: clustering, from the first offset, pulling actively,
    with the service's ``hooks``. The service subscribes its system topics
    (``subscribe(topic, system=True)``) before ``start()``.

    Queues go round the replicas by circle, not in contiguous runs: SCHEDULE_TOPIC_XXXX's queue i is
    delay level i + 1, and the busy low levels would otherwise all fall to the first replica."""
    options = ConsumerOptions(
        message_model=MessageModel.CLUSTERING, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        allocate=AllocateAveragelyByCircle(),
        pull_batch_size=config.pull_batch_size, persist_consumer_offset_interval_ms=config.persist_offset_interval_ms,
        rebalance_interval_ms=config.rebalance_interval_ms, instance_name=instance_name,
        heartbeat_broker_interval_ms=config.heartbeat_broker_interval_ms,
        poll_name_server_interval_ms=config.poll_name_server_interval_ms,
        access_key=config.access_key or None, secret_key=config.secret_key or None)
    return ConsumerCore(config.consumer_group, config.namesrv_addr or os.environ.get("NAMESRV_ADDR", ""), options,
                        hooks, consume_type="CONSUME_ACTIVELY")
