"""The wire protocol: RocketMQ's RemotingCommand over ZeroMQ ROUTER/DEALER sockets.

``command`` holds the codec, ``client`` and ``server`` the connection
handling, ``codes`` the request and response codes, ``errors`` the typed
failures, ``addr`` RocketMQ's address strings.
"""

from rocketmesh.remoting.addr import parse_addr_list, split_addr, tcp_endpoint
from rocketmesh.remoting.client import RemotingClient
from rocketmesh.remoting.codes import RequestCode, ResponseCode
from rocketmesh.remoting.command import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingCommand,
    decode,
    pack_frame,
    encode,
    request,
    response_to,
)
from rocketmesh.remoting.errors import (
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
    RequestError,
)
from rocketmesh.remoting.options import SocketOptions
from rocketmesh.remoting.server import RemotingServer, RequestContext

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
