"""``rocketmesh health SERVICE [ADDR]``: is a service up and serving? Asked over its own protocol.

Each service is asked the request only it answers: the name server for the
cluster table (GET_BROKER_CLUSTER_INFO), a broker for its runtime info
(GET_BROKER_RUNTIME_INFO), the scheduler, txn-checker and ha service for their
status (GET_CONSUMER_RUNNING_INFO on their status port). Without ADDR, the service
is asked where it said it serves in $ROCKETMESH_ADDRESS_FILE when that file exists
(the container image sets it: replicas on free ports are found), else on 127.0.0.1
at the port `rocketmesh up` gives it. Exit status 0 and one
line on stdout when it answers; 1 and what went wrong on stderr otherwise, within
``--timeout-ms``. Meant for container health checks and scripts.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocketmesh.cli.mesh_spec import MeshSpec
from rocketmesh.client.api import ClientAPI
from rocketmesh.client.errors import MQBrokerError, MQClientError, MQError
from rocketmesh.remoting import RemotingClient, ResponseCode
from rocketmesh.remoting.addr import reachable_addr
from rocketmesh.remoting.protocol.codes import code_name
from rocketmesh.runtime.help import HelpFormatter
from rocketmesh.runtime.python_process import ADDRESS_FILE_ENV


@dataclass(frozen=True)
class HealthCheck:
    """How one kind of service is asked, where it listens by default, and what its answer says."""

    #: The request only this kind of service answers (RocketMQ's name), and how it is asked.
    request: str
    ask: Callable[[ClientAPI, str, int], dict[str, Any]]
    default_port: int
    summary: Callable[[dict], str]
    #: A field only this kind's answer has (the system services share one request code).
    marker: str = ""


def _ask_namesrv(api: ClientAPI, addr: str, timeout_ms: int) -> dict[str, Any]:
    return {"brokerAddrTable": api.get_broker_cluster_info(timeout_ms, addr).broker_addr_table}


def _ask_broker(api: ClientAPI, addr: str, timeout_ms: int) -> dict[str, Any]:
    return api.get_broker_runtime_info(addr, timeout_ms)


def _ask_system_service(api: ClientAPI, addr: str, timeout_ms: int) -> dict[str, Any]:
    return api.get_consumer_running_info(addr, timeout_ms)


def _namesrv(doc: dict) -> str:
    brokers = doc.get("brokerAddrTable") or {}
    return f"{len(brokers)} broker group(s) registered"


def _broker(doc: dict) -> str:
    table = doc.get("table") or doc
    return f"commitlog at {table.get('commitLogMaxOffset', '?')}, role {table.get('brokerRole', '?')}"


def _scheduler(doc: dict) -> str:
    return f"instance {doc.get('instanceName')}, {doc.get('pending')} pending, {doc.get('delivered')} delivered"


def _txn_checker(doc: dict) -> str:
    return f"instance {doc.get('instanceName')}, {doc.get('checked')} checked"


def _ha(doc: dict) -> str:
    return f"instance {doc.get('instanceName')}, slave {doc.get('slave') or '?'} {doc.get('lagBytes')} bytes behind"


_UP = MeshSpec(data_dir="")
_RUNNING_INFO = "GET_CONSUMER_RUNNING_INFO"
#: By service name, as ``rocketmesh <service>`` names them; default ports are ``rocketmesh up``'s.
CHECKS: dict[str, HealthCheck] = {
    "namesrv": HealthCheck("GET_BROKER_CLUSTER_INFO", _ask_namesrv, _UP.namesrv_ports[0], _namesrv),
    "broker": HealthCheck("GET_BROKER_RUNTIME_INFO", _ask_broker, _UP.broker_port, _broker),
    "scheduler": HealthCheck(_RUNNING_INFO, _ask_system_service, _UP.scheduler_port, _scheduler, "delivered"),
    "txn-checker": HealthCheck(_RUNNING_INFO, _ask_system_service, _UP.txn_checker_port, _txn_checker,
                               "transactionCheckMax"),
    "ha": HealthCheck(_RUNNING_INFO, _ask_system_service, _UP.ha_port, _ha, "lagBytes"),
}


def check(service: str, addr: str, timeout_ms: int = 3000) -> str:
    """Ask the ``service`` at ``addr``; its summary line when it answers, else RuntimeError saying why."""
    how = CHECKS[service]
    with RemotingClient(name="health") as client:
        try:
            doc = how.ask(ClientAPI(client, timeout_ms=timeout_ms), addr, timeout_ms)
        except MQBrokerError as exc:
            # A system service answers its status request whatever it carries; a broker serves that code too
            # (an admin's question to a consumer), and refuses it without a consumer group and client id.
            if exc.response_code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED or (
                    how.marker and exc.response_code == ResponseCode.SYSTEM_ERROR):
                raise RuntimeError(f"{addr} answers, but it is not a {service} (it does not serve {how.request}: "
                                   f"{exc.remark})") from None
            raise RuntimeError(f"{service} at {addr} answered {code_name(exc.response_code, True)}: {exc.remark}"
                               ) from None
        except MQClientError as exc:
            if exc.__cause__ is None:  # it answered, with a body that is no status
                raise RuntimeError(f"{service} at {addr} answered something that is not JSON: {exc}") from None
            raise RuntimeError(f"{service} at {addr} did not answer within {timeout_ms} ms: {exc}") from exc
        except MQError as exc:
            raise RuntimeError(f"{service} at {addr} did not answer within {timeout_ms} ms: {exc}") from exc
    if how.marker and how.marker not in doc:
        raise RuntimeError(f"{addr} answers, but it is not a {service} (its status has no {how.marker!r})")
    return how.summary(doc)


def _address_from_file() -> str:
    """The address the service in this container wrote to $ROCKETMESH_ADDRESS_FILE ('' when none);
    a wildcard host is asked on loopback."""
    path = os.environ.get(ADDRESS_FILE_ENV, "")
    if not path:
        return ""
    try:
        with open(path) as f:
            addr = f.read().strip()
    except OSError:
        return ""
    return reachable_addr(addr) if addr.rpartition(":")[2] else addr


def cmd_health(args: argparse.Namespace) -> int:
    """``rocketmesh health``: 0 when the service answers, 1 otherwise."""
    addr = args.addr or _address_from_file() or f"127.0.0.1:{CHECKS[args.service].default_port}"
    if ":" not in addr:
        addr = f"{addr}:{CHECKS[args.service].default_port}"
    try:
        line = check(args.service, addr, args.timeout_ms)
    except RuntimeError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    print(f"healthy: {args.service} at {addr}: {line}")
    return 0


def add_health_command(sub: argparse._SubParsersAction) -> None:
    """Add ``health`` to the ``rocketmesh`` command line."""
    p = sub.add_parser("health", help="ask a service whether it is up (exit 0) or not (exit 1)",
                       description=__doc__.split("\n\n", 1)[1], formatter_class=HelpFormatter,
                       epilog="examples:\n  rocketmesh health namesrv\n  rocketmesh health broker broker-a:10911\n"
                              "  rocketmesh health scheduler 127.0.0.1:10950 --timeout-ms 1000")
    p.add_argument("service", choices=sorted(CHECKS), help="which kind of service to ask")
    p.add_argument("addr", nargs="?", help="host:port (default: 127.0.0.1 and the port rocketmesh up gives it; "
                                           "a host alone takes that port)")
    p.add_argument("--timeout-ms", type=int, default=3000, help="how long to wait for the answer")
    p.set_defaults(func=cmd_health)
