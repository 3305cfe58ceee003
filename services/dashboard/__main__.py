"""``python -m rocketmesh.dashboard``: the operators' web console.

    python -m rocketmesh.dashboard [-c dashboard.conf] [-n "host:port;host:port"]
        [--listen-address 127.0.0.1] [--listen-port 8082] [--set key=value ...]

Config comes from the file, then ROCKETMESH_* environment variables, then the flags. Prints
``dashboard listening on http://host:port`` once it serves, and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import sys

from rocketmesh.server.extra import require_server_extra


def main(argv: list[str] | None = None) -> int:
    """Run the dashboard until signalled; the exit status."""
    require_server_extra("dashboard", "dashboard")  # one line naming the extra, before anything imports what it brings
    from rocketmesh.dashboard.config import DEFAULT_PORT, DashboardConfig
    from rocketmesh.dashboard.server import DashboardServer
    from rocketmesh.runtime.help import HelpFormatter
    from rocketmesh.server.service_main import add_set_flag, load_service_config, run_until_signalled

    ap = argparse.ArgumentParser(
        prog="rocketmesh dashboard", formatter_class=HelpFormatter,
        description="The operators' web console: the cluster, topics, consumer groups and their lag, messages "
                    "and their traces, dead letters, open transactions; each page has a JSON twin under /api. "
                    "Config comes from the file, then environment variables (the RocketMQ key, or "
                    "ROCKETMESH_<KEY>), then flags.")
    ap.add_argument("-c", "--config", help="a properties file of dashboard settings")
    ap.add_argument("-n", "--namesrv", help="name server list host:port;host:port (default: NAMESRV_ADDR)")
    ap.add_argument("--listen-address", help="the address to serve on (default 127.0.0.1: this host only)")
    ap.add_argument("--listen-port", type=int, help=f"the HTTP port (default {DEFAULT_PORT}; 0 picks a free one)")
    add_set_flag(ap, "any dashboard setting (aclEnable, collectIntervalMs, pageSize ...)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    config = load_service_config("dashboard", DashboardConfig, args.config,
                                 {"namesrvAddr": args.namesrv, "listenAddress": args.listen_address,
                                  "listenPort": args.listen_port}, args.set)
    if config is None:
        return 2
    try:
        server = DashboardServer(config)
    except ValueError as exc:
        print(f"dashboard: {exc}", file=sys.stderr)
        return 2
    return run_until_signalled("dashboard", server.start, server.stop, "dashboard")


if __name__ == "__main__":
    sys.exit(main())
