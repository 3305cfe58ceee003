"""Byte layouts of messages: the commitlog record, properties, message ids, batches.

The commitlog record is RocketMQ 4.x's (big-endian)::

    TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | QUEUEID 4 | FLAG 4 | QUEUEOFFSET 8 |
    PHYSICALOFFSET 8 | SYSFLAG 4 | BORNTIMESTAMP 8 | BORNHOST 8 (ipv4 + port) |
    STORETIMESTAMP 8 | STOREHOST 8 | RECONSUMETIMES 4 | PREPARED_TX_OFFSET 8 |
    BODYLEN 4 | BODY | TOPICLEN 1 | TOPIC | PROPLEN 2 | PROPERTIES

The broker writes it; a pull response carries such records back to consumers,
so both sides decode it with this module.

A body whose SYSFLAG has bit 0 (``SysFlag.COMPRESSED``) is a zlib stream, as
RocketMQ's producers send a single message's body over
``compressMsgBodyOverHowmuch``. The rule for compressed bodies: the broker
stores them as sent and never inflates them, so every copy it makes of a stored
record (retry, dead letter, delay or timer delivery, transaction commit, check
copies) keeps the compressed body and its bit; only a reader that hands the
message to an application (consumer, admin view and query, transaction check,
Spark) inflates it, once, here.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from functools import lru_cache

try:
    # zlib-ng comes with the server extra: the broker checksums every body it stores.
    from zlib_ng.zlib_ng import crc32
except ImportError:  # an application's SDK: the same checksum from the standard library
    from zlib import crc32

from rocketmesh.model.fields import (  # the fields a message reads itself; importable from here too
    NAME_VALUE_SEPARATOR as NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR as PROPERTY_SEPARATOR,
    CorruptRecord,
    decode_host,
    decode_message_id as decode_message_id,
    decode_properties,
    encode_host as encode_host,
    encode_host_text as encode_host_text,
    encode_message_id,
    encode_properties,
)
from rocketmesh.model.message import Message, MessageExt, SysFlag

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194

#: Fixed part of a record, up to and including BODYLEN.
RECORD_HEADER = struct.Struct(">iiiiiqqiq8sq8siqi")
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 88
#: Offsets of fields inside a record, for readers that need one field.
POS_QUEUE_ID = 12
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_SYSFLAG = 36
POS_STORE_TIMESTAMP = 56
#: A blank record ends a mapped file: TOTALSIZE + MAGICCODE.
BLANK_RECORD = struct.Struct(">ii")
END_FILE_MIN_BLANK_LENGTH = 8

_SHORT = struct.Struct(">H")
_COMPRESSED = int(SysFlag.COMPRESSED)


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ's body CRC: CRC32 masked to a non-negative Java int.

    zlib-ng's CRC32 (the same checksum as ``zlib.crc32``) runs several times
    faster than the zlib CPython links on the 1 KiB bodies the put path checksums;
    without zlib-ng (an SDK installed without the server extra) it is ``zlib.crc32``.
    """
    return crc32(body) & 0x7FFFFFFF


def compress_body(body: bytes, level: int) -> bytes:
    """A message body compressed as RocketMQ's producer does it (java.util.zip's Deflater at ``level``): a
    zlib stream, header and Adler-32 included, which every RocketMQ client inflates."""
    return zlib.compress(body, level)


def _inflate_body(body: bytes, pos: int, phys: int) -> bytes:
    """The original bytes of the compressed body of the record at ``pos`` (commitlog offset ``phys``).

    Raises :class:`CorruptRecord` when the body is no zlib stream: the flag says compressed, the bytes
    do not agree.
    """
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise CorruptRecord(f"the body of the record at {pos} (commitlog offset {phys}) is flagged compressed "
                            f"(sysFlag bit 0) but is not a zlib stream: {exc}") from None


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    """Total size of a commitlog record with these variable parts."""
    return RECORD_HEADER_SIZE + body_len + 1 + topic_len + 2 + props_len


_SCHEDULE_KEYS = (b"DELAY\x01", b"TIMER_DELIVER_MS\x01", b"TIMER_DELAY_MS\x01")


