"""The server side of plain ACL (RocketMQ's PlainAccessValidator and PlainPermissionManager).

Which request needs what (RocketMQ's mapping, with rocketmesh's own codes added):

- SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE: topic PUB (a send to ``%RETRY%G``: group G SUB);
- PULL_MESSAGE, UPDATE_CONSUMER_OFFSET, QUERY_CONSUMER_OFFSET: topic SUB and group SUB;
- HEART_BEAT: each consumer group SUB and each topic it subscribes SUB;
- CONSUMER_SEND_MSG_BACK, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, LOCK_BATCH_MQ,
  UNLOCK_BATCH_MQ: group SUB;
- QUERY_MESSAGE: topic SUB; GET_ROUTEINFO_BY_TOPIC: topic ANY (PUB or SUB);
- :data:`ADMIN_CODES` (topic and group administration, broker and name server configuration,
  registration of brokers, and the system services' requests): an admin account;
- anything else, RocketMQ's read-only admin queries among them (GET_CONSUME_STATS, GET_BROKER_CONSUME_STATS,
  GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST, QUERY_TOPIC_CONSUME_BY_WHO, ...): any account
  whose signature checks.

Order of the check, as RocketMQ's: a peer address in ``globalWhiteRemoteAddresses`` passes unsigned;
then the request must name a known AccessKey; a peer in that account's ``whiteRemoteAddress`` passes
without signature; then the Timestamp must be within the replay window and the Signature must check;
then an admin account may do anything, others need the permissions above (a topic or group the
account does not list gets its defaultTopicPerm / defaultGroupPerm).

A refusal is NO_PERMISSION (16) with a remark naming the request, the peer, the account, the resource
and the permission refused and why.
"""

from __future__ import annotations

import hmac
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from rocketmesh.acl.model import AclConfigError, Permission, PlainAccessConfig, allows
from rocketmesh.acl.signer import (
    ACCESS_KEY,
    REPLAY_WINDOW_MS,
    SIGNATURE,
    TIMESTAMP,
    rocketmq_signature,
    signature,
)
from rocketmesh.model.topics import RETRY_GROUP_TOPIC_PREFIX
from rocketmesh.remoting.errors import RequestError
from rocketmesh.remoting.protocol.codes import RequestCode, ResponseCode, code_name
from rocketmesh.remoting.protocol.command import RemotingCommand
from rocketmesh.runtime.log import get_logger

R = RequestCode

#: Requests only an admin account may make: RocketMQ's Permission.ADMIN_CODE and the other changes
#: mqadmin makes, the brokers' registration with the name servers, and the system services' requests.
ADMIN_CODES = frozenset({
    R.UPDATE_AND_CREATE_TOPIC, R.UPDATE_BROKER_CONFIG, R.DELETE_TOPIC_IN_BROKER,
    R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, R.DELETE_SUBSCRIPTIONGROUP,
    R.DELETE_TOPIC_IN_NAMESRV, R.UPDATE_NAMESRV_CONFIG, R.PUT_KV_CONFIG, R.DELETE_KV_CONFIG,
    R.WIPE_WRITE_PERM_OF_BROKER, R.ADD_WRITE_PERM_OF_BROKER, R.REGISTER_BROKER, R.UNREGISTER_BROKER,
    R.RESET_CONSUMER_OFFSET_IN_BROKER, R.INVOKE_BROKER_TO_RESET_OFFSET, R.TRIGGER_DELETE_FILES,
    R.CLEAN_EXPIRED_CONSUMEQUEUE, R.DELETE_EXPIRED_COMMITLOG, R.CLEAN_UNUSED_TOPIC,
    R.UPDATE_AND_CREATE_ACL_CONFIG, R.DELETE_ACL_CONFIG, R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    R.DELIVER_DUE_MESSAGES, R.CHECK_HALF_MESSAGE, R.HA_TRANSFER, R.HA_APPEND,
})

_SENDS = frozenset({R.SEND_MESSAGE, R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE})
_TOPIC_AND_GROUP_SUB = frozenset({R.PULL_MESSAGE, R.UPDATE_CONSUMER_OFFSET, R.QUERY_CONSUMER_OFFSET})
_GROUP_SUB: dict[int, str] = {R.CONSUMER_SEND_MSG_BACK: "group", R.UNREGISTER_CLIENT: "consumerGroup",
              R.GET_CONSUMER_LIST_BY_GROUP: "consumerGroup"}


class AclDenied(Exception):
    """A request the ACL refuses; ``remark`` says what was refused and why."""

    def __init__(self, remark: str) -> None:
        super().__init__(remark)
        self.remark = remark


