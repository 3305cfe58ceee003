"""Client-side unique message ids (the UNIQ_KEY property), as RocketMQ's MessageClientIDSetter makes them.

16 bytes shown as 32 upper-case hex characters::

    ip 4 | pid (low 16 bits) 2 | per-process random 4 | ms since the start of the month 4 | counter 2

The first 10 bytes are fixed for the process, so an id costs one clock read,
one counter step and one format.
"""

from __future__ import annotations

import datetime
import itertools
import os
import secrets
import socket
import struct
import threading
import time
from collections.abc import Sequence

from rocketmesh.model.message import Message, MessageConst

_UNIQ_KEY = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX


def local_ip() -> str:
    """This host's outward IPv4 address (no packet is sent), else 127.0.0.1.

    The address the host would send from towards the default route; on a host without one (a container on
    an internal network, a network namespace), the address it has on a network it routes to directly
    (Linux's routing table), so clients on different such hosts do not all name themselves 127.0.0.1.
    """
    for target in ("10.255.255.255", *_direct_network_targets()):
        ip = _source_address(target)
        if ip is not None:
            return ip
    try:
        ip = socket.gethostbyname(socket.gethostname())
        socket.inet_aton(ip)
        return ip
    except OSError:
        return "127.0.0.1"


def _source_address(target: str) -> str | None:
    """The address a datagram to ``target`` would leave from (connect() only routes it), None when unroutable."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 1))
            ip = s.getsockname()[0]
    except OSError:
        return None
    return ip if ip and ip != "0.0.0.0" and not ip.startswith("127.") else None


def _direct_network_targets() -> list[str]:
    """An address inside each network of ``/proc/net/route`` reached without a gateway, loopback left out
    ([] where there is no such file)."""
    try:
        with open("/proc/net/route") as f:
            rows = [line.split() for line in f.read().splitlines()[1:]]
    except OSError:
        return []
    targets = []
    for row in rows:
        if len(row) < 8 or row[0] == "lo":
            continue
        try:
            # Destination and mask are the in-memory words: their little-endian bytes are the address's.
            dest, mask = struct.pack("<I", int(row[1], 16)), struct.pack("<I", int(row[7], 16))
        except (ValueError, struct.error):
            continue
        if mask == b"\0\0\0\0":
            continue  # the default route: tried first already
        host = dest[:3] + bytes([dest[3] | 1]) if mask[3] == 0 else dest
        targets.append(socket.inet_ntoa(host))
    return targets


def _month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """Start of this month and of the next, local time, in epoch ms."""
    now = datetime.datetime.fromtimestamp(now_ms / 1000.0)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    nxt = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


class UniqueIdGenerator:
    """Makes unique ids; one per process is enough (see :func:`create_unique_id`)."""

    def __init__(self, ip: str | None = None, pid: int | None = None) -> None:
        ip_bytes = socket.inet_aton(ip or local_ip())
        pid_bytes = ((os.getpid() if pid is None else pid) & 0xFFFF).to_bytes(2, "big")
        self._prefix = (ip_bytes + pid_bytes + secrets.token_bytes(4)).hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._start_ms, self._next_start_ms = _month_bounds_ms(int(time.time() * 1000))

    def create(self) -> str:
        """A new id."""
        now = int(time.time() * 1000)
        if now >= self._next_start_ms:
            with self._lock:
                if now >= self._next_start_ms:
                    self._start_ms, self._next_start_ms = _month_bounds_ms(now)
        return f"{self._prefix}{(now - self._start_ms) & 0xFFFFFFFF:08X}{next(self._counter) & 0xFFFF:04X}"

    def create_many(self, n: int) -> list[str]:
        """``n`` new ids on one clock read (a batch's)."""
        head = self.create()
        stem = head[:-4]
        counter = self._counter
        return [head] + [f"{stem}{next(counter) & 0xFFFF:04X}" for _ in range(n - 1)]


_generator: UniqueIdGenerator | None = None


def _default_generator() -> UniqueIdGenerator:
    global _generator
    if _generator is None:
        _generator = UniqueIdGenerator()
    return _generator


def _forget_generator() -> None:
    # A forked child has another pid: it must not reuse the parent's prefix and counter.
    global _generator
    _generator = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_generator)


def create_unique_id() -> str:
    """A new unique message id from the process-wide generator."""
    return _default_generator().create()


def set_unique_id(msg: Message) -> str:
    """Give ``msg`` a UNIQ_KEY unless it has one (a resend keeps its id); returns the id."""
    props = msg.properties
    uid = props.get(_UNIQ_KEY)
    if uid is None:
        uid = props[_UNIQ_KEY] = (_generator or _default_generator()).create()
    return uid


def set_unique_ids(msgs: Sequence[Message]) -> list[str]:
    """:func:`set_unique_id` for each of ``msgs``, with one clock read for those that need a new id."""
    key = _UNIQ_KEY
    missing = [m for m in msgs if key not in m.properties]
    if missing:
        for m, uid in zip(missing, (_generator or _default_generator()).create_many(len(missing)), strict=False):
            m.properties[key] = uid
    return [m.properties[key] for m in msgs]


def ip_of_unique_id(uid: str) -> str:
    """The producer host's IPv4 address encoded in a unique id."""
    return socket.inet_ntoa(bytes.fromhex(uid[:8]))


def nearly_time_of_unique_id(uid: str, now_ms: int | None = None) -> int:
    """The epoch ms at which a unique id was made, give or take the month it falls in.

    The id holds ms since the start of a month; the month is taken to be the
    current one unless that would put the time in the future, then the one
    before (as RocketMQ's getNearlyTimeFromID does).
    """
    span = int(uid[20:28], 16)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    start, _ = _month_bounds_ms(now)
    if start + span >= now:
        prev = datetime.datetime.fromtimestamp(start / 1000.0) - datetime.timedelta(days=1)
        start, _ = _month_bounds_ms(int(prev.timestamp() * 1000))
    return start + span


def looks_like_message_id(text: str) -> bool:
    """True when ``text`` is 32 hex characters, the shape of both a unique id and an offset id."""
    if len(text) != 32:
        return False
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True
