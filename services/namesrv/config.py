"""NamesrvConfig: the name server's settings under RocketMQ's key names."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rocketmesh.acl.config import AclServerConfig
from rocketmesh.remoting.transport.options import DEFAULT_MAX_MESSAGE_SIZE
from rocketmesh.server.metrics import MetricsConfig, PortRange


@dataclass
class NamesrvConfig(MetricsConfig, AclServerConfig):
    """Settings of one name server. Intervals and times are milliseconds.

    Loaded with ``rocketmesh.runtime.config.load_config``: a properties file
    (``listenPort=9876``), then ``ROCKETMESH_*`` environment variables, then
    command-line flags. ACL: aclEnable, aclFile (default ``plain_acl.yml`` beside kvConfigPath).
    """

    listen_port: int = 9876
    #: The TCP door for RocketMQ's own clients (their remoting protocol); 0 opens none. ``rocketmesh up``
    #: opens it on 9866 (``rocketmesh up --help``).
    remoting_listen_port: int = 0
    metrics_prom_exporter_port: PortRange = PortRange(5556)
    #: Loopback by default, as ``rocketmesh up``: set 0.0.0.0 (or an interface) to serve other hosts.
    listen_address: str = "127.0.0.1"
    #: How often brokers silent for ``broker_channel_expired_time`` are looked for.
    scan_not_active_broker_interval: int = 10_000
    #: A broker that has not re-registered for this long is dropped with its routes.
    broker_channel_expired_time: int = 120_000
    kv_config_path: str = os.path.join(os.path.expanduser("~"), "namesrv", "kvConfig.json")
    #: Put the ORDER_TOPIC_CONFIG KV entry of a topic into its route (RocketMQ's orderMessageEnable).
    order_message_enable: bool = False
    #: Largest inbound frame accepted, bytes (a REGISTER_BROKER body holds every topic of a broker).
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