@dataclass
class RequiredAccess:
    """What one request needs: the admin flag, or permissions on topics and groups."""

    admin: bool = False
    topics: dict[str, Permission] = field(default_factory=dict)
    groups: dict[str, Permission] = field(default_factory=dict)

    def topic(self, name: Any, perm: Permission) -> None:
        """Need ``perm`` on topic ``name``; a retry topic is its group's SUB, as RocketMQ has it."""
        if isinstance(name, str) and name:
            if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
                self.group(name[len(RETRY_GROUP_TOPIC_PREFIX):], Permission.SUB)
            else:
                prev = self.topics.get(name)
                self.topics[name] = perm if prev is None else prev | perm

    def group(self, name: Any, perm: Permission) -> None:
        """Need ``perm`` on consumer group ``name``."""
        if isinstance(name, str) and name:
            prev = self.groups.get(name)
            self.groups[name] = perm if prev is None else prev | perm


def _json_body(cmd: RemotingCommand) -> dict:
    try:
        doc = orjson.loads(cmd.body) if cmd.body else {}
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def required_access(cmd: RemotingCommand) -> RequiredAccess:
    """What ``cmd`` needs (see the module docstring). A malformed body needs nothing more here: its
    handler refuses it."""
    need = RequiredAccess()
    code, ext = cmd.code, cmd.ext
    if code in ADMIN_CODES:
        need.admin = True
    elif code in _SENDS:
        # SEND_MESSAGE_V2 (and the Java client's batch) name the topic "b".
        need.topic(ext.get("topic", ext.get("b")), Permission.PUB)
    elif code in _TOPIC_AND_GROUP_SUB:
        need.topic(ext.get("topic"), Permission.SUB)
        need.group(ext.get("consumerGroup"), Permission.SUB)
    elif code in _GROUP_SUB:
        need.group(ext.get(_GROUP_SUB[code]), Permission.SUB)
    elif code == R.QUERY_MESSAGE:
        need.topic(ext.get("topic"), Permission.SUB)
    elif code == R.GET_ROUTEINFO_BY_TOPIC:
        need.topic(ext.get("topic"), Permission.ANY)
    elif code in (R.LOCK_BATCH_MQ, R.UNLOCK_BATCH_MQ):
        need.group(_json_body(cmd).get("consumerGroup"), Permission.SUB)
    elif code == R.HEART_BEAT:
        for consumer in _json_body(cmd).get("consumerDataSet") or []:
            if not isinstance(consumer, dict):
                continue
            need.group(consumer.get("groupName"), Permission.SUB)
            for sub in consumer.get("subscriptionDataSet") or []:
                if isinstance(sub, dict):
                    need.topic(sub.get("topic"), Permission.SUB)
    return need


def peer_ip(remote: str) -> str:
    """The address part of a RequestContext's ``remote`` (``identity@ip``, maybe with a port)."""
    addr = remote.rpartition("@")[2]
    if addr.count(":") == 1:  # IPv4 with a port; IPv6 has more colons and no port here
        addr = addr.partition(":")[0]
    return addr.strip("[]")


