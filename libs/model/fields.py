"""The byte forms of the fields a message reads itself: its properties (``name\x01value\x02``) and its
offset message id (store host and commitlog offset). The commitlog record around them is codec.py's."""

from __future__ import annotations

import socket
import struct


class CorruptRecord(ValueError):
    """A record whose bytes do not hold together (bad magic, size or CRC)."""


NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

_HOST = struct.Struct(">4si")
_MSG_ID = struct.Struct(">4siq")


def encode_properties(props: dict[str, str]) -> bytes:
    """``name\\x01value\\x02`` for each property, as RocketMQ's messageProperties2String."""
    if not props:
        return b""
    return "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode()


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    """Inverse of :func:`encode_properties`; tolerant of a missing final separator.

    A name ends at its first ``\x01``, so a value may hold more of them; an item without one is
    dropped, as RocketMQ drops it. Raises CorruptRecord for
    bytes that are not UTF-8 (they came from a damaged record or a hostile peer, never from
    :func:`encode_properties`).
    """
    if not raw:
        return {}
    try:
        text = bytes(raw).decode()
    except UnicodeDecodeError as exc:
        raise CorruptRecord(f"properties are not UTF-8: {exc}") from None
    out: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if name and sep:  # an empty name (a stray separator) or a name without a value names nothing
            out[name] = value
    return out


def encode_host(ip: str, port: int) -> bytes:
    """8-byte host field: IPv4 address then port."""
    return _HOST.pack(socket.inet_aton(ip), port)


def encode_host_text(text: str) -> bytes:
    """The 8-byte host field of an ``ip:port`` text (as a read-back message shows it); 127.0.0.1:0 if unreadable."""
    ip, _, port = text.rpartition(":")
    try:
        return encode_host(ip or "127.0.0.1", int(port or 0))
    except (OSError, ValueError, struct.error):
        return encode_host("127.0.0.1", 0)


def decode_host(raw: bytes) -> str:
    ip, port = _HOST.unpack(raw)
    return f"{socket.inet_ntoa(ip)}:{port}"


def encode_message_id(host: bytes, commitlog_offset: int) -> str:
    """RocketMQ's offset message id: store host (ip, port) + commitlog offset, 32 hex chars."""
    return (host + commitlog_offset.to_bytes(8, "big", signed=True)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[str, int, int]:
    """Split an offset message id into (store ip, store port, commitlog offset).

    Raises ValueError for anything that is not 32 hex characters.
    """
    if len(msg_id) != 32:
        raise ValueError(f"message id must be 32 hex characters, got {len(msg_id)}: {msg_id!r}")
    ip, port, offset = _MSG_ID.unpack(bytes.fromhex(msg_id))
    return socket.inet_ntoa(ip), port, offset
