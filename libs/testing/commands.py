"""The command-line arguments of the services a test starts, and the settings a test mesh runs with.

Each function gives what follows ``python -m rocketmesh.<service>`` (the launcher runs it, as
``rocketmesh up`` does): RocketMQ's key names through ``--set``, every service bound to the loopback
interface (or to ``host``, an address of a simulated host of its own), the broker's files under its own
folder.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["FAST_CHECKER", "FAST_SCHEDULER", "TEST_STORE_CONFIG", "broker_args", "namesrv_args",
           "set_args", "system_service_args"]

#: Store sizes for tests: small files, so brokers start fast (nothing large to map) and tests cross file
#: boundaries.
TEST_STORE_CONFIG: Mapping[str, object] = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 10_000,
    "maxHashSlotNum": 10_000,
    "maxIndexNum": 40_000,
}

#: A scheduler replica that rebalances, heartbeats and refreshes its routes every second.
FAST_SCHEDULER: Mapping[str, object] = {
    "rebalanceIntervalMs": 1000, "heartbeatBrokerIntervalMs": 1000, "pollNameServerIntervalMs": 1000,
}

#: A txn-checker replica that checks a half message a second after its birth, makes a pass every half second
#: and commits its progress as often.
FAST_CHECKER: Mapping[str, object] = {
    "transactionTimeOut": 1000, "transactionCheckInterval": 500, "heartbeatBrokerIntervalMs": 1000,
    "pollNameServerIntervalMs": 1000, "persistOffsetIntervalMs": 500,
}


def set_args(config: Mapping[str, object]) -> list[str]:
    """``--set KEY=VALUE`` for each item of ``config`` (RocketMQ's camelCase key names)."""
    return [arg for key, value in config.items() for arg in ("--set", f"{key}={value}")]


def namesrv_args(port: int, kv_config_path: str, config: Mapping[str, object] | None = None,
                 host: str = "127.0.0.1") -> list[str]:
    """A name server on ``host:port`` keeping its KV config at ``kv_config_path``."""
    return ["-p", str(port), "--listen-address", host, "--kv-config-path", kv_config_path,
            *set_args(config or {})]


def broker_args(namesrv: str, port: int, store_dir: str, name: str = "broker-a", cluster: str = "DefaultCluster",
                config: Mapping[str, object] | None = None, host: str = "127.0.0.1") -> list[str]:
    """A broker on ``host:port`` (port 0: a free one, named on its ready line) registered with ``namesrv``
    (``host:port;host:port``) under that address (brokerIP1), its store in ``store_dir`` with
    :data:`TEST_STORE_CONFIG`'s small files unless ``config`` says otherwise."""
    return ["-n", namesrv, "--listen-port", str(port), "--store-dir", store_dir, "--broker-name", name,
            "--cluster", cluster, "--set", f"listenAddress={host}", "--set", f"brokerIP1={host}",
            *set_args({**TEST_STORE_CONFIG, **(config or {})})]


def system_service_args(namesrv: str, port: int, instance_name: str,
                        config: Mapping[str, object] | None = None, host: str = "127.0.0.1") -> list[str]:
    """A replica of a system-group service (scheduler, txn-checker, ha) serving the brokers ``namesrv`` knows,
    its status port on ``host:port`` (port 0: a free one)."""
    return ["-n", namesrv, "--listen-port", str(port), "--set", f"listenAddress={host}",
            "--set", f"instanceName={instance_name}", *set_args(config or {})]