def has_schedule_property(raw: bytes) -> bool:
    """Do these wire-form properties ask for a delay level or a delivery time?

    Only a name at a property boundary counts, not the same bytes inside
    another name or a value. A hot path filters first with
    ``b"DELAY\x01" in raw or b"TIMER_DEL" in raw`` and calls this on a hit.
    """
    for key in _SCHEDULE_KEYS:
        i = raw.find(key)
        while i >= 0:
            if i == 0 or raw[i - 1] == 2:
                return True
            i = raw.find(key, i + 1)
    return False


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (a signed 32-bit int), over UTF-16 code units."""
    h = 0
    for unit in _utf16_units(s):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _utf16_units(s: str) -> Iterator[int]:
    for ch in s:
        c = ord(ch)
        if c < 0x10000:
            yield c
        else:
            c -= 0x10000
            yield 0xD800 + (c >> 10)
            yield 0xDC00 + (c & 0x3FF)


@lru_cache(maxsize=65536)
def tags_hash_code(tags: str | None) -> int:
    """The consume-queue tag code of a tag: Java's String.hashCode, 0 for none."""
    if not tags:
        return 0
    return java_string_hash(tags)


def decode_record(buf: bytes | memoryview, pos: int = 0, check_crc: bool = False,
                  inflate: bool = True) -> MessageExt:
    """Decode one commitlog record starting at ``pos``.

    A compressed body is inflated (``sys_flag`` keeps the COMPRESSED bit, ``body_crc`` and ``store_size``
    stay those of the stored record); ``inflate=False`` keeps the body as stored, for the broker, which
    copies stored records as they are (see the module docstring).
    Raises :class:`CorruptRecord` if the magic code, sizes, (when asked) the body CRC or a compressed
    body are wrong.
    """
    try:
        (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_host,
         store_ts, store_host, reconsume, prepared, body_len) = RECORD_HEADER.unpack_from(buf, pos)
    except struct.error as exc:
        raise CorruptRecord(f"truncated record header at {pos}") from exc
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptRecord(f"bad magic code {magic:#x} at {pos}")
    p = pos + RECORD_HEADER_SIZE
    end = pos + total
    if body_len < 0 or p + body_len + 3 > end or end > len(buf):
        raise CorruptRecord(f"bad body length {body_len} in record of {total} bytes at {pos}")
    body = bytes(buf[p:p + body_len])
    if check_crc and body_crc(body) != crc:
        raise CorruptRecord(f"body CRC mismatch at {pos}")
    if sys_flag & _COMPRESSED and inflate:
        body = _inflate_body(body, pos, phys)
    p += body_len
    topic_len = buf[p]
    if p + 1 + topic_len + 2 > end:
        raise CorruptRecord(f"topic length {topic_len} runs past the record of {total} bytes at {pos}")
    topic = _decode_topic(bytes(buf[p + 1:p + 1 + topic_len]), pos)
    p += 1 + topic_len
    (props_len,) = struct.unpack_from(">H", buf, p)
    if p + 2 + props_len != end:
        raise CorruptRecord(f"record at {pos} declares {total} bytes but holds {p + 2 + props_len - pos}")
    props = decode_properties(buf[p + 2:p + 2 + props_len])
    return MessageExt(
        topic=topic, body=body, properties=props, flag=flag, queue_id=queue_id,
        queue_offset=queue_offset, commitlog_offset=phys, store_size=total, sys_flag=sys_flag,
        born_timestamp=born_ts, born_host=decode_host(born_host), store_timestamp=store_ts,
        store_host=decode_host(store_host), reconsume_times=reconsume,
        prepared_transaction_offset=prepared, body_crc=crc,
        msg_id=encode_message_id(store_host, phys),
    )


def _decode_topic(raw: bytes, pos: int) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise CorruptRecord(f"the topic of the record at {pos} is not UTF-8") from None


