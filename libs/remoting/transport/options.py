"""Socket settings shared by RemotingServer and RemotingClient."""

from __future__ import annotations

from dataclasses import dataclass, field

import zmq

from rocketmesh.remoting.protocol.command import MAX_HEADER_SIZE
from rocketmesh.remoting.transport.curve import CurveKeys, curve_from_env

#: RocketMQ's default maxMessageSize (4 MiB) plus room for a header and its length field.
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024 + MAX_HEADER_SIZE + 4


@dataclass(frozen=True, slots=True)
class SocketOptions:
    """ZeroMQ options for our sockets.

    ``max_message_size`` bounds every inbound frame (ZMQ_MAXMSGSIZE): a peer
    that sends a larger one is disconnected by ZeroMQ. The client also refuses
    to send a larger frame. ``-1`` means no limit.
    ``curve``: the CurveZMQ keys (see ``curve.py``), by default the ones the
    environment names; None is plain ZMTP.
    ``hwm`` is the per-peer queue bound in messages, both ways; it must exceed
    the number of requests a caller keeps in flight.
    """

    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_header_size: int = MAX_HEADER_SIZE
    hwm: int = 100_000
    linger_ms: int = 200
    reconnect_ivl_ms: int = 100
    reconnect_ivl_max_ms: int = 2_000
    #: ZMTP heartbeats, so that a vanished peer is noticed without TCP's help.
    heartbeat_ivl_ms: int = 5_000
    heartbeat_timeout_ms: int = 15_000
    #: Read once per SocketOptions (a client or server), never per socket or message.
    curve: CurveKeys | None = field(default_factory=curve_from_env)

    def apply(self, sock: zmq.Socket, server: bool = False) -> None:
        """Set the options common to both ends on ``sock`` (a ROUTER that binds when ``server``), before it
        binds or connects; with ``curve``, its keys for that end (ConfigError when a server has none)."""
        if self.curve is not None:
            if server:
                self.curve.apply_server(sock)
            else:
                self.curve.apply_client(sock)
        sock.setsockopt(zmq.LINGER, self.linger_ms)
        sock.setsockopt(zmq.SNDHWM, self.hwm)
        sock.setsockopt(zmq.RCVHWM, self.hwm)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_size)
        sock.setsockopt(zmq.HEARTBEAT_IVL, self.heartbeat_ivl_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, self.heartbeat_timeout_ms)
        sock.setsockopt(zmq.HEARTBEAT_TTL, self.heartbeat_timeout_ms)
