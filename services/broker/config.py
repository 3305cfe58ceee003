"""BrokerConfig: the broker's own settings (the store's are MessageStoreConfig), RocketMQ's key names."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rocketmesh.acl.config import AclServerConfig, ClientCredentialsConfig
from rocketmesh.broker.store import BrokerRole, MessageStoreConfig
from rocketmesh.model.route import PERM_READ_WRITE
from rocketmesh.runtime.config import ConfigError, load_config, snake_case
from rocketmesh.server.metrics import MetricsConfig

#: A longer spin only burns CPU: a peer that has not sent within 10 ms is not in a request-response loop.
MAX_BUSY_POLL_US = 10_000


@dataclass
class BrokerConfig(MetricsConfig, AclServerConfig, ClientCredentialsConfig):
    """Broker settings; a broker.conf may mix these with MessageStoreConfig keys, as RocketMQ's does.

    ACL: aclEnable and aclFile (default ``<storePathRootDir>/config/plain_acl.yml``) for the requests it
    serves; accessKey / secretKey for its own requests (REGISTER_BROKER needs an admin account)."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"
    #: 0 is the master, anything else a slave.
    broker_id: int = 0
    #: The address clients and namesrv are given (RocketMQ's brokerIP1).
    broker_ip1: str = "127.0.0.1"
    #: Loopback by default, as ``rocketmesh up``: set 0.0.0.0 (or an interface) to serve other hosts.
    listen_address: str = "127.0.0.1"
    listen_port: int = 10911
    ha_listen_port: int = 10912
    #: The TCP door for RocketMQ's own clients (their remoting protocol); 0 opens none. With a door, the
    #: broker registers its address beside the ZeroMQ one and writes it into each record's STOREHOST, so
    #: an offset message id names an address RocketMQ's clients reach. ``rocketmesh up`` opens 10915.
    remoting_listen_port: int = 0
    #: "host:port;host:port"; empty means the NAMESRV_ADDR environment variable.
    namesrv_addr: str = ""
    broker_permission: int = PERM_READ_WRITE
    auto_create_topic_enable: bool = True
    default_topic_queue_nums: int = 8
    #: How often the broker re-registers with every namesrv (ms).
    register_name_server_period: int = 30_000
    register_broker_timeout_mills: int = 6000
    #: A send that waited longer than this in the broker's queue is answered SYSTEM_BUSY.
    wait_time_mills_in_send_queue: int = 200
    send_thread_pool_queue_capacity: int = 10_000
    #: Clients silent for this long are dropped from the client tables (ms).
    channel_expired_timeout: int = 120_000
    client_scan_interval: int = 10_000
    #: RocketMQ's pull / admin thread pools; sends go through one ordered send worker.
    admin_broker_thread_pool_nums: int = 4
    #: Hold a pull that finds nothing until a message arrives (up to the client's suspend timeout).
    long_polling_enable: bool = True
    #: Without long polling, how long a pull that finds nothing is held (ms).
    short_polling_time_mills: int = 1000
    #: Let consumers read from a slave: the master suggests the slave to a consumer whose next
    #: message is no longer in the page cache (accessMessageInMemoryMaxRatio), and a slave keeps
    #: serving a consumer it was suggested to. Without it a slave serves pulls only while its master is
    #: gone and sends every consumer back to the master.
    slave_read_enable: bool = False
    #: A slave copies its master's topics, offsets and subscription groups this often (ms).
    slave_sync_interval_mills: int = 10_000
    #: Allow SQL92 subscriptions (filtering on message properties).
    enable_property_filter: bool = False
    #: The most messages one pull returns.
    max_pull_msg_nums: int = 1024
    #: How often consumerOffset.json is written when offsets moved (ms).
    flush_consumer_offset_interval: int = 5000
    #: Create a subscription group on first use (pull, heartbeat) rather than refusing it.
    auto_create_subscription_group: bool = True
    #: An orderly consumer's queue lock lapses when not renewed for this long (ms).
    rebalance_lock_max_live_time: int = 60_000
    #: Timer messages may be due at most this far ahead (s); further is refused (RocketMQ 5's timerMaxDelaySec).
    timer_max_delay_sec: int = 7 * 24 * 3600
    #: Queues of the timer topic, so several scheduler replicas can share a broker's timers.
    timer_queue_nums: int = 4
    #: Refuse half (transactional prepared) messages with NO_PERMISSION.
    reject_transaction_message: bool = False
    #: Threads that store END_TRANSACTION outcomes (commit re-puts, op messages).
    end_transaction_thread_pool_nums: int = 4
    #: Transactions remembered as decided, by id: a late or repeated END_TRANSACTION for one of them changes
    #: nothing. Rebuilt from the tail of RMQ_SYS_TRANS_OP_HALF_TOPIC when the broker starts.
    transaction_decided_table_size: int = 100_000
    #: While the broker runs, ask the kernel (PM QoS, /dev/cpu_dma_latency; needs root) to keep idle CPUs in
    #: states that wake within this many microseconds; 0 keeps them polling. Where an idle CPU halts (a
    #: virtual machine), each thread wake-up on the way of a message otherwise costs tens of microseconds.
    #: Negative (the default): leave the machine's idle states alone.
    cpu_dma_latency_us: int = -1
    #: After handling requests, the broker's remoting I/O thread keeps looking for the next one this long
    #: (yielding the CPU between looks) before it sleeps. A sync producer's next send then finds it awake
    #: instead of paying a thread wake-up. It spins only while requests come at most twice this far apart,
    #: so an idle or lightly loaded broker does not. 0 (the default) turns it off: whether the spin pays
    #: depends on what the host makes a wake-up cost, and the CPU it burns is taken from whatever shares
    #: the machine (docs/operations.md).
    server_busy_poll_us: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.server_busy_poll_us <= MAX_BUSY_POLL_US:
            raise ConfigError(f"serverBusyPollUs must be within 0..{MAX_BUSY_POLL_US}, got {self.server_busy_poll_us}")


def load_broker_config(path: str | None = None, overrides: dict[str, Any] | None = None,
                       environ: dict[str, str] | None = None) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Both configs from one broker.conf (+ environment, + flags); each takes the keys it knows."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    broker_keys, store_keys = {}, {}
    broker_fields = {f.name for f in dataclasses.fields(BrokerConfig)}
    store_fields = {f.name for f in dataclasses.fields(MessageStoreConfig)}
    for k, v in overrides.items():
        name = snake_case(k)
        if name in broker_fields:
            broker_keys[k] = v
        elif name in store_fields:
            store_keys[k] = v
        else:
            raise ConfigError(f"unknown config key {k!r}")
    broker = load_config(BrokerConfig, path, broker_keys, environ)
    if "storeHost" not in store_keys and "store_host" not in store_keys:
        store_keys["store_host"] = f"{broker.broker_ip1}:{broker.listen_port}"
    store = load_config(MessageStoreConfig, path, store_keys, environ)
    # As RocketMQ: a master is brokerId 0 whatever the file says; a slave needs an id above it.
    if store.broker_role is BrokerRole.SLAVE:
        if broker.broker_id <= 0:
            raise ConfigError(f"brokerRole=SLAVE needs brokerId > 0 (got {broker.broker_id}); "
                              "brokerId 0 is the master of the group")
    else:
        broker.broker_id = 0
    return broker, store
