"""The wire protocol: RocketMQ's RemotingCommand over ZeroMQ ROUTER/DEALER sockets.

``protocol`` holds the wire format (codes, the command codec, frames, typed
headers), ``transport`` the connection handling (client, server, pending
requests, monitors, CurveZMQ), ``errors`` the typed failures, ``addr``
RocketMQ's address strings.
"""

from rocketmesh.remoting.addr import parse_addr_list, split_addr, tcp_endpoint
from rocketmesh.remoting.errors import (
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RequestError,
)
from rocketmesh.remoting.protocol.codes import RequestCode, ResponseCode
from rocketmesh.remoting.protocol.command import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingCommand,
    decode,
    encode,
    pack_frame,
    request,
    response_to,
)
from rocketmesh.remoting.transport.client import RemotingClient
from rocketmesh.remoting.transport.options import SocketOptions
from rocketmesh.remoting.transport.server import RemotingServer, RequestContext

__all__ = [
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "ProtocolError",
    "RemotingClient",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingError",
    "RemotingSendRequestError",
    "RemotingServer",
    "RemotingTimeoutError",
    "RequestCode",
    "RequestContext",
    "RequestError",
    "ResponseCode",
    "SocketOptions",
    "decode",
    "pack_frame",
    "encode",
    "parse_addr_list",
    "request",
    "response_to",
    "split_addr",
    "tcp_endpoint",
]
