"""The ``rocketmesh`` console script.

    rocketmesh up [--data-dir DIR] [--namesrv-port 9876] [--broker-port 10911] [--scheduler-port 10950]
                  [--txn-checker-port 10960] [--ha [--slave-port 10921] [--ha-port 10970]] [--set KEY=VALUE ...]
                  [--namesrv-remoting-port 9866] [--broker-remoting-port 10915] [--no-remoting]
                  [--dashboard-port 8082] [--no-dashboard]
    rocketmesh namesrv ...            (runs python -m rocketmesh.namesrv ..., the same options)
    rocketmesh broker ...             (runs python -m rocketmesh.broker ...)
    rocketmesh scheduler ...          (runs python -m rocketmesh.scheduler ...)
    rocketmesh txn-checker ...        (runs python -m rocketmesh.txn_checker ...)
    rocketmesh ha ...                 (runs python -m rocketmesh.ha ...)
    rocketmesh dashboard ...          (runs python -m rocketmesh.dashboard ..., the web console)
    rocketmesh admin <command> ...    (mqadmin's commands, kebab-case)
    rocketmesh health SERVICE [ADDR]  (is it up? asked over its own protocol; exit 0 or 1)
    rocketmesh keys DIR [--force]     (the CurveZMQ keys for `up --curve-keys DIR`, compose and clients)
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

from rocketmesh.cli.mesh_spec import MeshSpec, ServiceCommand, metrics_port_in, namesrv_commands, service_commands
from rocketmesh.cli.security import acl_enabled, exposure_warning, key_paths, up_account, up_curve_env
from rocketmesh.cli.supervisor import Child, ChildSpec, ServiceStartError, Supervisor
from rocketmesh.remoting.addr import reachable_addr, reachable_host
from rocketmesh.remoting.transport.curve import SECRET_KEY_ENV, SERVER_KEY_ENV
from rocketmesh.runtime.help import HelpFormatter
from rocketmesh.runtime.python_process import python_module_argv
from rocketmesh.server.extra import missing_extra_line, missing_server_modules, require_server_extra

SERVICES = {"namesrv": "rocketmesh.namesrv", "broker": "rocketmesh.broker", "scheduler": "rocketmesh.scheduler",
            "txn-checker": "rocketmesh.txn_checker", "ha": "rocketmesh.ha", "dashboard": "rocketmesh.dashboard"}

SERVICE_HELP = {
    "namesrv": "run a name server in the foreground (the options of python -m rocketmesh.namesrv)",
    "broker": "run a broker in the foreground (the options of python -m rocketmesh.broker)",
    "scheduler": "run a scheduler replica in the foreground (the options of python -m rocketmesh.scheduler)",
    "txn-checker": "run a txn-checker replica in the foreground (the options of python -m rocketmesh.txn_checker)",
    "ha": "replicate a slave broker from its master in the foreground (the options of python -m rocketmesh.ha)",
    "dashboard": "run the operators' web console in the foreground (the options of python -m rocketmesh.dashboard)",
}


def _exec_service(module: str, argv: list[str]) -> int:
    """Replace this process with the service, so signals and exit codes are the service's own."""
    command = python_module_argv(module, *argv)
    os.execv(command[0], command)
    return 1  # not reached


