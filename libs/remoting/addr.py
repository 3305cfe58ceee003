"""RocketMQ address strings: ``host:port`` and lists ``host:port;host:port``."""

from __future__ import annotations

import ipaddress

from rocketmesh.remoting.errors import RemotingConnectError


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` -> ``(host, port)``; IPv6 hosts may be bracketed (``[::1]:9876``).

    Raises RemotingConnectError for anything that is not a usable address.
    """
    if not isinstance(addr, str):
        raise RemotingConnectError(f"address must be a string, got {type(addr).__name__}")
    text = addr.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise RemotingConnectError(f"bad address {addr!r}: expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() for c in host) or "/" in host:
        raise RemotingConnectError(f"bad address {addr!r}: bad host")
    if not port_text.isdigit():
        raise RemotingConnectError(f"bad address {addr!r}: port is not a number")
    port = int(port_text)
    if not 0 < port < 65536:
        raise RemotingConnectError(f"bad address {addr!r}: port out of range")
    return host, port


def join_addr(host: str, port: int) -> str:
    """``(host, port)`` -> ``"host:port"`` (IPv6 hosts bracketed)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


#: Listen addresses that mean "every interface": a client on this host reaches them on loopback.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "*", ""})


def is_loopback_host(host: str) -> bool:
    """True when ``host`` (a name or an address, IPv6 in brackets or not) serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def reachable_host(host: str) -> str:
    """The host a client on this machine uses for a service listening on ``host`` (loopback for a wildcard)."""
    return "127.0.0.1" if host in WILDCARD_HOSTS else host


def reachable_addr(addr: str) -> str:
    """``addr`` (``host:port``, as a service listens) as a client on this machine reaches it."""
    host, _, port = addr.rpartition(":")
    return f"{reachable_host(host)}:{port}"


def tcp_endpoint(addr: str) -> str:
    """The ZeroMQ endpoint for a RocketMQ address: ``"host:port"`` -> ``"tcp://host:port"``."""
    host, port = split_addr(addr)
    return f"tcp://{join_addr(host, port)}"


def parse_addr_list(text: str | None) -> list[str]:
    """``"a:1;b:2"`` -> ``["a:1", "b:2"]``: blanks dropped, each entry checked, order kept, duplicates removed."""
    if not text:
        return []
    out: list[str] = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        split_addr(part)
        if part not in out:
            out.append(part)
    return out
