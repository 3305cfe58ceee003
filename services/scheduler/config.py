"""SchedulerConfig: the scheduler service's settings (RocketMQ-style camelCase keys)."""

from __future__ import annotations

from dataclasses import dataclass

#: The system consumer group every scheduler replica joins.
SCHEDULER_GROUP = "CID_RMQ_SYS_SCHEDULE"


@dataclass
class SchedulerConfig:
    """Settings of one scheduler replica. Times are milliseconds.

    Loaded with ``rocketmesh.config.load_config``: a properties file, then
    ``ROCKETMESH_*`` environment variables, then command-line flags.
    """

    #: "host:port;host:port"; empty means the NAMESRV_ADDR environment variable.
    namesrv_addr: str = ""
    listen_address: str = "0.0.0.0"
    #: The status port (GET_CONSUMER_RUNNING_INFO); 0 picks a free one.
    listen_port: int = 10950
    #: Client instance name; replicas on one host need distinct names (empty: from the process id).
    instance_name: str = ""
    consumer_group: str = SCHEDULER_GROUP
    #: Entries pulled per request from a level or timer queue.
    pull_batch_size: int = 256
    #: Pending entries held per queue before pulling pauses (each costs a few hundred bytes, no body).
    max_pending_per_queue: int = 500_000
    rebalance_interval_ms: int = 20_000
    #: How often delivery progress is committed to the brokers (RocketMQ: flushDelayOffsetInterval).
    persist_offset_interval_ms: int = 1000
    heartbeat_broker_interval_ms: int = 30_000
    poll_name_server_interval_ms: int = 30_000
    #: Timeout of one DELIVER_DUE_MESSAGES request.
    deliver_timeout_ms: int = 3000
    #: Most entries named in one DELIVER_DUE_MESSAGES request.
    deliver_batch_max: int = 1024
    #: A failed delivery is retried after a pause that doubles up to this.
    deliver_retry_max_delay_ms: int = 5000
