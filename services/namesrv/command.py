"""The namesrv's command line (``python -m rocketmesh.namesrv``, ``rocketmesh namesrv``): its flags and ``main``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rocketmesh.namesrv.config import NamesrvConfig
from rocketmesh.namesrv.service import NamesrvService
from rocketmesh.runtime.help import HelpFormatter
from rocketmesh.runtime.log import get_logger
from rocketmesh.server.service_main import add_set_flag, load_service_config, run_until_signalled


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    d = NamesrvConfig()
    ap = argparse.ArgumentParser(
        prog="rocketmesh namesrv", formatter_class=HelpFormatter,
        description="Run a name server: brokers register with it, clients ask it where a topic lives. "
                    "Config comes from the file, then environment variables (the RocketMQ key, or "
                    "ROCKETMESH_<KEY>), then flags.")
    ap.add_argument("-c", "--config-file", help="properties file (RocketMQ key names, e.g. listenPort=9876)")
    ap.add_argument("-p", "--listen-port", type=int, help=f"TCP port (default {d.listen_port})")
    ap.add_argument("--remoting-listen-port", type=int, metavar="PORT",
                    help="open a TCP door for RocketMQ's own clients (Java, C++, Go, Node) on this port "
                         "(default: none; `rocketmesh up` opens 9866)")
    ap.add_argument("--listen-address", help=f"interface to bind (default {d.listen_address}; 0.0.0.0 for all)")
    ap.add_argument("--kv-config-path", help=f"where the KV config is kept (default {d.kv_config_path})")
    ap.add_argument("--scan-not-active-broker-interval", type=int, metavar="MS",
                    help="how often brokers that went silent are dropped "
                         f"(default {d.scan_not_active_broker_interval})")
    ap.add_argument("--broker-channel-expired-time", type=int, metavar="MS",
                    help=f"silence after which a broker counts as gone (default {d.broker_channel_expired_time})")
    add_set_flag(ap)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a name server until signalled; returns the exit status."""
    args = parse_args(argv)
    flags = {
        "listen_port": args.listen_port,
        "listen_address": args.listen_address,
        "remoting_listen_port": args.remoting_listen_port,
        "kv_config_path": args.kv_config_path,
        "scan_not_active_broker_interval": args.scan_not_active_broker_interval,
        "broker_channel_expired_time": args.broker_channel_expired_time,
    }
    config = load_service_config("namesrv", NamesrvConfig, args.config_file, flags, args.set)
    if config is None:
        return 2
    log = get_logger("namesrv")
    service = NamesrvService(config)

    def start() -> str:
        service.start()
        log.info("namesrv_started", address=service.address, kv_config_path=config.kv_config_path)
        if service.door is not None:
            print(f"namesrv remoting door (RocketMQ clients) on {service.door.address}", flush=True)
        return service.address

    def stop() -> None:
        log.info("namesrv_stopping")
        service.stop()
        log.info("namesrv_stopped")
    return run_until_signalled("namesrv", start, stop, "namesrv")