def decode_records(buf: bytes | memoryview, extra_properties: dict[str, str] | None = None) -> list[MessageExt]:
    """Decode back-to-back records, as a pull response carries them; ``extra_properties`` are added to
    each message's own (the pull's MIN_OFFSET and MAX_OFFSET).

    The consumer's hot path: one header unpack per record, hosts decoded once
    per distinct host, properties left raw until first used, compressed bodies inflated
    (an uncompressed record pays one bit test). Raises CorruptRecord like
    :func:`decode_record` (the body CRC is not checked here).
    """
    out: list[MessageExt] = []
    append = out.append
    unpack = RECORD_HEADER.unpack_from
    header_size = RECORD_HEADER_SIZE
    hosts: dict[bytes, str] = {}
    magic_ok = MESSAGE_MAGIC_CODE
    compressed = _COMPRESSED
    data = bytes(buf)
    extra = encode_properties(extra_properties) if extra_properties else b""
    pos = 0
    n = len(data)
    # A pull's records are nearly always of one topic and from few hosts: decode each once.
    topic_raw = b""
    topic = ""
    while pos + header_size <= n:
        (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_host,
         store_ts, store_host, reconsume, prepared, body_len) = unpack(data, pos)
        end = pos + total
        p = pos + header_size
        if magic != magic_ok or body_len < 0 or p + body_len + 3 > end or end > n:
            raise CorruptRecord(f"bad record at {pos}: magic {magic:#x}, size {total}, body {body_len}")
        body = data[p:p + body_len]
        if sys_flag & compressed:
            body = _inflate_body(body, pos, phys)
        p += body_len
        topic_len = data[p]
        if p + 1 + topic_len + 2 > end:
            raise CorruptRecord(f"topic length {topic_len} runs past the record of {total} bytes at {pos}")
        if topic_len != len(topic_raw) or not data.startswith(topic_raw, p + 1):
            topic_raw = data[p + 1:p + 1 + topic_len]
            topic = _decode_topic(topic_raw, pos)
        p += 1 + topic_len
        props_len = (data[p] << 8) | data[p + 1]
        p += 2
        if p + props_len != end:
            raise CorruptRecord(f"record at {pos} declares {total} bytes but holds {p + props_len - pos}")
        born = hosts.get(born_host)
        if born is None:
            born = hosts[born_host] = decode_host(born_host)
        stored = hosts.get(store_host)
        if stored is None:
            stored = hosts[store_host] = decode_host(store_host)
        append(MessageExt(topic, body, None, flag, queue_id, queue_offset, phys, total, sys_flag, born_ts,
                          born, store_ts, stored, reconsume, prepared, crc,
                          None, (data[p:end], extra) if extra else data[p:end]))
        pos = end
    return out


# --- Batches (SEND_BATCH_MESSAGE body), RocketMQ's MessageDecoder.encodeMessages layout ---
#   TOTALSIZE 4 | MAGICCODE 4 | BODYCRC 4 | FLAG 4 | BODYLEN 4 | BODY | PROPLEN 2 | PROPERTIES
BATCH_ITEM_HEADER = struct.Struct(">iiiii")
BATCH_ITEM_HEADER_SIZE = BATCH_ITEM_HEADER.size  # 20


def encode_batch_item(m: Message) -> bytes:
    """One message of a batch body (a batch body is its items one after another).

    MAGICCODE and BODYCRC are 0, as RocketMQ's client writes them: the broker
    computes the CRC of what it stores.
    """
    return encode_batch((m,))


def encode_batch(messages: Sequence[Message]) -> bytes:
    """Encode messages of one topic into a batch body, each item as :func:`encode_batch_item` describes."""
    pack_item = BATCH_ITEM_HEADER.pack
    pack_short = _SHORT.pack
    parts: list[bytes] = []
    for m in messages:
        props = encode_properties(m.properties)
        body = m.body
        parts += (pack_item(BATCH_ITEM_HEADER_SIZE + 2 + len(body) + len(props), 0, 0, m.flag, len(body)), body,
                  pack_short(len(props)), props)
    return b"".join(parts)


def decode_batch(topic: str, buf: bytes | memoryview) -> list[Message]:
    """Decode a batch body; raises CorruptRecord when it does not parse."""
    out = []
    pos = 0
    n = len(buf)
    while pos < n:
        try:
            total, _magic, _crc, flag, body_len = BATCH_ITEM_HEADER.unpack_from(buf, pos)
            p = pos + BATCH_ITEM_HEADER.size
            body = bytes(buf[p:p + body_len])
            p += body_len
            (props_len,) = struct.unpack_from(">H", buf, p)
            props = decode_properties(buf[p + 2:p + 2 + props_len])
        except (struct.error, UnicodeDecodeError) as exc:
            raise CorruptRecord(f"bad batch item at {pos}") from exc
        if total <= 0 or pos + total > n or len(body) != body_len or p + 2 + props_len != pos + total:
            raise CorruptRecord(f"bad batch item at {pos}")
        msg = Message(topic, body, properties=props, flag=flag)
        out.append(msg)
        pos += total
    return out

