"""The parts of a running broker that its processors and background services work with.

The controller builds them once the store is loaded and hands them to each processor, so a processor
depends on these parts (and on the other processors it is given by name), never on the controller.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketmesh.broker.client.manager import ClientManager
from rocketmesh.broker.client.rebalance_lock import RebalanceLockManager
from rocketmesh.broker.config import BrokerConfig
from rocketmesh.broker.metadata.consumer_offsets import ConsumerOffsetManager
from rocketmesh.broker.metadata.subscription_group import SubscriptionGroupManager
from rocketmesh.broker.metadata.topic_config import TopicConfigManager
from rocketmesh.broker.store import BrokerRole, MessageStore, MessageStoreConfig
from rocketmesh.remoting import RemotingClient, RemotingServer


@dataclass(eq=False)
class BrokerParts:
    """A started broker's state: its configs, store, metadata tables, client tables and sockets."""

    config: BrokerConfig
    store_config: MessageStoreConfig
    store: MessageStore
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    subscription_groups: SubscriptionGroupManager
    clients: ClientManager
    locks: RebalanceLockManager
    #: Serves the clients' requests (and pushes to them).
    server: RemotingServer
    #: Calls the name servers and, on a slave, the master.
    client: RemotingClient

    @property
    def broker_addr(self) -> str:
        """host:port the broker serves on, as it registers with the name servers."""
        return f"{self.config.broker_ip1}:{self.server.port}"

    @property
    def is_slave(self) -> bool:
        return self.store_config.broker_role is BrokerRole.SLAVE