class PlainAccessValidator:
    """Checks requests against the accounts of one plain_acl.yml, reloading it when it changes.

    The file is read by the constructor (AclConfigError when it cannot be used, so a service fails to
    start with the reason). After that its modification time is looked at, at most every
    ``reload_interval_s``, on the way of a request: a changed file is read again; one that cannot be
    used is logged and the last good accounts stay in force.
    """

    def __init__(self, path: str, service: str, reload_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.service = service
        self._interval = max(0.05, reload_interval_s)
        self._clock = clock
        self._log = get_logger("acl", server=service)
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self.config = PlainAccessConfig.load(path)
        self._next_look = time.monotonic() + self._interval
        self._log.info("acl_loaded", path=path, accounts=len(self.config.accounts))

    # -- reload ---------------------------------------------------------------

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def maybe_reload(self) -> None:
        """Read the file again if it changed since last read (bounded: at most once an interval)."""
        now = time.monotonic()
        if now < self._next_look or not self._lock.acquire(blocking=False):
            return
        try:
            self._next_look = now + self._interval
            stamp = self._file_stamp()
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                self.config = PlainAccessConfig.load(self.path)
            except AclConfigError as exc:
                self._log.error("acl_reload_failed_keeping_last_good", path=self.path, error=str(exc))
                return
            self._log.info("acl_reloaded", path=self.path, accounts=len(self.config.accounts))
        finally:
            self._lock.release()

    # -- the check ------------------------------------------------------------

    def check(self, cmd: RemotingCommand, remote_ip: str, rocketmq_client: bool = False) -> None:
        """Raise AclDenied when ``cmd`` from ``remote_ip`` may not pass. ``rocketmq_client``: the request came
        from one of RocketMQ's own clients (by the TCP door), signed their way: no Timestamp, the
        Signature of :func:`rocketmq_signature`."""
        self.maybe_reload()
        config = self.config
        if any(p.matches(remote_ip) for p in config.global_white_remote_addresses):
            return
        ext = cmd.ext
        access_key = ext.get(ACCESS_KEY)
        what = _What(cmd.code, remote_ip)  # formatted only into a refusal
        if not isinstance(access_key, str) or not access_key:
            raise AclDenied(f"[{self.service}] ACL refused {what}: no AccessKey (the request is not signed and "
                            "the address is not in globalWhiteRemoteAddresses)")
        account = config.accounts.get(access_key)
        if account is None:
            raise AclDenied(f"[{self.service}] ACL refused {what}: no account with accessKey={access_key}")
        if any(p.matches(remote_ip) for p in account.white_remote_address):
            return
        if rocketmq_client:
            expected = rocketmq_signature(account.secret_key, ext, cmd.body)
        else:
            stamp = ext.get(TIMESTAMP)
            if not isinstance(stamp, int) or isinstance(stamp, bool):
                raise AclDenied(f"[{self.service}] ACL refused {what} for accessKey={access_key}: no Timestamp")
            skew_ms = stamp - int(self._clock() * 1000)
            if abs(skew_ms) > REPLAY_WINDOW_MS:
                # Which way, in words: a signed figure read one way or the other would have an operator set
                # the client's clock the wrong way.
                way = "ahead of" if skew_ms > 0 else "behind"
                raise AclDenied(f"[{self.service}] ACL refused {what} for accessKey={access_key}: Timestamp is "
                                f"{abs(skew_ms) / 1000:.1f} s {way} this server's clock, outside the replay "
                                f"window of ±{REPLAY_WINDOW_MS // 1000} s")
            expected = signature(account.secret_key, cmd.code, ext, cmd.body)
        given = ext.get(SIGNATURE)
        if not isinstance(given, str) or not hmac.compare_digest(given, expected):
            raise AclDenied(f"[{self.service}] ACL refused {what}: signature check failed for "
                            f"accessKey={access_key} (wrong secretKey, or the request was altered)")
        if account.admin:
            return
        need = required_access(cmd)
        if need.admin:
            raise AclDenied(f"[{self.service}] ACL refused {what}: accessKey={access_key} is not admin, and "
                            f"{code_name(cmd.code, False)} needs an admin account")
        for topic, perm in need.topics.items():
            owned, source = account.topic_perm(topic)
            if not allows(perm, owned):
                raise AclDenied(f"[{self.service}] ACL refused {what}: accessKey={access_key} has no "
                                f"{_needed(perm)} permission on topic {topic} (it has {owned.text}, from {source})")
        for group, perm in need.groups.items():
            owned, source = account.group_perm(group)
            if not allows(perm, owned):
                raise AclDenied(f"[{self.service}] ACL refused {what}: accessKey={access_key} has no "
                                f"{_needed(perm)} permission on group {group} (it has {owned.text}, from {source})")

    def account_rights(self, access_key: str | None) -> dict[str, Any]:
        """What ``access_key``'s account may do, as GET_ACL_ACCOUNT answers it (RocketMQ's PlainAccessConfig
        fields, no secret). No account (a request let in by globalWhiteRemoteAddresses): every right."""
        self.maybe_reload()
        account = self.config.accounts.get(access_key) if access_key else None
        if account is None:
            return {"aclEnable": True, "accessKey": access_key or "", "admin": True,
                    "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "PUB|SUB",
                    "topicPerms": [], "groupPerms": []}
        return {"aclEnable": True, "accessKey": account.access_key, "admin": account.admin,
                "defaultTopicPerm": account.default_topic_perm.text,
                "defaultGroupPerm": account.default_group_perm.text,
                "topicPerms": [f"{t}={p.text}" for t, p in sorted(account.topic_perms.items())],
                "groupPerms": [f"{g}={p.text}" for g, p in sorted(account.group_perms.items())]}

    def server_hook(self) -> Callable[[RemotingCommand, Any], None]:
        """A RemotingServer ``request_hook``: a refused request is answered NO_PERMISSION with the reason."""
        log = self._log
        check = self.check

        def hook(cmd: RemotingCommand, ctx: Any) -> None:
            try:
                check(cmd, peer_ip(ctx.remote), ctx.over_tcp)
            except AclDenied as exc:
                log.warning("acl_refused", remark=exc.remark)
                raise RequestError(ResponseCode.NO_PERMISSION, exc.remark) from None
        return hook


class _What:
    """``CODE from ip``, for a refusal's remark; costs nothing until formatted."""

    __slots__ = ("code", "ip")

    def __init__(self, code: int, ip: str) -> None:
        self.code, self.ip = code, ip

    def __str__(self) -> str:
        return f"{code_name(self.code, False)} from {self.ip or '?'}"

    __format__ = lambda self, spec: str(self)  # noqa: E731 - f-strings call __format__


def _needed(perm: Permission) -> str:
    return "PUB or SUB" if perm & Permission.ANY else perm.text
