"""What every mesh service beside the name server and the broker has: where it finds the name servers,
its status port, its instance name, and the server that answers status requests."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from rocketmesh.acl.config import ClientCredentialsConfig
from rocketmesh.remoting import RemotingCommand, RemotingServer, RequestCode, RequestContext, ResponseCode, response_to
from rocketmesh.server.metrics import MetricsConfig


@dataclass
class ServiceConfig(MetricsConfig, ClientCredentialsConfig):
    """Settings every such service has (its metrics exporter's, and the ACL account its requests are signed
    with: accessKey / secretKey); a service's config extends this."""

    #: "host:port;host:port"; empty means the NAMESRV_ADDR environment variable.
    namesrv_addr: str = ""
    #: Loopback by default, as ``rocketmesh up``: set 0.0.0.0 (or an interface) to serve other hosts.
    listen_address: str = "127.0.0.1"
    #: The status port (GET_CONSUMER_RUNNING_INFO); 0 picks a free one.
    listen_port: int = 0
    #: Client instance name; replicas need distinct ones (empty: the service name, process id and a
    #: random suffix, distinct even for containers that share a network namespace).
    instance_name: str = ""


def instance_name_of(config: ServiceConfig, service: str) -> str:
    """The configured instance name, or one made up for this process."""
    return config.instance_name or f"{service}-{os.getpid()}-{secrets.token_hex(3)}"


def status_server(config: ServiceConfig, name: str, status: Callable[[], dict[str, Any]]) -> RemotingServer:
    """The service's own ZeroMQ server (not started): GET_CONSUMER_RUNNING_INFO answers ``status()`` as JSON."""
    server = RemotingServer(f"{config.listen_address}:{config.listen_port}", name=name)

    def running_info(req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return response_to(req, ResponseCode.SUCCESS, None, None, orjson.dumps(status()))
    server.register(RequestCode.GET_CONSUMER_RUNNING_INFO, running_info)
    return server
