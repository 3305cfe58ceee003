"""Commitlog records (a pull's bytes) straight into Arrow record batches, column by column.

A pull answer is the broker's records back to back (message_codec's layout). The
only per-record Python work is following the TOTALSIZE chain to find where each
record starts; every column is then cut out of the bytes with numpy gathers and
Arrow compute, so no Python object is made per row. Bodies and properties are
copied once into contiguous Arrow buffers; fixed fields are gathered by position.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocketmesh.model.codec import RECORD_HEADER_SIZE, decode_properties
from rocketmesh.model.message import MessageConst
from rocketmesh.spark.schema import ARROW_SCHEMA

_SIZE = struct.Struct(">i")
# Field positions in a record (message_codec.RECORD_HEADER).
_POS_QUEUE_OFFSET = 20
_POS_PHYS = 28
_POS_BORN_TS = 40
_POS_STORE_TS = 56
_POS_STORE_HOST = 64
_POS_RECONSUME = 72
_POS_BODY_LEN = 84
_HEX = np.frombuffer(b"".join(b"%02X" % i for i in range(256)), dtype=np.uint8).reshape(256, 2)
_MAP_TYPE = ARROW_SCHEMA.field("properties").type
_TS_TYPE = ARROW_SCHEMA.field("store_timestamp").type


def record_starts(data: bytes) -> np.ndarray:
    """Where each record of ``data`` starts (the one loop over records: TOTALSIZE links them)."""
    starts: list[int] = []
    append = starts.append
    size = _SIZE.unpack_from
    pos, n = 0, len(data)
    while pos + RECORD_HEADER_SIZE <= n:
        append(pos)
        total = size(data, pos)[0]
        if total <= 0:
            raise ValueError(f"bad record size {total} at {pos}")
        pos += total
    return np.array(starts, dtype=np.int64)


def _gather(u8: np.ndarray, starts: np.ndarray, pos: int, width: int, dtype: str) -> np.ndarray:
    """The big-endian field of ``width`` bytes at ``pos`` of each record, as native integers."""
    idx = (starts + pos)[:, None] + np.arange(width)
    return u8[idx].view(dtype).ravel().astype(dtype.replace(">", "<"))


def _cut(data: pa.Buffer, begin: np.ndarray, end: np.ndarray, type_: pa.DataType) -> pa.Array:
    """``data[begin[i]:end[i]]`` for each i as one Arrow array with its own contiguous buffer.

    The ranges are in order and do not overlap, so [b0, e0, b1, e1, ...] is a valid offsets array over
    ``data`` itself: a zero-copy array whose even elements are the ranges (the odd ones the bytes
    between). Arrow's ``take`` of the even elements copies them out in C++, with no Python per row.
    """
    n = len(begin)
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = begin
    bounds[1::2] = end
    interleaved = pa.Array.from_buffers(type_, 2 * n - 1, [None, pa.py_buffer(bounds), data])
    return interleaved.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))


_BINARY = pa.binary()


def _binary(offsets: np.ndarray, data: bytes, type_: pa.DataType = _BINARY) -> pa.Array:
    return pa.Array.from_buffers(type_, len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


@dataclass(frozen=True)
class _Properties:
    """The properties column, and its flattened entries for look-ups."""

    map: pa.Array
    keys: pa.Array
    values: pa.Array
    row_of_entry: np.ndarray

    def lookup(self, name: str) -> pa.Array:
        """The value of property ``name`` of each row (null where absent); much cheaper than map_lookup."""
        hits = np.flatnonzero(pc.equal(self.keys, name).to_numpy(zero_copy_only=False))
        where = np.full(len(self.map), -1, dtype=np.int64)
        where[self.row_of_entry[hits]] = hits
        return self.values.take(pa.array(where, mask=where < 0))


def _properties_map(props: pa.Array) -> _Properties:
    """``name\x01value\x02...`` strings as a map<string, string> column, without a loop over rows."""
    counts = pc.count_substring(props, "\x01").to_numpy(zero_copy_only=False).astype(np.int32)
    offsets = np.zeros(len(props) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    items = pc.split_pattern(props, "\x02").flatten()
    items = items.filter(pc.not_equal(pc.binary_length(items), 0))
    if len(items) != offsets[-1]:
        return _properties_map_slow(props)
    pairs = pc.split_pattern(items, "\x01", max_splits=1)
    keys = pc.list_element(pairs, 0)
    values = pc.list_element(pairs, 1)
    column = pa.MapArray.from_arrays(pa.array(offsets), keys, values, type=_MAP_TYPE)
    return _Properties(column, keys, values, np.repeat(np.arange(len(props)), counts))


def _properties_map_slow(props: pa.Array) -> _Properties:
    """The same for properties that are not well formed (an item without a value): one row at a time."""
    rows = [list(decode_properties(p.encode()).items()) for p in props.to_pylist()]
    column = pa.array(rows, type=_MAP_TYPE)
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    return _Properties(column, column.keys, column.items, np.repeat(np.arange(len(rows)), counts))


def records_to_batch(data: bytes, topic: str, broker: str, queue_id: int,
                     tags: Collection[str] | None = None) -> pa.RecordBatch:
    """The records in ``data`` (all of ``topic``'s queue ``queue_id`` on ``broker``) as one batch of
    :data:`ARROW_SCHEMA`; with ``tags``, only the records whose tag is one of them."""
    starts = record_starts(data)
    n = len(starts)
    u8 = np.frombuffer(data, dtype=np.uint8)
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    totals = _gather(u8, starts, 0, 4, ">i4").astype(np.int64)
    body_len = _gather(u8, starts, _POS_BODY_LEN, 4, ">i4").astype(np.int64)
    body_begin = starts + RECORD_HEADER_SIZE
    body_end = body_begin + body_len
    topic_len = u8[body_end].astype(np.int64)
    props_begin = body_end + 1 + topic_len + 2
    props_end = starts + totals

    buf = pa.py_buffer(data)
    bodies = _cut(buf, body_begin, body_end, pa.binary())
    props = _properties_map(_cut(buf, props_begin, props_end, pa.string()))
    keys = props.lookup(MessageConst.KEYS)
    tag_col = props.lookup(MessageConst.TAGS)
    uniq = props.lookup(MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    # The offset message id: hex of store host (8 bytes) + commitlog offset (8 bytes).
    id_bytes = np.concatenate([u8[(starts + _POS_STORE_HOST)[:, None] + np.arange(8)],
                               u8[(starts + _POS_PHYS)[:, None] + np.arange(8)]], axis=1)
    hexed = _HEX[id_bytes].reshape(n, 32)
    id_offsets = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    offset_ids = _binary(id_offsets, hexed.tobytes(), pa.string())

    born = _gather(u8, starts, _POS_BORN_TS, 8, ">i8") * 1000
    stored = _gather(u8, starts, _POS_STORE_TS, 8, ">i8") * 1000
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.repeat(pa.scalar(queue_id, pa.int32()), n),
        pa.array(_gather(u8, starts, _POS_QUEUE_OFFSET, 8, ">i8"), pa.int64()),
        pc.coalesce(uniq, offset_ids),
        keys,
        tag_col,
        props.map,
        bodies,
        pa.array(born, pa.int64()).cast(_TS_TYPE),
        pa.array(stored, pa.int64()).cast(_TS_TYPE),
        pa.array(_gather(u8, starts, _POS_RECONSUME, 4, ">i4"), pa.int32()),
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    if tags:
        batch = batch.filter(pc.fill_null(pc.is_in(tag_col, pa.array(list(tags), pa.string())), False))
    return batch
