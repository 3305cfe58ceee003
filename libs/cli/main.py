"""The ``rocketmesh`` console script.

    rocketmesh up [--data-dir DIR] [--namesrv-port 9876] [--broker-port 10911] [--scheduler-port 10950]
                  [--txn-checker-port 10960] [--ha [--slave-port 10921] [--ha-port 10970]] [--set KEY=VALUE ...]
    rocketmesh namesrv ...            (runs python -m rocketmesh.namesrv ..., the same options)
    rocketmesh broker ...             (runs python -m rocketmesh.broker ...)
    rocketmesh scheduler ...          (runs python -m rocketmesh.scheduler ...)
    rocketmesh txn-checker ...        (runs python -m rocketmesh.txn_checker ...)
    rocketmesh ha ...                 (runs python -m rocketmesh.ha ...)
    rocketmesh admin <command> ...    (mqadmin's commands, kebab-case)
    rocketmesh health SERVICE [ADDR]  (is it up? asked over its own protocol; exit 0 or 1)
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

from rocketmesh.cli.help import HelpFormatter
from rocketmesh.runtime.python_process import python_module_argv
from rocketmesh.cli.supervisor import ChildSpec, ServiceStartError, Supervisor

SERVICES = {"namesrv": "rocketmesh.namesrv", "broker": "rocketmesh.broker", "scheduler": "rocketmesh.scheduler",
            "txn-checker": "rocketmesh.txn_checker", "ha": "rocketmesh.ha"}

SERVICE_HELP = {
    "namesrv": "run a name server in the foreground (the options of python -m rocketmesh.namesrv)",
    "broker": "run a broker in the foreground (the options of python -m rocketmesh.broker)",
    "scheduler": "run a scheduler replica in the foreground (the options of python -m rocketmesh.scheduler)",
    "txn-checker": "run a txn-checker replica in the foreground (the options of python -m rocketmesh.txn_checker)",
    "ha": "replicate a slave broker from its master in the foreground (the options of python -m rocketmesh.ha)",
}
#: Keys that make a broker what it is in its group: ``up --ha`` gives the slave its own.
_ROLE_KEYS = ("brokerrole", "brokerid")
#: Where each service's Prometheus port is, from the broker's (--metrics-port): RocketMQ's 5557 for it.
_METRICS_PORT_OFFSETS = {"namesrv": -1, "broker-a": 0, "scheduler": 1, "txn-checker": 2, "ha": 3, "broker-a-s": 4}


def _exec_service(module: str, argv: list[str]) -> int:
    """Replace this process with the service, so signals and exit codes are the service's own."""
    command = python_module_argv(module, *argv)
    os.execv(command[0], command)
    return 1  # not reached


