"""``python -m rocketmesh.scheduler``: run one scheduler replica.

    python -m rocketmesh.scheduler [-c scheduler.conf] [-n "host:port;host:port"]
        [--listen-port P] [--set key=value ...]

Config comes from the file, then ROCKETMESH_* environment variables, then the
flags. Prints ``scheduler <instance> listening on <host:port>`` once it runs,
and shuts down cleanly (committing its progress) on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from rocketmesh.config import ConfigError, load_config
from rocketmesh.scheduler.config import SchedulerConfig
from rocketmesh.scheduler.service import ScheduleService


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m rocketmesh.scheduler",
                                 description="Deliver delayed and timer messages when they are due.")
    ap.add_argument("-c", "--config", help="a properties file of scheduler settings")
    ap.add_argument("-n", "--namesrv", help="name server list host:port;host:port (default: NAMESRV_ADDR)")
    ap.add_argument("--listen-port", type=int, help="status port (default 10950; 0 picks a free one)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="any scheduler setting, camelCase (repeatable)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    overrides: dict[str, object] = {"namesrvAddr": args.namesrv, "listenPort": args.listen_port}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"--set expects KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        overrides[key.strip()] = value.strip()
    try:
        config = load_config(SchedulerConfig, args.config, overrides)
    except (ConfigError, OSError) as exc:
        print(f"scheduler config error: {exc}", file=sys.stderr)
        return 2
    service = ScheduleService(config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        service.start()
    except Exception as exc:  # noqa: BLE001 - report and exit non-zero rather than hang
        print(f"scheduler failed to start: {exc}", file=sys.stderr)
        service.shutdown()
        return 1
    print(f"scheduler {service.instance_name} listening on {service.address}", flush=True)
    while not stop.wait(1.0):
        pass
    service.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
