"""Clients still running when the interpreter exits are shut down then, as if the program had called
``shutdown()``: a consumer persists its offsets and leaves its group, a producer unregisters.

A script that ends without shutting its clients down would otherwise leave
them registered on the brokers until the channel expiry (120 s) and lose the
offsets consumed since the last periodic commit.
"""

from __future__ import annotations

import atexit
import weakref
from typing import Protocol

from rocketmesh.runtime.log import get_logger

log = get_logger("client", component="exit")


class _Shutdown(Protocol):
    def shutdown(self) -> None: ...


_running: weakref.WeakSet[_Shutdown] = weakref.WeakSet()


def started(client: _Shutdown) -> None:
    """``client`` runs now: shut it down at exit unless :func:`stopped` comes first."""
    _running.add(client)


def stopped(client: _Shutdown) -> None:
    """``client`` was shut down: nothing left to do at exit."""
    _running.discard(client)


@atexit.register
def _shutdown_running() -> None:
    for client in list(_running):
        try:
            client.shutdown()
        except Exception as exc:  # noqa: BLE001 - the others still get their turn
            log.warning("shutdown_at_exit_failed", client=type(client).__name__, error=str(exc))