def cmd_up(args: argparse.Namespace) -> int:
    """``rocketmesh up``: start the services in order, print where they are, supervise until signalled."""
    try:
        sup = Supervisor(max_restarts=args.max_restarts, restart_window_s=args.restart_window)
    except ValueError as exc:
        print(f"rocketmesh up: {exc} (--max-restarts, --restart-window)", file=sys.stderr)
        return 2
    data = os.path.abspath(args.data_dir)
    os.makedirs(data, exist_ok=True)
    logs = os.path.join(data, "logs")
    host = args.host
    env = {"ROCKETMESH_LOG_LEVEL": os.environ.get("ROCKETMESH_LOG_LEVEL", "INFO")}

    # Each service serves its own /metrics (metricsExporterType=PROM), the broker on --metrics-port.
    metrics_ports = {name: args.metrics_port + offset for name, offset in _METRICS_PORT_OFFSETS.items()}

    def metrics(name: str) -> list[str]:
        if args.no_metrics:
            return []
        return ["--set", "metricsExporterType=PROM", "--set", f"metricsPromExporterPort={metrics_ports[name]}"]

    def stop(*_: object) -> None:
        sup._stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        ns = sup.start(ChildSpec("namesrv", SERVICES["namesrv"],
                                 ["-p", str(args.namesrv_port), "--listen-address", host,
                                  "--kv-config-path", os.path.join(data, "namesrv", "kvConfig.json"),
                                  *metrics("namesrv")],
                                 os.path.join(logs, "namesrv.log"), env))
        namesrv = f"127.0.0.1:{ns.address.rsplit(':', 1)[1]}" if host in ("0.0.0.0", "*") else ns.address
        broker_args = ["-n", namesrv, "--listen-port", str(args.broker_port),
                       "--store-dir", os.path.join(data, "broker-a", "store"), "--broker-name", "broker-a",
                       "--set", f"listenAddress={host}", *metrics("broker-a")]
        if args.broker_config:
            broker_args += ["-c", os.path.abspath(args.broker_config)]
        for item in args.set:
            broker_args += ["--set", item]
        br = sup.start(ChildSpec("broker-a", SERVICES["broker"], broker_args,
                                 os.path.join(logs, "broker-a.log"), env))
        slave = ha = None
        if args.ha:
            slave_args = ["-n", namesrv, "--listen-port", str(args.slave_port),
                          "--store-dir", os.path.join(data, "broker-a-s", "store"), "--broker-name", "broker-a",
                          "--set", f"listenAddress={host}", "--set", "brokerId=1", "--set", "brokerRole=SLAVE",
                          *metrics("broker-a-s")]
            if args.broker_config:
                slave_args += ["-c", os.path.abspath(args.broker_config)]
            for item in args.set:
                if item.partition("=")[0].strip().lower() not in _ROLE_KEYS:
                    slave_args += ["--set", item]
            slave = sup.start(ChildSpec("broker-a-s", SERVICES["broker"], slave_args,
                                        os.path.join(logs, "broker-a-s.log"), env))
            ha = sup.start(ChildSpec("ha", SERVICES["ha"],
                                     ["-n", namesrv, "--listen-port", str(args.ha_port),
                                      "--set", f"listenAddress={host}", "--set", "instanceName=ha",
                                      "--set", "brokerName=broker-a", *metrics("ha")],
                                     os.path.join(logs, "ha.log"), env))
        sched = sup.start(ChildSpec("scheduler", SERVICES["scheduler"],
                                    ["-n", namesrv, "--listen-port", str(args.scheduler_port),
                                     "--set", f"listenAddress={host}", "--set", "instanceName=scheduler",
                                     *metrics("scheduler")],
                                    os.path.join(logs, "scheduler.log"), env))
        checker = sup.start(ChildSpec("txn-checker", SERVICES["txn-checker"],
                                      ["-n", namesrv, "--listen-port", str(args.txn_checker_port),
                                       "--set", f"listenAddress={host}", "--set", "instanceName=txn-checker",
                                       *metrics("txn-checker")],
                                      os.path.join(logs, "txn-checker.log"), env))
    except ServiceStartError as exc:
        print(f"rocketmesh up: {exc}", file=sys.stderr)
        sup.stop()
        return 1
    print(f"rocketmesh mesh is up (data in {data}, logs in {logs})")
    print(f"  namesrv   {namesrv}")
    print(f"  broker-a  {br.address}" + ("  (master)" if slave is not None else ""))
    if slave is not None and ha is not None:
        print(f"  broker-a  {slave.address}  (slave, replicated by the ha service on {ha.address})")
    print(f"  scheduler {sched.address}")
    print(f"  txn-checker {checker.address}")
    if not args.no_metrics:
        shown = "127.0.0.1" if host in ("0.0.0.0", "*") else host
        started = ["namesrv", "broker-a", *(["broker-a-s", "ha"] if args.ha else []), "scheduler", "txn-checker"]
        print("Prometheus metrics (rocketmesh admin stats shows the broker's without it):")
        for name in started:
            print(f"  {name:<11} http://{shown}:{metrics_ports[name]}/metrics")
    print(f"Point clients at it:  export NAMESRV_ADDR={namesrv}")
    print("Stop with Ctrl-C.", flush=True)
    sup.watch()
    print("stopping the mesh ...", flush=True)
    sup.stop()
    print("stopped.", flush=True)
    return 0


