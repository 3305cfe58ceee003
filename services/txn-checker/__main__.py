"""``python -m rocketmesh.txn_checker``: run one txn-checker replica.

    python -m rocketmesh.txn_checker [-c txn-checker.conf] [-n "host:port;host:port"]
        [--listen-port P] [--set key=value ...]

Config comes from the file, then ROCKETMESH_* environment variables, then the
flags (``--set transactionCheckInterval=5000``). Prints ``txn-checker
<instance> listening on <host:port>`` once it runs, and shuts down cleanly
(committing its progress) on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import sys

from rocketmesh.service_main import add_set_flag, load_service_config, run_until_signalled
from rocketmesh.txn_checker.config import TxnCheckerConfig
from rocketmesh.txn_checker.service import TxnCheckerService


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m rocketmesh.txn_checker",
                                 description="Check transactional half messages nobody decided.")
    ap.add_argument("-c", "--config", help="a properties file of txn-checker settings")
    ap.add_argument("-n", "--namesrv", help="name server list host:port;host:port (default: NAMESRV_ADDR)")
    ap.add_argument("--listen-port", type=int, help="status port (default 10960; 0 picks a free one)")
    add_set_flag(ap, "any txn-checker setting")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    config = load_service_config("txn-checker", TxnCheckerConfig, args.config,
                                 {"namesrvAddr": args.namesrv, "listenPort": args.listen_port}, args.set)
    if config is None:
        return 2
    service = TxnCheckerService(config)

    def start() -> str:
        service.start()
        return service.address
    return run_until_signalled(f"txn-checker {service.instance_name}", start, service.shutdown)


if __name__ == "__main__":
    sys.exit(main())
