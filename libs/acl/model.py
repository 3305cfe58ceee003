"""The plain ACL file (RocketMQ's plain_acl.yml) as dataclasses::

    globalWhiteRemoteAddresses:
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ
        secretKey: 12345678
        whiteRemoteAddress:
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms:
          - topicA=DENY
          - topicB=PUB|SUB
        groupPerms:
          - groupA=DENY
          - groupB=SUB

Anything the file says that cannot be used (an unknown permission, a duplicate or short key, a bad
address pattern) is an :class:`AclConfigError` naming it: RocketMQ would quietly read an unknown
permission as DENY, which hides typing mistakes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import IntFlag
from pathlib import Path
from typing import Any

#: RocketMQ refuses keys shorter than this (AclUtils / PlainPermissionManager).
MIN_KEY_LENGTH = 6


class AclConfigError(ValueError):
    """The ACL file cannot be read or says something that cannot be used."""


class Permission(IntFlag):
    """RocketMQ's Permission bits: what an account may do with a topic or group."""

    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8

    @classmethod
    def parse(cls, text: str) -> Permission:
        """``DENY``, ``PUB``, ``SUB``, ``PUB|SUB`` or ``SUB|PUB`` (RocketMQ's spellings)."""
        words = {w.strip().upper() for w in str(text).split("|")}
        if words == {"DENY"}:
            return cls.DENY
        if words and words <= {"PUB", "SUB"}:
            out = cls(0)
            for w in words:
                out |= cls[w]
            return out
        raise AclConfigError(f"unknown permission {text!r}: use DENY, PUB, SUB or PUB|SUB")

    @property
    def text(self) -> str:
        """As the file writes it (``PUB|SUB``)."""
        if self & Permission.DENY:
            return "DENY"
        names = [p.name for p in (Permission.PUB, Permission.SUB) if self & p]
        return "|".join(n for n in names if n) or "none"


_DENY, _ANY, _PUB_OR_SUB = int(Permission.DENY), int(Permission.ANY), int(Permission.PUB | Permission.SUB)


def allows(needed: Permission, owned: Permission) -> bool:
    """RocketMQ's Permission.checkPermission: DENY refuses all, ANY is PUB or SUB, else the bit must be owned."""
    # On plain ints: IntFlag's operators cost more than the rest of a request's check.
    n, o = int(needed), int(owned)
    if o & _DENY:
        return False
    if n & _ANY:
        return bool(o & _PUB_OR_SUB)
    return bool(n & o)


@dataclass(frozen=True)
class RemoteAddressPattern:
    """One of RocketMQ's remote address forms: ``*`` (anyone), an exact address, or IPv4 segments each
    ``*``, ``n``, ``{a,b,c}`` or ``a-b`` (``192.168.0.*``, ``10.10.103.{1,2}``, ``1.1.1.1-5``); a
    trailing ``*`` covers the segments after it (``10.*``)."""

    text: str
    #: Per IPv4 segment, the numbers it admits; None for an exact (or IPv6) address or ``*``.
    segments: tuple[frozenset[int], ...] | None = None

    @classmethod
    def parse(cls, text: str) -> RemoteAddressPattern:
        text = str(text).strip()
        if not text:
            raise AclConfigError("an empty remote address")
        if text in ("*", "*.*.*.*"):
            return cls("*")
        parts = text.split(".")
        if ":" in text or (len(parts) == 4 and all(p.isdigit() for p in parts)):
            try:
                ipaddress.ip_address(text)
            except ValueError:
                raise AclConfigError(f"bad remote address {text!r}") from None
            return cls(text)
        if parts[-1] == "*" and len(parts) < 4:
            parts += ["*"] * (4 - len(parts))
        if len(parts) != 4:
            raise AclConfigError(f"bad remote address pattern {text!r}: expected four IPv4 segments")
        return cls(text, tuple(cls._segment(p, text) for p in parts))

    @staticmethod
    def _segment(part: str, text: str) -> frozenset[int]:
        try:
            if part == "*":
                return frozenset(range(256))
            if part.startswith("{") and part.endswith("}"):
                values = frozenset(int(v) for v in part[1:-1].split(","))
            elif "-" in part:
                low, high = (int(v) for v in part.split("-", 1))
                values = frozenset(range(low, high + 1))
            else:
                values = frozenset((int(part),))
        except ValueError:
            raise AclConfigError(f"bad remote address pattern {text!r}: cannot read segment {part!r}") from None
        if not values or min(values) < 0 or max(values) > 255:
            raise AclConfigError(f"bad remote address pattern {text!r}: segment {part!r} is outside 0..255")
        return values

    def matches(self, addr: str) -> bool:
        """Whether the peer address ``addr`` (no port) is one this pattern names."""
        if self.text == "*":
            return True
        if self.segments is None:
            return addr == self.text
        parts = addr.split(".")
        if len(parts) != 4:
            return False
        try:
            return all(int(p) in allowed for p, allowed in zip(parts, self.segments, strict=False))
        except ValueError:
            return False


