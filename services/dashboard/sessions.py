"""Sign-in, sessions and CSRF tokens.

A session lives in this process only: the browser holds a random id in an HttpOnly, SameSite=Strict
cookie, never the account's secret (nor does any URL). Each session has its own CSRF token, which every
form carries in a hidden field and a script in the ``X-CSRF-Token`` header; a request that changes
anything without it is refused.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from .accounts import NOBODY, Account

#: The session cookie's name.
COOKIE = "rocketmesh_session"
#: The form field and the header that carry the CSRF token.
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True)
class Rights:
    """What the signed-in account may do, as the broker told it (everything when ACL is off)."""

    admin: bool = True
    #: The account's default permission on topics and groups and the ones it lists (RocketMQ's
    #: ``DENY``, ``PUB``, ``SUB``, ``PUB|SUB``).
    default_topic_perm: str = "PUB|SUB"
    default_group_perm: str = "PUB|SUB"
    topic_perms: dict[str, str] = field(default_factory=dict)
    group_perms: dict[str, str] = field(default_factory=dict)


    def to_json(self) -> dict[str, object]:
        """As the API shows it (camelCase, RocketMQ's PlainAccessConfig names)."""
        return {"admin": self.admin, "defaultTopicPerm": self.default_topic_perm,
                "defaultGroupPerm": self.default_group_perm, "topicPerms": self.topic_perms,
                "groupPerms": self.group_perms}


@dataclass
class Session:
    """One browser's session."""

    sid: str
    csrf: str
    account: Account = NOBODY
    rights: Rights = field(default_factory=Rights)
    signed_in: bool = False
    #: A message for the next page shown (what the last change did).
    flash: str = ""
    last_used: float = field(default_factory=time.monotonic)

    def csrf_ok(self, token: str | None) -> bool:
        """True when ``token`` is this session's CSRF token (compared in constant time)."""
        return bool(token) and hmac.compare_digest(str(token), self.csrf)


class Sessions:
    """The live sessions, by id; one unused for ``timeout_s`` is gone, and past ``max_sessions`` the least
    recently used go first (a client that never keeps its cookie cannot grow the table without bound)."""

    def __init__(self, timeout_s: float, max_sessions: int = 10_000) -> None:
        self.timeout_s = timeout_s
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        #: Least recently used first: expiry and eviction take from the front, each use moves to the end.
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def get(self, sid: str | None) -> Session | None:
        """The live session ``sid`` (its use recorded), or None."""
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            s = self._sessions.get(sid)
            if s is None:
                return None
            if now - s.last_used > self.timeout_s:
                del self._sessions[sid]
                return None
            s.last_used = now
            self._sessions.move_to_end(sid)
            return s

    def new(self, account: Account = NOBODY, rights: Rights | None = None, signed_in: bool = False,
            keep: bool = True) -> Session:
        """A new session with fresh id and CSRF token; ``keep`` False: one for this request only (a script's
        read without a cookie), never stored."""
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), account, rights or Rights(), signed_in)
        if keep:
            with self._lock:
                self._expire(time.monotonic())
                while len(self._sessions) >= self.max_sessions:
                    self._sessions.popitem(last=False)
                self._sessions[s.sid] = s
        return s

    def drop(self, sid: str) -> None:
        """End the session ``sid`` (signing out)."""
        with self._lock:
            self._sessions.pop(sid, None)

    def accounts(self) -> set[Account]:
        """The accounts of the live sessions."""
        with self._lock:
            self._expire(time.monotonic())
            return {s.account for s in self._sessions.values()}

    def latest_account(self) -> Account | None:
        """The account of the most recently used signed-in session, or None."""
        with self._lock:
            live = [s for s in self._sessions.values() if s.signed_in]
        return max(live, key=lambda s: s.last_used).account if live else None

    def _expire(self, now: float) -> None:
        """Drop the sessions unused for the timeout: the oldest are at the front, so this stops at the first
        one still in use."""
        while self._sessions:
            sid, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used <= self.timeout_s:
                return
            del self._sessions[sid]