UP_DESCRIPTION = """\
Run a local mesh until Ctrl-C: a name server, broker broker-a, the scheduler (delayed and timer
messages) and the txn-checker (undecided transactions), each its own process, restarted when it
crashes. With --ha, broker-a gets a slave (its own store under the data dir) and the ha service
that replicates it; --set keys reach master and slave alike, but brokerRole and brokerId. It prints "mesh is up" once every service serves and the broker's topics are routable.

examples:
  rocketmesh up
  rocketmesh up --data-dir /var/lib/rocketmesh --set flushDiskType=SYNC_FLUSH
  rocketmesh up --ha --set brokerRole=SYNC_MASTER
"""


def build_parser() -> argparse.ArgumentParser:
    """The whole ``rocketmesh`` command line (services are only named here: see :func:`main`)."""
    ap = argparse.ArgumentParser(
        prog="rocketmesh", formatter_class=HelpFormatter,
        description="RocketMQ 4.x semantics as a mesh of ZeroMQ services: run the mesh, its services, "
                    "mqadmin's commands and the quickstart producer and consumer.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="run a local mesh (namesrv, broker, scheduler, txn-checker) until Ctrl-C",
                        description=UP_DESCRIPTION, formatter_class=HelpFormatter)
    up.add_argument("--data-dir", default=os.environ.get("ROCKETMESH_DATA_DIR", "rocketmesh-data"),
                    help="where stores, configs and logs go, under the working directory unless absolute "
                         "(ROCKETMESH_DATA_DIR sets it too)")
    up.add_argument("--host", default="127.0.0.1", help="address the services listen on")
    up.add_argument("--namesrv-port", type=int, default=9876, help="the name server's port")
    up.add_argument("--broker-port", type=int, default=10911, help="the broker's port")
    up.add_argument("--scheduler-port", type=int, default=10950, help="the scheduler's status port")
    up.add_argument("--txn-checker-port", type=int, default=10960, help="the txn-checker's status port")
    up.add_argument("--ha", action="store_true",
                    help="also run a slave of broker-a and the ha service that replicates it "
                         "(--set brokerRole=SYNC_MASTER makes the master wait for the slave)")
    up.add_argument("--slave-port", type=int, default=10921, help="the slave's port, with --ha")
    up.add_argument("--ha-port", type=int, default=10970, help="the ha service's status port, with --ha")
    up.add_argument("--metrics-port", type=int, default=5557,
                    help="the broker's Prometheus port (metricsPromExporterPort); the name server serves on the "
                         "port below it, the scheduler, txn-checker, ha and slave on the ports above")
    up.add_argument("--no-metrics", action="store_true", help="serve no Prometheus endpoints")
    up.add_argument("--broker-config", help="a broker.conf for the broker (RocketMQ key=value properties)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker or store config key, RocketMQ's names (repeatable)")
    up.add_argument("--max-restarts", type=int, default=5,
                    help="crashes of one service within --restart-window after which the mesh stops")
    up.add_argument("--restart-window", type=float, default=300.0, metavar="SECONDS",
                    help="crashes longer ago than this are forgiven")
    up.set_defaults(func=cmd_up)

    # Listed for --help only: main() hands these to the service before argparse sees its options.
    for name, text in SERVICE_HELP.items():
        sub.add_parser(name, help=text, add_help=False)

    from rocketmesh.cli.admin import add_admin_commands
    from rocketmesh.cli.health import add_health_command

    add_health_command(sub)
    add_admin_commands(sub)
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    """Run ``rocketmesh`` with ``argv`` (default: the process's arguments); returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SERVICES:
        return _exec_service(SERVICES[argv[0]], argv[1:])
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
