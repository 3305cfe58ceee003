"""SchedulerConfig: the scheduler service's settings (RocketMQ-style camelCase keys)."""

from __future__ import annotations

from dataclasses import dataclass

from rocketmesh.server.metrics import PortRange
from rocketmesh.server.system_group import SystemGroupConfig

#: The system consumer group every scheduler replica joins.
SCHEDULER_GROUP = "CID_RMQ_SYS_SCHEDULE"


@dataclass
class SchedulerConfig(SystemGroupConfig):
    """Settings of one scheduler replica (the shared ones are SystemGroupConfig's). Times are milliseconds.

    Loaded with ``rocketmesh.runtime.config.load_config``: a properties file, then
    ``ROCKETMESH_*`` environment variables, then command-line flags.
    """

    listen_port: int = 10950
    metrics_prom_exporter_port: PortRange = PortRange(5558)
    consumer_group: str = SCHEDULER_GROUP
    #: A timer still this far from due after waiting this long is parked again at its queue's tail, so
    #: the queue's committed offset (and the brokers' memory of what was delivered) never lags more.
    timer_roll_window_ms: int = 600_000
    #: Pending entries held per queue before pulling pauses (only offsets and due times are kept).
    max_pending_per_queue: int = 500_000
    #: Timeout of one DELIVER_DUE_MESSAGES request.
    deliver_timeout_ms: int = 3000
    #: Most entries named in one DELIVER_DUE_MESSAGES request.
    deliver_batch_max: int = 1024
    #: A failed delivery is retried after a pause that doubles up to this.
    deliver_retry_max_delay_ms: int = 5000
