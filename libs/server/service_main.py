"""What every service's ``python -m rocketmesh.<service>`` entry shares.

``--set KEY=VALUE`` flags, loading the config (file, then environment, then
flags), the ready line the supervisor and tests wait for
(``<name> listening on <host:port>``), and running until SIGTERM or SIGINT, or
until the process that started it is gone (when it says who it is, in
``ROCKETMESH_SUPERVISOR_PID``: ``rocketmesh up`` does).
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from rocketmesh.runtime.config import ConfigError, load_config
from rocketmesh.runtime.help import HelpFormatter
from rocketmesh.runtime.python_process import ADDRESS_FILE_ENV, SUPERVISOR_PID_ENV
from rocketmesh.server.log import configure_service
from rocketmesh.server.trace_export import TelemetryConfigError, configure_tracing

T = TypeVar("T")


def add_set_flag(ap: argparse.ArgumentParser, what: str = "any other config key") -> None:
    """The repeatable ``--set KEY=VALUE`` flag."""
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help=f"{what}, RocketMQ's camelCase names (repeatable)")


def overrides_from(flags: Mapping[str, Any], set_items: Iterable[str]) -> dict[str, Any]:
    """Named flags (None: not given) plus ``--set`` items; ConfigError for an item without ``=``."""
    out = {k: v for k, v in flags.items() if v is not None}
    for item in set_items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def load_service_config(name: str, cls: type[T], path: str | None, flags: Mapping[str, Any],
                        set_items: Iterable[str]) -> T | None:
    """The service's config, or None after printing why not (the caller exits 2)."""
    try:
        return load_config(cls, path, overrides_from(flags, set_items))
    except (ConfigError, OSError) as exc:
        print(f"{name} config error: {exc}", file=sys.stderr)
        return None


def run_until_signalled(label: str, start: Callable[[], str], stop: Callable[[], None], service: str,
                        **names: Any) -> int:
    """``start()`` (returns the address it serves), print the ready line, wait for SIGTERM/SIGINT, ``stop()``.

    A start that raises is reported on stderr, stopped, and exits 1. The process logs as a service
    does from here on (JSON lines on stderr), and traces as the ``OTEL_*`` environment says, as
    ``rocketmesh-<service>`` unless that names it otherwise. Every log event carries ``service`` and
    ``names`` (a broker's ``broker`` and ``cluster``).
    """
    configure_service(service=service, **names)
    try:
        provider = configure_tracing(service)
    except TelemetryConfigError as exc:
        print(f"{label} failed to start: {exc}", file=sys.stderr)
        return 2
    try:
        return _serve(label, start, stop)
    finally:
        if provider is not None:
            provider.shutdown()  # sends the spans still queued


def _serve(label: str, start: Callable[[], str], stop: Callable[[], None]) -> int:
    supervisor = _supervisor_pid()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    try:
        address = start()
    except Exception as exc:  # noqa: BLE001 - report and exit non-zero rather than hang
        print(f"{label} failed to start: {exc}", file=sys.stderr)
        stop()
        return 1
    print(f"{label} listening on {address}", flush=True)
    address_file = _write_address_file(address)
    # What start-up built (modules, config, tables) lives as long as the process: moved out of the
    # collector's sight, it is not walked again by every full collection, which stalls all threads.
    gc.freeze()
    while not stopping.wait(0.5):
        if supervisor and os.getppid() != supervisor:
            # Killed outright (SIGKILL, the OOM killer), ``rocketmesh up`` could not stop its services; each
            # stops itself rather than live on unsupervised, holding its port and its store.
            print(f"{label}: the process that started it (pid {supervisor}) is gone; stopping", file=sys.stderr,
                  flush=True)
            break
    stop()
    if address_file:
        try:
            os.remove(address_file)
        except OSError:
            pass
    return 0


def _supervisor_pid() -> int:
    """The pid in :data:`SUPERVISOR_PID_ENV`, 0 when unset. One that is not this process's parent (not a pid,
    or a variable inherited from elsewhere) is reported and ignored."""
    raw = os.environ.get(SUPERVISOR_PID_ENV, "").strip()
    if not raw:
        return 0
    try:
        pid = int(raw)
    except ValueError:
        pid = 0
    if pid < 1 or pid != os.getppid():
        print(f"{SUPERVISOR_PID_ENV}={raw!r} is not the pid of this process's parent ({os.getppid()}); ignored",
              file=sys.stderr, flush=True)
        return 0
    return pid


def _write_address_file(address: str) -> str:
    path = os.environ.get(ADDRESS_FILE_ENV, "")
    if path:
        try:
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                f.write(address + "\n")
            os.replace(tmp, path)
        except OSError as exc:
            print(f"cannot write {ADDRESS_FILE_ENV} {path}: {exc}", file=sys.stderr)
            return ""
    return path


def run_system_service(name: str, description: str, config_cls: type, service_cls: type,
                       argv: list[str] | None = None) -> int:
    """``python -m rocketmesh.<name>`` for a system-group service (scheduler, txn-checker): ``-c``,
    ``-n``, ``--listen-port`` and ``--set`` flags; the service has ``start()``, ``shutdown()``,
    ``address`` and ``instance_name``."""
    defaults = config_cls()
    ap = argparse.ArgumentParser(
        prog=f"rocketmesh {name}", formatter_class=HelpFormatter,
        description=f"{description} Config comes from the file, then environment variables (the RocketMQ key, "
                    f"or ROCKETMESH_<KEY>), "
                    f"then flags; the status port listens on listenAddress (default {defaults.listen_address}).")
    ap.add_argument("-c", "--config", help=f"a properties file of {name} settings")
    ap.add_argument("-n", "--namesrv", help="name server list host:port;host:port (default: NAMESRV_ADDR)")
    ap.add_argument("--listen-port", type=int,
                    help=f"status port (default {defaults.listen_port}; 0 picks a free one)")
    add_set_flag(ap, f"any {name} setting")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    config = load_service_config(name, config_cls, args.config,
                                 {"namesrvAddr": args.namesrv, "listenPort": args.listen_port}, args.set)
    if config is None:
        return 2
    service = service_cls(config)

    def start() -> str:
        service.start()
        # A replica given a range of metrics ports says which one it took.
        url = getattr(getattr(service, "metrics", None), "url", "")
        if url:
            print(f"{name} {service.instance_name} metrics on {url}", flush=True)
        return service.address
    return run_until_signalled(f"{name} {service.instance_name}", start, service.shutdown, name)