def _patterns(value: Any, where: str) -> tuple[RemoteAddressPattern, ...]:
    if value in (None, ""):
        return ()
    items = value if isinstance(value, list) else [value]
    try:
        return tuple(RemoteAddressPattern.parse(item) for item in items if str(item).strip())
    except AclConfigError as exc:
        raise AclConfigError(f"{where}: {exc}") from None


def _perm_table(value: Any, where: str) -> dict[str, Permission]:
    out: dict[str, Permission] = {}
    for item in value or []:
        name, sep, perm = str(item).partition("=")
        if not sep or not name.strip():
            raise AclConfigError(f"{where}: expected NAME=PERM, got {item!r}")
        try:
            out[name.strip()] = Permission.parse(perm)
        except AclConfigError as exc:
            raise AclConfigError(f"{where} {name.strip()}: {exc}") from None
    return out


@dataclass(frozen=True)
class PlainAccount:
    """One entry of ``accounts``."""

    access_key: str
    secret_key: str = field(repr=False)
    white_remote_address: tuple[RemoteAddressPattern, ...] = ()
    admin: bool = False
    default_topic_perm: Permission = Permission.DENY
    default_group_perm: Permission = Permission.DENY
    topic_perms: dict[str, Permission] = field(default_factory=dict)
    group_perms: dict[str, Permission] = field(default_factory=dict)

    def topic_perm(self, topic: str) -> tuple[Permission, str]:
        """What this account owns on ``topic``, and where that comes from (for a refusal's remark)."""
        perm = self.topic_perms.get(topic)
        return (perm, "topicPerms") if perm is not None else (self.default_topic_perm, "defaultTopicPerm")

    def group_perm(self, group: str) -> tuple[Permission, str]:
        """What this account owns on ``group``, and where that comes from."""
        perm = self.group_perms.get(group)
        return (perm, "groupPerms") if perm is not None else (self.default_group_perm, "defaultGroupPerm")

    @classmethod
    def from_dict(cls, d: Any, index: int) -> PlainAccount:
        where = f"accounts[{index}]"
        if not isinstance(d, dict):
            raise AclConfigError(f"{where}: expected a mapping")
        access_key, secret_key = str(d.get("accessKey") or ""), str(d.get("secretKey") or "")
        for name, key in (("accessKey", access_key), ("secretKey", secret_key)):
            if len(key) < MIN_KEY_LENGTH:
                raise AclConfigError(f"{where}: {name} must be at least {MIN_KEY_LENGTH} characters")
        where = f"account {access_key}"
        admin = d.get("admin", False)
        if not isinstance(admin, bool):
            raise AclConfigError(f"{where}: admin must be true or false, got {admin!r}")
        try:
            topic_default = Permission.parse(d.get("defaultTopicPerm") or "DENY")
            group_default = Permission.parse(d.get("defaultGroupPerm") or "DENY")
        except AclConfigError as exc:
            raise AclConfigError(f"{where}: {exc}") from None
        return cls(access_key, secret_key, _patterns(d.get("whiteRemoteAddress"), f"{where} whiteRemoteAddress"),
                   admin, topic_default, group_default, _perm_table(d.get("topicPerms"), f"{where} topicPerms"),
                   _perm_table(d.get("groupPerms"), f"{where} groupPerms"))


@dataclass(frozen=True)
class PlainAccessConfig:
    """The whole file: addresses let in without an account, and the accounts by access key."""

    global_white_remote_addresses: tuple[RemoteAddressPattern, ...] = ()
    accounts: dict[str, PlainAccount] = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, text: str, source: str = "<acl>") -> PlainAccessConfig:
        """Parse plain_acl.yml's text; AclConfigError naming ``source`` and what is wrong.

        Needs PyYAML, which comes with the ``server`` extra: only the servers (and ``rocketmesh up``, which
        starts them) read the file; a client that signs its requests never does."""
        import yaml

        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise AclConfigError(f"{source}: not YAML: {exc}") from None
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise AclConfigError(f"{source}: expected a mapping with globalWhiteRemoteAddresses and accounts")
        try:
            white = _patterns(doc.get("globalWhiteRemoteAddresses"), "globalWhiteRemoteAddresses")
            raw_accounts = doc.get("accounts") or []
            if not isinstance(raw_accounts, list):
                raise AclConfigError("accounts: expected a list")
            accounts: dict[str, PlainAccount] = {}
            for i, d in enumerate(raw_accounts):
                account = PlainAccount.from_dict(d, i)
                if account.access_key in accounts:
                    raise AclConfigError(f"accounts[{i}]: accessKey {account.access_key} appears twice")
                accounts[account.access_key] = account
        except AclConfigError as exc:
            raise AclConfigError(f"{source}: {exc}") from None
        return cls(white, accounts)

    @classmethod
    def load(cls, path: str) -> PlainAccessConfig:
        """Read and parse the file at ``path``."""
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise AclConfigError(f"cannot read the ACL file {path}: {exc.strerror or exc}") from None
        return cls.from_yaml(text, path)
