"""TxnCheckerConfig: the txn-checker service's settings (RocketMQ's key names where it has them)."""

from __future__ import annotations

from dataclasses import dataclass

from rocketmesh.model.topics import TRANS_CHECK_GROUP
from rocketmesh.runtime.config import ConfigError
from rocketmesh.server.metrics import PortRange
from rocketmesh.server.system_group import SystemGroupConfig


@dataclass
class TxnCheckerConfig(SystemGroupConfig):
    """Settings of one txn-checker replica (the shared ones are SystemGroupConfig's). Times are milliseconds.

    Loaded with ``rocketmesh.runtime.config.load_config``: a properties file, then
    ``ROCKETMESH_*`` environment variables, then command-line flags.
    """

    listen_port: int = 10960
    metrics_prom_exporter_port: PortRange = PortRange(5559)
    #: The brokers keep this group's offsets of the half and op queues.
    consumer_group: str = TRANS_CHECK_GROUP
    #: A half message is first checked this long after it was born (RocketMQ's transactionTimeOut); its
    #: CHECK_IMMUNITY_TIME_IN_SECONDS property, when set, takes the place of this.
    transaction_time_out: int = 6000
    #: How often the half queues are looked through (RocketMQ's transactionCheckInterval).
    transaction_check_interval: int = 60_000
    #: Checks of one half message before it is given up: moved to TRANS_CHECK_MAX_TIME_TOPIC, never delivered.
    transaction_check_max: int = 15
    #: Half messages held per queue before pulling pauses (bodies are not kept).
    max_pending_per_queue: int = 100_000
    #: Timeout of one CHECK_HALF_MESSAGE or op-queue pull.
    check_timeout_ms: int = 5000
    #: CHECK_HALF_MESSAGE requests in flight at once.
    check_concurrency: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        for key, value, low, high in (("transactionTimeOut", self.transaction_time_out, 0, None),
                                      ("transactionCheckInterval", self.transaction_check_interval, 1, None),
                                      ("transactionCheckMax", self.transaction_check_max, 1, None),
                                      ("pullBatchSize", self.pull_batch_size, 1, 1024),
                                      ("maxPendingPerQueue", self.max_pending_per_queue, 1, None),
                                      ("checkTimeoutMs", self.check_timeout_ms, 1, None),
                                      ("checkConcurrency", self.check_concurrency, 1, None)):
            if value < low or (high is not None and value > high):
                bounds = f"within {low}..{high}" if high is not None else f"at least {low}"
                raise ConfigError(f"{key} must be {bounds}, got {value}")
