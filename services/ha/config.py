"""HaConfig: the ha service's settings (RocketMQ-style camelCase keys)."""

from __future__ import annotations

from dataclasses import dataclass

from rocketmesh.server.metrics import PortRange
from rocketmesh.server.service_identity import ServiceConfig


@dataclass
class HaConfig(ServiceConfig):
    """Settings of one ha service, which feeds one slave (the shared ones are ServiceConfig's). Times are
    milliseconds, sizes bytes.

    Loaded with ``rocketmesh.runtime.config.load_config``: a properties file, then
    ``ROCKETMESH_*`` environment variables, then command-line flags.
    """

    listen_port: int = 10970
    metrics_prom_exporter_port: PortRange = PortRange(5560)
    #: The broker group to replicate: its master (brokerId 0) and slave are looked up by this name.
    broker_name: str = "broker-a"
    #: Which slave of the group this service feeds.
    slave_broker_id: int = 1
    #: Fixed addresses instead of the name servers' (both, or neither).
    master_address: str = ""
    slave_address: str = ""
    #: The most bytes one transfer carries (RocketMQ's haTransferBatchSize).
    ha_transfer_batch_size: int = 32 * 1024
    #: While the slave is further behind than one batch, transfers carry up to this much (a slave
    #: catching up moves in fewer round trips). 0: always haTransferBatchSize.
    ha_catch_up_batch_size: int = 1024 * 1024
    #: How long the master may hold a transfer that finds no new bytes (also how long a stopping
    #: service may wait for the transfer it has out).
    ha_transfer_suspend_millis: int = 1000
    #: Timeout of one request to a broker (on top of the suspend time for transfers).
    request_timeout_millis: int = 5000
    #: After a failure the service waits, doubling from 100 ms up to this, before it tries again.
    retry_max_delay_millis: int = 5000
    #: The addresses are looked up again this often while replication runs (a master replaced).
    address_check_interval_millis: int = 10_000
