"""Request signing (RocketMQ's AclClientRPCHook), shared by the client that signs and the server that checks.

A signed request carries three ext fields: ``AccessKey``, ``Timestamp`` (epoch ms when it was signed)
and ``Signature``, the base64 HMAC-SHA256, keyed by the account's secret key, of::

    str(request code) NUL json(ext without Signature, keys sorted) NUL body

RocketMQ signs the ext values alone, concatenated (HMAC-SHA1); naming the keys and the code too means
no field can be moved into another, nor a signed request be resent as another kind of request. The
Timestamp bounds replays: a server refuses one more than :data:`REPLAY_WINDOW_MS` from its own clock,
either way (clock skew between hosts is allowed for within it). Within the window a captured request
can be resent as it is; encrypting the transport (CurveZMQ) is what keeps it from being captured.

RocketMQ's own clients, which come in by the TCP door, sign RocketMQ's way (:func:`rocketmq_signature`),
and the door checks them that way, with the same accounts: it has no replay bound, as RocketMQ has none.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from rocketmesh.remoting.protocol.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
TIMESTAMP = "Timestamp"
#: A signed request older or newer than this (ms, against the server's clock) is refused.
REPLAY_WINDOW_MS = 60_000


@dataclass(frozen=True)
class SessionCredentials:
    """An account's keys (RocketMQ's SessionCredentials); the secret stays out of repr."""

    access_key: str
    secret_key: str = field(repr=False)


def signature(secret_key: str, code: int, ext: dict[str, Any], body: bytes) -> str:
    """The Signature of a request with ``code``, ``ext`` (any Signature in it is left out) and ``body``."""
    fields = {k: v for k, v in ext.items() if k != SIGNATURE}
    content = b"".join((b"%d\x00" % int(code), orjson.dumps(fields, option=orjson.OPT_SORT_KEYS), b"\x00", body))
    return base64.b64encode(hmac.digest(secret_key.encode(), content, hashlib.sha256)).decode("ascii")


def rocketmq_signature(secret_key: str, ext: dict[str, Any], body: bytes) -> str:
    """The Signature RocketMQ's own clients send (their AclClientRPCHook): the base64 HMAC-SHA1, keyed by the
    secret key, of the ext values (Signature left out) in the order of their keys, then the body. It names
    neither keys nor code and carries no timestamp: the TCP door checks it for those clients as RocketMQ does."""
    content = "".join(str(v) for k, v in sorted(ext.items()) if k != SIGNATURE).encode()
    return base64.b64encode(hmac.digest(secret_key.encode(), content + body, hashlib.sha1)).decode("ascii")


class AclSigner:
    """A RemotingClient ``rpc_hook``: signs each request just before it is encoded."""

    def __init__(self, credentials: SessionCredentials, clock: Callable[[], float] = time.time) -> None:
        self.credentials = credentials
        self._clock = clock

    def __call__(self, cmd: RemotingCommand) -> None:
        # A fresh dict: callers may share one ext between requests (and threads).
        ext = dict(cmd.ext)
        ext[ACCESS_KEY] = self.credentials.access_key
        ext[TIMESTAMP] = int(self._clock() * 1000)
        ext.pop(SIGNATURE, None)
        ext[SIGNATURE] = signature(self.credentials.secret_key, cmd.code, ext, cmd.body)
        cmd.ext = ext

    def __repr__(self) -> str:
        return f"AclSigner(access_key={self.credentials.access_key!r})"


def signer_for(access_key: str | None, secret_key: str | None) -> AclSigner | None:
    """The signer for these keys; None when both are empty. ValueError when only one is given."""
    if not access_key and not secret_key:
        return None
    if not access_key or not secret_key:
        raise ValueError("give both access_key and secret_key (or neither)")
    return AclSigner(SessionCredentials(access_key, secret_key))
