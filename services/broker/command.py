"""The broker's command line (``python -m rocketmesh.broker``, ``rocketmesh broker``): its flags and ``main``."""

from __future__ import annotations

import argparse
import sys

from rocketmesh.broker.config import BrokerConfig, load_broker_config
from rocketmesh.broker.controller import BrokerController
from rocketmesh.broker.store.config import MessageStoreConfig
from rocketmesh.runtime.config import ConfigError
from rocketmesh.runtime.help import HelpFormatter
from rocketmesh.server.service_main import add_set_flag, overrides_from, run_until_signalled


def parse_args(argv: list[str]) -> argparse.Namespace:
    b, st = BrokerConfig(), MessageStoreConfig()
    ap = argparse.ArgumentParser(
        prog="rocketmesh broker", formatter_class=HelpFormatter,
        description="Run a broker: the commitlog store, sends, pulls, offsets and transactions. Config comes "
                    "from broker.conf, then environment variables (the RocketMQ key, or ROCKETMESH_<KEY>), then "
                    "flags; it listens on "
                    f"listenAddress (default {b.listen_address}; --set listenAddress=0.0.0.0 for all interfaces).")
    ap.add_argument("-c", "--config", help="broker.conf (RocketMQ key=value properties)")
    ap.add_argument("-n", "--namesrv", help="name server list host:port;host:port (default: NAMESRV_ADDR)")
    ap.add_argument("--listen-port", type=int, help=f"listenPort (default {b.listen_port})")
    ap.add_argument("--remoting-listen-port", type=int, metavar="PORT",
                    help="remotingListenPort: open a TCP door for RocketMQ's own clients (Java, C++, Go, Node) "
                         "on this port (default: none; `rocketmesh up` opens 10915)")
    ap.add_argument("--store-dir", help=f"storePathRootDir (default {st.store_path_root_dir})")
    ap.add_argument("--broker-name", help=f"brokerName (default {b.broker_name})")
    ap.add_argument("--cluster", help=f"brokerClusterName (default {b.broker_cluster_name})")
    add_set_flag(ap, "any broker or store config key")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    flags: dict[str, object] = {
        "namesrvAddr": args.namesrv, "listenPort": args.listen_port,
        "remotingListenPort": args.remoting_listen_port, "storePathRootDir": args.store_dir,
        "brokerName": args.broker_name, "brokerClusterName": args.cluster,
    }
    try:
        config, store_config = load_broker_config(args.config, overrides_from(flags, args.set))
    except (ConfigError, OSError) as exc:
        print(f"broker config error: {exc}", file=sys.stderr)
        return 2
    broker = BrokerController(config, store_config)

    def start() -> str:
        broker.start()
        if broker.door is not None:
            print(f"broker {config.broker_name} remoting door (RocketMQ clients) on {broker.remoting_addr}",
                  flush=True)
        return broker.broker_addr
    return run_until_signalled(f"broker {config.broker_name}", start, broker.shutdown, "broker",
                               broker=config.broker_name, cluster=config.broker_cluster_name)

