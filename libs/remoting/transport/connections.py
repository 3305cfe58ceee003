"""ConnectionTable: which connections each client has open, as a RemotingServer's I/O thread sees them.

Two sources, not ordered with respect to each other:

- a socket monitor reports ZMQ_EVENT_ACCEPTED and ZMQ_EVENT_DISCONNECTED with
  the socket descriptor of the connection (``accepted``, ``disconnected``);
- a RemotingClient announces every connection it makes (ZMQ_PROBE_ROUTER: an
  empty message first on each new connection); the server reads the probe's
  source descriptor (ZMQ_SRCFD) and its route (``opened``).

The kernel reuses a closed descriptor for the next connection, so a
descriptor alone does not say which connection it is. What ZeroMQ does
guarantee: a connection's ACCEPTED event is sent before its probe can be
read, and its DISCONNECTED event before its descriptor is closed (and so
before anyone else's ACCEPTED on that number). The server therefore reads
every pending monitor event before it handles a probe; then a probe on a
descriptor with no open connection is a leftover of one that already closed
(ignored), and a probe on a descriptor another route holds means that route's
connection closed and the number went to this one. Ordinary messages are
never used to learn a descriptor: one may be a leftover of a closed
connection, read after its number went to someone else.

Not thread-safe: the server's I/O thread alone uses it.
"""

from __future__ import annotations

from typing import NamedTuple


class ClosedRoute(NamedTuple):
    """A connection that closed: its route, its client identity, and whether it was the client's last."""

    route: bytes
    identity: bytes
    last: bool


class ConnectionTable:
    """Announced connections by descriptor and by client identity."""

    def __init__(self) -> None:
        #: Descriptors with an accepted connection not reported closed yet.
        self._open: set[int] = set()
        self._route_fd: dict[bytes, int] = {}
        self._fd_route: dict[int, bytes] = {}
        self._identity_of: dict[bytes, bytes] = {}
        self._routes: dict[bytes, set[bytes]] = {}

    def accepted(self, fd: int) -> ClosedRoute | None:
        """An ACCEPTED event: a new connection on ``fd``. Returns a connection this shows to have closed
        (only where a DISCONNECTED event went missing)."""
        self._open.add(fd)
        route = self._fd_route.pop(fd, None)
        return None if route is None else self._drop(route)

    def disconnected(self, fd: int) -> ClosedRoute | None:
        """A DISCONNECTED event: the connection on ``fd`` closed. Returns it, or None when it was never
        announced."""
        self._open.discard(fd)
        route = self._fd_route.pop(fd, None)
        return None if route is None else self._drop(route)

    def opened(self, route: bytes, identity: bytes, fd: int) -> list[ClosedRoute]:
        """A probe of ``identity``'s connection ``route`` on ``fd`` was read (every monitor event sent so
        far read before it). Returns the connections this shows to have closed."""
        if fd not in self._open:
            return []  # its connection closed before the probe was read: nothing to track
        closed: list[ClosedRoute] = []
        holder = self._fd_route.get(fd)
        if holder is not None and holder != route:
            # Two probes for one open descriptor: one is a leftover of a closed connection. The later
            # one read is taken for the current owner (the two are equally likely; both are rare).
            del self._fd_route[fd]
            closed.append(self._drop(holder))
        old_fd = self._route_fd.get(route)
        if old_fd is not None and old_fd != fd:
            # The route redialled onto a new connection: the old one is closed or closing, and its
            # DISCONNECTED, when it comes, concerns nobody.
            del self._fd_route[old_fd]
        self._route_fd[route] = fd
        self._fd_route[fd] = route
        self._identity_of[route] = identity
        self._routes.setdefault(identity, set()).add(route)
        return closed

    def connected(self, identity: bytes) -> bool:
        """True while ``identity`` has at least one announced connection open."""
        return identity in self._routes

    def __len__(self) -> int:
        """Announced connections open."""
        return len(self._route_fd)

    def _drop(self, route: bytes) -> ClosedRoute:
        self._route_fd.pop(route, None)
        identity = self._identity_of.pop(route, route)
        routes = self._routes.get(identity)
        last = True
        if routes is not None:
            routes.discard(route)
            last = not routes
            if last:
                del self._routes[identity]
        return ClosedRoute(route, identity, last)
