"""Membership of a system consumer group, for the mesh's own services (scheduler, txn-checker).

Such a service pulls system topics of every master broker as a member of
one group, so that its replicas split the queues by rebalance and its
progress lives on the brokers as that group's offsets. This module holds the
settings they share and builds the ConsumerCore they pull with.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from typing import Any, Callable

import orjson

from rocketmesh.client.consumer.core import ConsumerCore, ConsumerHooks
from rocketmesh.client.consumer.options import ConsumerOptions
from rocketmesh.client.consumer.types import ConsumeFromWhere, MessageModel
from rocketmesh.remoting import RemotingCommand, RemotingServer, RequestCode, RequestContext, ResponseCode, response_to


@dataclass
class SystemGroupConfig:
    """Settings every system-group service has (times in ms); a service's config extends this."""

    #: "host:port;host:port"; empty means the NAMESRV_ADDR environment variable.
    namesrv_addr: str = ""
    #: Loopback by default, as ``rocketmesh up``: set 0.0.0.0 (or an interface) to serve other hosts.
    listen_address: str = "127.0.0.1"
    #: The status port (GET_CONSUMER_RUNNING_INFO); 0 picks a free one.
    listen_port: int = 0
    #: Client instance name; replicas need distinct ones (empty: the service name, process id and a
    #: random suffix, distinct even for containers that share a network namespace).
    instance_name: str = ""
    #: The system consumer group every replica joins.
    consumer_group: str = ""
    #: Messages per pull of a system queue.
    pull_batch_size: int = 256
    rebalance_interval_ms: int = 20_000
    #: How often progress is committed to the brokers.
    persist_offset_interval_ms: int = 1000
    heartbeat_broker_interval_ms: int = 30_000
    poll_name_server_interval_ms: int = 30_000


def instance_name_of(config: SystemGroupConfig, service: str) -> str:
    """The configured instance name, or one made up for this process."""
    return config.instance_name or f"{service}-{os.getpid()}-{secrets.token_hex(3)}"


def system_group_core(config: SystemGroupConfig, instance_name: str, hooks: ConsumerHooks) -> ConsumerCore:
    """A ConsumerCore of ``config.consumer_group``: clustering, from the first offset, pulling actively,
    with the service's ``hooks``. The service subscribes its system topics
    (``subscribe(topic, system=True)``) before ``start()``."""
    options = ConsumerOptions(
        message_model=MessageModel.CLUSTERING, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        pull_batch_size=config.pull_batch_size, persist_consumer_offset_interval_ms=config.persist_offset_interval_ms,
        rebalance_interval_ms=config.rebalance_interval_ms, instance_name=instance_name,
        heartbeat_broker_interval_ms=config.heartbeat_broker_interval_ms,
        poll_name_server_interval_ms=config.poll_name_server_interval_ms)
    return ConsumerCore(config.consumer_group, config.namesrv_addr or os.environ.get("NAMESRV_ADDR", ""), options,
                        hooks, consume_type="CONSUME_ACTIVELY")


def status_server(config: SystemGroupConfig, name: str, status: Callable[[], dict[str, Any]]) -> RemotingServer:
    """The service's own ZeroMQ server (not started): GET_CONSUMER_RUNNING_INFO answers ``status()`` as JSON."""
    server = RemotingServer(f"{config.listen_address}:{config.listen_port}", name=name)

    def running_info(req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return response_to(req, ResponseCode.SUCCESS, None, None, orjson.dumps(status()))
    server.register(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
    return server