def cmd_up(args: argparse.Namespace) -> int:
    """``rocketmesh up``: start the services in order, print where they are, supervise until signalled."""
    require_server_extra("rocketmesh up")
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
    try:
        env.update(up_curve_env(args.curve_keys))
    except ValueError as exc:
        print(f"rocketmesh up: --curve-keys: {exc} (rocketmesh keys DIR makes them)", file=sys.stderr)
        return 2
    curve = bool(args.curve_keys) or bool(os.environ.get(SECRET_KEY_ENV))
    try:
        account = up_account(args.set, args.broker_config)
    except ValueError as exc:
        print(f"rocketmesh up: {exc}", file=sys.stderr)
        return 2

    try:
        metrics_port = None if args.no_metrics else metrics_port_in(args.set, args.metrics_port)
    except ValueError as exc:
        print(f"rocketmesh up: {exc}", file=sys.stderr)
        return 2
    dashboard_port = None if args.no_dashboard else args.dashboard_port
    missing = missing_server_modules("dashboard") if dashboard_port is not None else []
    if missing:
        # The mesh runs without it: `pip install '.[server]' && rocketmesh up` is the README's first command.
        print(missing_extra_line("rocketmesh up: no dashboard: it", "dashboard", missing)
              + " (--no-dashboard: none wanted)", file=sys.stderr, flush=True)
        dashboard_port = None
    spec = MeshSpec(data_dir=data, host=host, namesrv_ports=(args.namesrv_port,), broker_port=args.broker_port,
                    scheduler_port=args.scheduler_port, txn_checker_port=args.txn_checker_port, ha=args.ha,
                    slave_port=args.slave_port, ha_port=args.ha_port,
                    namesrv_remoting_port=None if args.no_remoting else args.namesrv_remoting_port,
                    broker_remoting_port=None if args.no_remoting else args.broker_remoting_port,
                    slave_remoting_port=None if args.no_remoting else args.slave_remoting_port,
                    metrics_port=metrics_port,
                    broker_config=os.path.abspath(args.broker_config) if args.broker_config else None,
                    sets=tuple(args.set), account=account, dashboard_port=dashboard_port,
                    acl_enable=acl_enabled(args.set, args.broker_config))

    ports = {"namesrv": args.namesrv_port, "broker": args.broker_port, "scheduler": args.scheduler_port,
             "txn-checker": args.txn_checker_port,
             **({"slave": args.slave_port, "ha": args.ha_port} if args.ha else {}),
             **({} if args.no_remoting else {"namesrv (RocketMQ clients)": args.namesrv_remoting_port,
                                              "broker (RocketMQ clients)": args.broker_remoting_port}),
             **({} if dashboard_port is None else {"dashboard": dashboard_port})}
    warning = exposure_warning(host, ports, args.set, args.broker_config, curve)
    if warning:
        print(warning, file=sys.stderr, flush=True)

    def stop(*_: object) -> None:
        sup._stopping.set()

    def start(cmd: ServiceCommand) -> Child:
        return sup.start(ChildSpec(cmd.name, SERVICES[cmd.kind], list(cmd.argv),
                                   os.path.join(logs, f"{cmd.name}.log"), {**env, **cmd.env}))

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # nohup keeps the mesh when the terminal goes
        signal.signal(signal.SIGHUP, stop)  # its terminal closed: stop the mesh as Ctrl-C does
    try:
        ns = start(namesrv_commands(spec)[0])
        namesrv = reachable_addr(ns.address)
        started = {cmd.name: start(cmd) for cmd in service_commands(spec, namesrv)}
    except ServiceStartError as exc:
        print(f"rocketmesh up: {exc}", file=sys.stderr)
        sup.stop()
        return 1
    br, sched, checker = started["broker-a"], started["scheduler"], started["txn-checker"]
    slave, ha, dashboard = started.get("broker-a-s"), started.get("ha"), started.get("dashboard")
    shown = reachable_host(host)

    def door(port: int | None) -> str:
        return f"  (RocketMQ clients: {shown}:{port})" if port is not None else ""
    print(f"rocketmesh mesh is up (data in {data}, logs in {logs})")
    print(f"  namesrv   {namesrv}" + door(spec.namesrv_remoting_port))
    print(f"  broker-a  {br.address}" + ("  (master)" if slave is not None else "") + door(spec.broker_remoting_port))
    if slave is not None and ha is not None:
        print(f"  broker-a  {slave.address}  (slave, replicated by the ha service on {ha.address})"
              + door(spec.slave_remoting_port))
    print(f"  scheduler {sched.address}")
    print(f"  txn-checker {checker.address}")
    if dashboard is not None:  # its ready line names a URL: http://host:port
        print(f"  dashboard http://{reachable_addr(dashboard.address.removeprefix('http://'))}")
    if not args.no_metrics:
        print("Prometheus metrics (rocketmesh admin stats shows the broker's without it):")
        for name in [n for n in ("namesrv", *started) if n != "dashboard"]:
            port = spec.metrics_port_of(name)  # a range for a replica on a free port: it takes the first free
            low, _, high = port.partition("-")
            print(f"  {name:<11} http://{shown}:{low}/metrics" + (f"  (or up to {high} when taken)" if high else ""))
    print(f"Point clients at it:  export NAMESRV_ADDR={namesrv}")
    if spec.namesrv_remoting_port is not None:
        print(f"  RocketMQ's own clients (Java, C++, Go, Node):  NAMESRV_ADDR={shown}:{spec.namesrv_remoting_port}")
    if args.curve_keys:
        server_key = key_paths(os.path.abspath(args.curve_keys))["server_public"]
        print(f"  and, CurveZMQ being on:  export {SERVER_KEY_ENV}={server_key}")
    print("Stop with Ctrl-C.", flush=True)
    sup.watch()
    print("stopping the mesh ...", flush=True)
    sup.stop()
    print("stopped.", flush=True)
    return 0


