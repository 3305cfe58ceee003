"""Readiness checks that are real requests: a process counts as serving once it answers one.

Each check makes one bounded request with a client of its own and returns whether the answer says
"ready"; the caller polls it (:meth:`rocketmesh.testing.process.ServiceProcess.wait_ready`). With
``credentials`` the request is signed, as the service's own requests are where ACL is on.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

from rocketmesh.acl import AclSigner, SessionCredentials
from rocketmesh.remoting import RemotingClient, RemotingCommand, RemotingError, RequestCode, request

__all__ = ["answers", "broker_registered", "owns_queues", "probe_client", "status_of"]


def probe_client(credentials: SessionCredentials | None = None) -> RemotingClient:
    """A client for a look at a service, signing with ``credentials`` where ACL is on."""
    return RemotingClient(name="probe", rpc_hook=None if credentials is None else AclSigner(credentials))


def _ask(addr: str, code: int, timeout_ms: int, credentials: SessionCredentials | None) -> RemotingCommand | None:
    with probe_client(credentials) as client:
        try:
            return client.invoke_sync(addr, request(code), timeout_ms)
        except RemotingError:
            return None


def answers(addr: str, code: int = RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            credentials: SessionCredentials | None = None, timeout_ms: int = 300) -> bool:
    """Whether ``addr`` answers a request with ``code`` within ``timeout_ms`` (any answer, an error code too:
    NO_PERMISSION from a server checking ACL says it serves as well)."""
    return _ask(addr, code, timeout_ms, credentials) is not None


def broker_registered(namesrv: str, broker_name: str, broker_addr: str,
                      credentials: SessionCredentials | None = None, timeout_ms: int = 1000) -> bool:
    """Whether the name server ``namesrv`` lists ``broker_addr`` under ``broker_name`` in its cluster table
    (asked with ``credentials``: a name server checking ACL answers no one else)."""
    resp = _ask(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, timeout_ms, credentials)
    if resp is None or not resp.body:
        return False
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
        table = orjson.loads(resp.body).get("brokerAddrTable") or {}
        return broker_addr in ((table.get(broker_name) or {}).get("brokerAddrs") or {}).values()
    return False


def status_of(addr: str, timeout_ms: int = 3000) -> dict[str, Any] | None:
    """A system-group replica's (scheduler, txn-checker, ha) answer to GET_CONSUMER_RUNNING_INFO at its status
    port ``addr``: what it owns and has done; None when it does not answer."""
    resp = _ask(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, timeout_ms, None)
    if resp is None or not resp.body:
        return None
    status = orjson.loads(resp.body)
    return status if isinstance(status, dict) else None


def owns_queues(addr: str) -> bool:
    """Whether the replica at ``addr`` has taken queues of its system group (it rebalanced onto the brokers)."""
    status = status_of(addr, 300)
    return bool(status and status.get("queues"))
