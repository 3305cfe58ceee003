"""The ``rocketmesh`` console script.

    rocketmesh up [--data-dir DIR] [--namesrv-port 9876] [--broker-port 10911] [--scheduler-port 10950]
                  [--txn-checker-port 10960]
    rocketmesh namesrv ...            (runs python -m rocketmesh.namesrv ...)
    rocketmesh broker ...             (runs python -m rocketmesh.broker ...)
    rocketmesh scheduler ...          (runs python -m rocketmesh.scheduler ...)
    rocketmesh txn-checker ...        (runs python -m rocketmesh.txn_checker ...)
    rocketmesh admin <command> ...    (mqadmin's commands, kebab-case)
    rocketmesh produce -t TOPIC ...   (the quickstart producer)
    rocketmesh consume -t TOPIC ...   (the quickstart consumer)

Services always run as their own processes: this module starts them, it never
imports them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Optional

from rocketmesh.supervisor import ChildSpec, ServiceStartError, Supervisor

SERVICES = {"namesrv": "rocketmesh.namesrv", "broker": "rocketmesh.broker", "scheduler": "rocketmesh.scheduler",
            "txn-checker": "rocketmesh.txn_checker"}


def _exec_service(module: str, argv: list[str]) -> int:
    """Replace this process with the service, so signals and exit codes are the service's own."""
    os.execv(sys.executable, [sys.executable, "-m", module, *argv])
    return 1  # not reached


def cmd_up(args: argparse.Namespace) -> int:
    data = os.path.abspath(args.data_dir)
    os.makedirs(data, exist_ok=True)
    logs = os.path.join(data, "logs")
    host = args.host
    sup = Supervisor(max_restarts=args.max_restarts)
    env = {"ROCKETMESH_LOG_LEVEL": os.environ.get("ROCKETMESH_LOG_LEVEL", "INFO")}

    def stop(*_: object) -> None:
        sup._stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        ns = sup.start(ChildSpec("namesrv", SERVICES["namesrv"],
                                 ["-p", str(args.namesrv_port), "--listen-address", host,
                                  "--kv-config-path", os.path.join(data, "namesrv", "kvConfig.json")],
                                 os.path.join(logs, "namesrv.log"), env))
        namesrv = f"127.0.0.1:{ns.address.rsplit(':', 1)[1]}" if host in ("0.0.0.0", "*") else ns.address
        broker_args = ["-n", namesrv, "--listen-port", str(args.broker_port),
                       "--store-dir", os.path.join(data, "broker-a", "store"), "--broker-name", "broker-a",
                       "--set", f"listenAddress={host}"]
        if args.broker_config:
            broker_args += ["-c", os.path.abspath(args.broker_config)]
        for item in args.set:
            broker_args += ["--set", item]
        br = sup.start(ChildSpec("broker-a", SERVICES["broker"], broker_args,
                                 os.path.join(logs, "broker-a.log"), env))
        sched = sup.start(ChildSpec("scheduler", SERVICES["scheduler"],
                                    ["-n", namesrv, "--listen-port", str(args.scheduler_port),
                                     "--set", f"listenAddress={host}", "--set", "instanceName=scheduler"],
                                    os.path.join(logs, "scheduler.log"), env))
        checker = sup.start(ChildSpec("txn-checker", SERVICES["txn-checker"],
                                      ["-n", namesrv, "--listen-port", str(args.txn_checker_port),
                                       "--set", f"listenAddress={host}", "--set", "instanceName=txn-checker"],
                                      os.path.join(logs, "txn-checker.log"), env))
    except ServiceStartError as exc:
        print(f"rocketmesh up: {exc}", file=sys.stderr)
        sup.stop()
        return 1
    print(f"rocketmesh mesh is up (data in {data}, logs in {logs})")
    print(f"  namesrv   {namesrv}")
    print(f"  broker-a  {br.address}")
    print(f"  scheduler {sched.address}")
    print(f"  txn-checker {checker.address}")
    print(f"Point clients at it:  export NAMESRV_ADDR={namesrv}")
    print("Stop with Ctrl-C.", flush=True)
    sup.watch()
    print("stopping the mesh ...", flush=True)
    sup.stop()
    print("stopped.", flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rocketmesh", description="RocketMQ semantics as a mesh of ZeroMQ services.")
    sub = ap.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run a local mesh (namesrv, broker, scheduler, txn-checker) until Ctrl-C")
    up.add_argument("--data-dir", default=os.environ.get("ROCKETMESH_DATA_DIR", "rocketmesh-data"),
                    help="where stores, configs and logs go (default ./rocketmesh-data)")
    up.add_argument("--host", default="127.0.0.1", help="address services listen on (default 127.0.0.1)")
    up.add_argument("--namesrv-port", type=int, default=9876)
    up.add_argument("--broker-port", type=int, default=10911)
    up.add_argument("--scheduler-port", type=int, default=10950, help="the scheduler's status port")
    up.add_argument("--txn-checker-port", type=int, default=10960, help="the txn-checker's status port")
    up.add_argument("--broker-config", help="a broker.conf for the broker")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker/store config key")
    up.add_argument("--max-restarts", type=int, default=5, help="restarts of a crashed service before giving up")
    up.set_defaults(func=cmd_up)

    for name in SERVICES:
        p = sub.add_parser(name, help=f"run a {name} in the foreground (python -m {SERVICES[name]} --help)",
                           add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=lambda a, m=SERVICES[name]: _exec_service(m, a.rest))

    from rocketmesh.cli_admin import add_admin_commands

    add_admin_commands(sub)
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