UP_DESCRIPTION = """\
Run a local mesh until Ctrl-C: a name server, broker broker-a, the scheduler (delayed and timer
messages), the txn-checker (undecided transactions) and the dashboard (the web console, with the
dashboard extra), each its own process, restarted when it crashes. With --ha, broker-a gets a slave
(its own store under the data dir) and the ha service that replicates it; --set keys reach master
and slave alike, but brokerRole and brokerId. With aclEnable on, the dashboard asks operators to
sign in. It prints "mesh is up" once every service serves and the broker's topics are routable.

examples:
  rocketmesh up
  rocketmesh up --data-dir /var/lib/rocketmesh --set flushDiskType=SYNC_FLUSH
  rocketmesh up --ha --set brokerRole=SYNC_MASTER
  rocketmesh keys ./mesh-keys && rocketmesh up --curve-keys ./mesh-keys
"""


def build_parser() -> argparse.ArgumentParser:
    """The whole ``rocketmesh`` command line (services are only named here: see :func:`main`)."""
    ap = argparse.ArgumentParser(
        prog="rocketmesh", formatter_class=HelpFormatter,
        description="RocketMQ 4.x semantics as a mesh of ZeroMQ services: run the mesh, its services, "
                    "mqadmin's commands and the quickstart producer and consumer.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="run a local mesh (namesrv, broker, scheduler, txn-checker, dashboard) until Ctrl-C",
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
    up.add_argument("--namesrv-remoting-port", type=int, default=9866,
                    help="the name server's TCP door for RocketMQ's own clients (their NAMESRV_ADDR)")
    up.add_argument("--broker-remoting-port", type=int, default=10915,
                    help="the broker's TCP door for RocketMQ's own clients (the routes name it)")
    up.add_argument("--slave-remoting-port", type=int, default=10925, help="the slave's TCP door, with --ha")
    up.add_argument("--no-remoting", action="store_true",
                    help="open no TCP doors: only rocketmesh's SDK (ZeroMQ) can connect")
    up.add_argument("--metrics-port", type=int, default=5557,
                    help="the broker's Prometheus port (metricsPromExporterPort); the name server serves on the "
                         "port below it, the scheduler, txn-checker, ha and slave on the ports above")
    up.add_argument("--no-metrics", action="store_true", help="serve no Prometheus endpoints")
    up.add_argument("--dashboard-port", type=int, default=8082,
                    help="the dashboard's HTTP port (the web console, on --host like the other services)")
    up.add_argument("--no-dashboard", action="store_true", help="run no dashboard")
    up.add_argument("--broker-config", help="a broker.conf for the broker (RocketMQ key=value properties)")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker or store config key, RocketMQ's names (repeatable)")
    up.add_argument("--curve-keys", metavar="DIR",
                    help="encrypt and authenticate every connection with the CurveZMQ keys `rocketmesh keys DIR` "
                         f"made (each service gets {SECRET_KEY_ENV}=DIR/server.key_secret)")
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
    from rocketmesh.cli.security import add_keys_command

    add_health_command(sub)
    add_keys_command(sub)
    add_admin_commands(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run ``rocketmesh`` with ``argv`` (default: the process's arguments); returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SERVICES:
        return _exec_service(SERVICES[argv[0]], argv[1:])
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
