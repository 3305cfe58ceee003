"""``python -m rocketmesh.namesrv [-c file] [-p PORT] [--listen-address ADDR] ...``

Prints ``namesrv listening on HOST:PORT`` on stdout once it accepts requests,
then runs until SIGTERM or SIGINT, on which it stops gracefully.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Optional, Sequence

from rocketmesh.config import ConfigError, load_config
from rocketmesh.log import get_logger
from rocketmesh.namesrv.config import NamesrvConfig
from rocketmesh.namesrv.service import NamesrvService
from rocketmesh.remoting import RemotingError


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m rocketmesh.namesrv", description="rocketmesh name server")
    ap.add_argument("-c", "--config-file", help="properties file (RocketMQ key names, e.g. listenPort=9876)")
    ap.add_argument("-p", "--listen-port", type=int, help="TCP port (default 9876)")
    ap.add_argument("--listen-address", help="interface to bind (default 0.0.0.0)")
    ap.add_argument("--kv-config-path", help="where the KV config is kept")
    ap.add_argument("--scan-not-active-broker-interval", type=int, metavar="MS")
    ap.add_argument("--broker-channel-expired-time", type=int, metavar="MS")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any other config key (repeatable)"
    )
    return ap.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run a name server until signalled; returns the exit status."""
    args = parse_args(argv)
    overrides: dict[str, object] = {
        "listen_port": args.listen_port,
        "listen_address": args.listen_address,
        "kv_config_path": args.kv_config_path,
        "scan_not_active_broker_interval": args.scan_not_active_broker_interval,
        "broker_channel_expired_time": args.broker_channel_expired_time,
    }
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"--set wants KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        overrides[key.strip()] = value.strip()
    log = get_logger("namesrv")
    try:
        config = load_config(NamesrvConfig, args.config_file, overrides)
    except (ConfigError, OSError) as exc:
        print(f"namesrv: bad configuration: {exc}", file=sys.stderr)
        return 2

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    service = NamesrvService(config)
    try:
        service.start()
    except RemotingError as exc:
        print(f"namesrv: {exc}", file=sys.stderr)
        return 1
    log.info("namesrv started", address=service.address, kv_config_path=config.kv_config_path)
    print(f"namesrv listening on {service.address}", flush=True)
    while not stop.wait(0.5):
        pass
    log.info("namesrv stopping")
    service.stop()
    log.info("namesrv stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
