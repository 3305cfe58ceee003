"""One :class:`Admin` (and, once a test message is sent, one :class:`Producer`) for each ACL account the
dashboard signs as; one in all when ACL is off.

They hold a client instance (sockets, a route cache), so operators signed in as the same account share
them, and those no session has used for ``idle_s`` are closed by :meth:`Accounts.close_idle`.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass

from rocketmesh.client import Admin, Producer

#: The producer group of the topic page's test messages.
TEST_PRODUCER_GROUP = "rocketmesh_dashboard_producer"


@dataclass(frozen=True)
class Account:
    """Who the dashboard signs as: an ACL account, or nobody (ACL off)."""

    access_key: str = ""
    secret_key: str = ""

    @property
    def signed(self) -> bool:
        """True when requests are signed."""
        return bool(self.access_key)

    def __repr__(self) -> str:  # never the secret, in a log or a traceback
        return f"Account({self.access_key!r})"


#: Unsigned requests (ACL off).
NOBODY = Account()


class Accounts:
    """The Admins of the accounts in use, made on first use."""

    def __init__(self, namesrv: str, timeout_ms: int, idle_s: float) -> None:
        self.namesrv = namesrv
        self.timeout_ms = timeout_ms
        self.idle_s = idle_s
        self._lock = threading.Lock()
        self._clients: dict[Account, _Clients] = {}

    def _clients_of(self, account: Account) -> _Clients:
        with self._lock:
            entry = self._clients.get(account)
            if entry is None:
                # An instance of its own per account: a client instance signs with one account.
                tag = hashlib.sha256(f"{account.access_key}\0{account.secret_key}".encode()).hexdigest()[:8]
                entry = self._clients[account] = _Clients(f"dashboard-{os.getpid()}-{tag}", Admin(
                    self.namesrv, timeout_ms=self.timeout_ms, instance_name=f"dashboard-{os.getpid()}-{tag}",
                    access_key=account.access_key or None, secret_key=account.secret_key or None))
            entry.used = time.monotonic()
        return entry

    def admin(self, account: Account) -> Admin:
        """The Admin that signs as ``account`` (started)."""
        return self._clients_of(account).admin.start()

    def producer(self, account: Account) -> Producer:
        """The test-message producer that signs as ``account`` (started; it records msgTrace, so a test
        message's trace can be looked at as an application's)."""
        entry = self._clients_of(account)
        with self._lock:
            if entry.producer is None:
                entry.producer = Producer(TEST_PRODUCER_GROUP, self.namesrv, instance_name=entry.instance_name,
                                          enable_msg_trace=True, access_key=account.access_key or None,
                                          secret_key=account.secret_key or None)
                entry.producer.start()
            return entry.producer

    def close_idle(self, keep: set[Account]) -> None:
        """Close the clients of accounts not in ``keep`` and unused for ``idle_s``."""
        now = time.monotonic()
        with self._lock:
            gone = [self._clients.pop(a) for a, c in list(self._clients.items())
                    if a not in keep and now - c.used > self.idle_s]
        for clients in gone:
            clients.close()

    def close(self) -> None:
        """Close every account's clients."""
        with self._lock:
            gone = list(self._clients.values())
            self._clients.clear()
        for clients in gone:
            clients.close()


class _Clients:
    """One account's Admin and test producer, and when they were last used (monotonic)."""

    def __init__(self, instance_name: str, admin: Admin) -> None:
        self.instance_name = instance_name
        self.admin = admin
        self.producer: Producer | None = None
        self.used = time.monotonic()

    def close(self) -> None:
        if self.producer is not None:
            self.producer.shutdown()
        self.admin.close()
