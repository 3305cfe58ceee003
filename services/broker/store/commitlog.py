"""CommitLog: every topic's messages in one append-only log of fixed-size mapped files.

Records use RocketMQ's layout (see ``rocketmesh.model.codec``). A message that
does not fit in the rest of a file is preceded by a blank record filling the
file (TOTALSIZE = the rest, MAGICCODE = BLANK_MAGIC_CODE) and goes to the next.
Queue offsets are assigned here, under the put lock, from the commitlog's own
table of each queue's next offset (RocketMQ's topicQueueTable), so they follow
commitlog order. The commitlog knows nothing of consume queues: the store's
dispatch builds them from the records (see ``dispatch.reput``).
"""

from __future__ import annotations

import struct
import threading
import time

from rocketmesh.broker.store.config import MessageStoreConfig
from rocketmesh.broker.store.inner_message import MessageExtBatch, MessageExtBrokerInner
from rocketmesh.broker.store.mapped_file import MappedFile, MappedFileQueue
from rocketmesh.broker.store.results import AppendResult, PutMessageResult, PutMessageStatus
from rocketmesh.model.codec import (
    BATCH_ITEM_HEADER,
    BATCH_ITEM_HEADER_SIZE,
    BLANK_MAGIC_CODE,
    BLANK_RECORD,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    body_crc,
    crc32,
    encode_host,
    has_schedule_property,
)
from rocketmesh.model.message import SysFlag
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="commitlog")

_SHORT = struct.Struct(">H")
#: The header fields dispatch needs (TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, QUEUEOFFSET,
#: PHYSICALOFFSET, SYSFLAG, STORETIMESTAMP, BODYLEN), skipping the rest.
_DISPATCH_FIELDS = struct.Struct(">iiii4xqqi8x8xq8x4x8xi")
_MAX_PROPERTIES = 32767
#: ``sys_flag & 0xC`` of records that get no queue entry: prepared and rolled-back transaction messages.
NOT_DISPATCHED = (int(SysFlag.TRANSACTION_PREPARED), int(SysFlag.TRANSACTION_ROLLBACK))

#: One parsed record, as the dispatcher and recovery see it (a plain tuple: this is the hot path):
#: (topic bytes, queue id, commitlog offset, size, queue offset, store timestamp, sys flag, properties bytes)
DispatchRecord = tuple[bytes, int, int, int, int, int, int, bytes]


class ReplicaGap(ValueError):
    """Replicated bytes that do not start where this commitlog ends (``end`` says where it does)."""

    def __init__(self, end: int, remark: str) -> None:
        super().__init__(remark)
        self.end = end


class BatchRefused(ValueError):
    """A batch the store will not write, with the status to answer (nothing of it was written)."""

    def __init__(self, status: PutMessageStatus, remark: str) -> None:
        super().__init__(remark)
        self.status = status


class CommitLog:
    """Append, read and recover the commitlog. Owned by :class:`MessageStore`."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.queue = MappedFileQueue(config.store_path_commit_log, config.mapped_file_size_commit_log,
                                     preallocate=True)
        self.file_size = config.mapped_file_size_commit_log
        host, _, port = config.store_host.rpartition(":")
        self.store_host = encode_host(host or "127.0.0.1", int(port or 0))
        self._store_host_hex = self.store_host.hex().upper()
        self.put_lock = threading.Lock()
        #: (topic, queue id) -> the queue offset its next message takes (RocketMQ's topicQueueTable).
        #: Changed under the put lock; recovery fills it from the consume queues' ends.
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.begin_time_in_lock = 0.0

    # --- writing ---

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Append one message; returns where it went, or why it was refused."""
        return self.put_messages([msg])

    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        """Append messages under one lock (a batch); each gets its own queue offset.

        The status is PUT_OK: how durable the records are is the store's to wait for.
        """
        max_size = self.config.max_message_size
        prepared = []
        for m in msgs:
            body = m.body
            if len(body) > max_size:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=(
                    f"message body of {len(body)} bytes exceeds maxMessageSize {max_size}"))
            props = m.properties
            if len(props) > _MAX_PROPERTIES:
                return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, remark=(
                    f"properties of {len(props)} bytes exceed {_MAX_PROPERTIES}"))
            topic_b = m.topic.encode()
            if not 0 < len(topic_b) <= 127:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                        remark=f"topic length {len(topic_b)} not in 1..127")
            tail = b"".join((body, bytes((len(topic_b),)), topic_b, _SHORT.pack(len(props)), props))
            total = RECORD_HEADER_SIZE + len(tail)
            if total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, remark=(
                    f"record of {total} bytes does not fit in a commitlog file of {self.file_size}"))
            prepared.append((m, tail, total, crc32(body) & 0x7FFFFFFF))

        appended: list[AppendResult] = []
        host_hex = self._store_host_hex
        store_host = self.store_host
        table = self.topic_queue_table
        pack = RECORD_HEADER.pack
        file_size = self.file_size
        with self.put_lock:
            self.begin_time_in_lock = time.monotonic()
            try:
                now_ms = time.time_ns() // 1_000_000
                f = self.queue.get_last_mapped_file()
                pos = start = f.wrote_position
                chunks: list[bytes] = []
                for m, tail, total, crc in prepared:
                    if pos + total + END_FILE_MIN_BLANK_LENGTH > file_size:
                        chunks.append(BLANK_RECORD.pack(file_size - pos, BLANK_MAGIC_CODE))
                        self._write(f, start, chunks, file_size)
                        f = self.queue.get_last_mapped_file()
                        pos = start = 0
                        chunks = []
                    phys = f.file_from_offset + pos
                    sys_flag = m.sys_flag
                    if (sys_flag & 0xC) in NOT_DISPATCHED:
                        queue_offset = 0
                    else:
                        key = (m.topic, m.queue_id)
                        queue_offset = table.get(key, 0)
                        table[key] = queue_offset + 1
                    chunks.append(pack(total, MESSAGE_MAGIC_CODE, crc, m.queue_id, m.flag, queue_offset,
                                       phys, sys_flag, m.born_timestamp, m.born_host, now_ms, store_host,
                                       m.reconsume_times, m.prepared_transaction_offset, len(m.body)))
                    chunks.append(tail)
                    pos += total
                    appended.append(AppendResult(phys, total, f"{host_hex}{phys:016X}", now_ms, queue_offset))
                self._write(f, start, chunks, pos)
                f.store_timestamp = now_ms
            finally:
                # Also when the next file cannot be made (OSError): a stale start would read as a put
                # lock held for ever, and every later put would be refused OS_PAGECACHE_BUSY.
                self.begin_time_in_lock = 0.0
        return PutMessageResult(PutMessageStatus.PUT_OK, appended)

    def put_batch(self, batch: MessageExtBatch) -> PutMessageResult:
        """Append a batch's items as consecutive records of its queue, under one lock, into one file.

        Each item becomes a record straight from the producer's bytes: no
        message object per item. One bad item refuses the whole batch before
        anything is written. The result is one :class:`AppendResult` for the
        batch (RocketMQ's answer to a batch put).
        """
        topic = batch.topic
        topic_b = topic.encode()
        if not 0 < len(topic_b) <= 127:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark=f"topic length {len(topic_b)} not in 1..127")
        if (batch.sys_flag & 0xC) in NOT_DISPATCHED:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    remark="a batch may not hold transactional messages")
        topic_part = bytes((len(topic_b),)) + topic_b
        key = (topic, batch.queue_id)
        file_size = self.file_size
        with self.put_lock:
            self.begin_time_in_lock = time.monotonic()
            try:
                now_ms = time.time_ns() // 1_000_000
                f = self.queue.get_last_mapped_file()
                pos = f.wrote_position
                first_queue_offset = self.topic_queue_table.get(key, 0)
                try:
                    data, phys_offsets = self._encode_batch(batch, topic_part, f.file_from_offset + pos,
                                                                     first_queue_offset, now_ms)
                    size = len(data)
                    if pos + size + END_FILE_MIN_BLANK_LENGTH > file_size:
                        if size + END_FILE_MIN_BLANK_LENGTH > file_size:
                            raise BatchRefused(PutMessageStatus.MESSAGE_ILLEGAL, (
                                f"the batch's records take {size} bytes, more than a commitlog file of {file_size}"))
                        # The batch goes whole into the next file, after a blank record ending this one.
                        self._write(f, pos, [BLANK_RECORD.pack(file_size - pos, BLANK_MAGIC_CODE)], file_size)
                        f = self.queue.get_last_mapped_file()
                        pos = 0
                        data, phys_offsets = self._encode_batch(batch, topic_part, f.file_from_offset,
                                                                         first_queue_offset, now_ms)
                except BatchRefused as exc:
                    return PutMessageResult(exc.status, remark=str(exc))
                self.topic_queue_table[key] = first_queue_offset + len(phys_offsets)
                self._write(f, pos, [data], pos + size)
                f.store_timestamp = now_ms
                phys = f.file_from_offset + pos
            finally:
                self.begin_time_in_lock = 0.0
        host_hex = self._store_host_hex
        ids = ",".join([f"{host_hex}{p:016X}" for p in phys_offsets])
        return PutMessageResult(PutMessageStatus.PUT_OK, [AppendResult(phys, size, ids, now_ms, first_queue_offset,
                                                      len(phys_offsets))])

    def _encode_batch(self, batch: MessageExtBatch, topic_part: bytes, phys: int, queue_offset: int,
                      now_ms: int) -> tuple[bytes, list[int]]:
        """The commitlog records of a batch's items, the first at ``phys`` with ``queue_offset``, and
        their commitlog offsets. BatchRefused names the first bad item."""
        raw = batch.body
        view = memoryview(raw)
        n = len(raw)
        max_size = self.config.max_message_size
        # A record is its item plus the record header's extra fields and the topic.
        extra = RECORD_HEADER_SIZE - BATCH_ITEM_HEADER_SIZE + len(topic_part)
        pack = RECORD_HEADER.pack
        unpack_item = BATCH_ITEM_HEADER.unpack_from
        queue_id, sys_flag, born = batch.queue_id, batch.sys_flag, batch.born_timestamp
        born_host, reconsume, store_host = batch.born_host, batch.reconsume_times, self.store_host
        chunks: list = []
        offsets: list[int] = []
        pos = 0
        try:
            while pos < n:
                total, _magic, _crc, flag, body_len = unpack_item(raw, pos)
                p = pos + BATCH_ITEM_HEADER_SIZE
                q = p + body_len
                end = pos + total
                if not 0 < body_len <= max_size or end > n or q + 2 > end or end - q - 2 > _MAX_PROPERTIES \
                        or q + 2 + ((raw[q] << 8) | raw[q + 1]) != end:
                    raise BatchRefused(*_bad_item(raw, pos, max_size))
                props = raw[q + 2:end]
                if props and (b"DELAY\x01" in props or b"TIMER_DEL" in props) and has_schedule_property(props):
                    raise BatchRefused(PutMessageStatus.MESSAGE_ILLEGAL,
                                       "a batch may not hold delayed or timer messages")
                size = total + extra
                chunks += (pack(size, MESSAGE_MAGIC_CODE, crc32(view[p:q]) & 0x7FFFFFFF, queue_id, flag,
                                queue_offset, phys, sys_flag, born, born_host, now_ms, store_host, reconsume, 0,
                                body_len),
                           view[p:q], topic_part, view[q:end])
                offsets.append(phys)
                queue_offset += 1
                phys += size
                pos = end
        except struct.error:
            raise BatchRefused(PutMessageStatus.MESSAGE_ILLEGAL,
                               f"the batch body does not decode: truncated item at byte {pos}") from None
        if not offsets:
            raise BatchRefused(PutMessageStatus.MESSAGE_ILLEGAL, "the batch holds no message")
        return b"".join(chunks), offsets

    @staticmethod
    def _write(f: MappedFile, start: int, chunks: list[bytes], end: int) -> None:
        """Copy records into the mapping at ``start`` (one copy per batch), then publish the new end.

        ``end`` may pass the copied bytes: a blank record's 8 bytes cover the rest
        of the file, which is still zero.
        """
        data = b"".join(chunks)
        f.mm[start:start + len(data)] = data
        f.wrote_position = end

    @property
    def lock_held_ms(self) -> float:
        """How long the current holder has had the put lock (0 when free): the OS_PAGECACHE_BUSY signal."""
        t = self.begin_time_in_lock
        return (time.monotonic() - t) * 1000 if t else 0.0

    # --- replication (a slave appends what its master wrote) ---

    def append_replica(self, offset: int, data: bytes) -> int:
        """Write ``data``, bytes of the master's commitlog from ``offset``, at the same offset here.

        ``offset`` must be where this log ends (ReplicaGap otherwise, naming
        where it does end); an empty log takes any file start. The bytes must
        lie within one file, as the master sends them, and may end inside a
        record (the rest comes with the next chunk). The records keep the queue
        offsets the master gave them. Returns the new end.
        """
        size = self.file_size
        with self.put_lock:
            end = self.max_offset
            empty = not self.queue.files
            if (offset != end and not empty) or (empty and offset % size):
                raise ReplicaGap(end, f"the slave's commitlog ends at {end}, the chunk starts at {offset}")
            f = self.queue.get_last_mapped_file(offset)
            rel = offset - f.file_from_offset
            if rel + len(data) > size:
                raise ReplicaGap(end, f"a chunk of {len(data)} bytes at {offset} crosses a commitlog file end")
            self._write(f, rel, [data], rel + len(data))
            if empty:
                self.queue.flushed_where = offset
            return offset + len(data)

    # --- reading ---

    def read_span(self, offset: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` written bytes from ``offset``, within the file holding it (what a
        master sends its slave); b"" when nothing is written there yet or it is deleted."""
        f = self.queue.find_file(offset)
        if f is None:
            return b""
        rel = offset - f.file_from_offset
        return f.read(rel, max(0, min(f.wrote_position, rel + max_bytes) - rel))

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    def read(self, offset: int, size: int) -> bytes:
        """``size`` bytes of the record at ``offset``, or b"" when deleted or not written."""
        f = self.queue.find_file(offset)
        if f is None:
            return b""
        return f.read(offset - f.file_from_offset, size)

    def read_record(self, offset: int) -> bytes:
        """The whole record starting at ``offset`` (size read from its TOTALSIZE), or b""."""
        f = self.queue.find_file(offset)
        if f is None:
            return b""
        rel = offset - f.file_from_offset
        if rel + 8 > f.wrote_position:
            return b""
        total, magic = BLANK_RECORD.unpack_from(f.mm, rel)
        if magic != MESSAGE_MAGIC_CODE or total <= 0:
            return b""
        return f.read(rel, total)

    def store_timestamp_at(self, offset: int) -> int:
        """STORETIMESTAMP of the record at ``offset``, -1 if it is gone."""
        f = self.queue.find_file(offset)
        if f is None:
            return -1
        rel = offset - f.file_from_offset
        if rel + RECORD_HEADER_SIZE > f.wrote_position:
            return -1
        return struct.unpack_from(">q", f.mm, rel + 56)[0]

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    def read_records(self, start: int, check_crc: bool = False,
                     max_records: int = 4096) -> tuple[list[DispatchRecord], int, bool]:
        """Parse records from ``start`` (a record boundary) within one file.

        Returns (records, next offset, clean): ``next offset`` is where the next
        call should start (past a blank record, that is the next file); ``clean``
        is False when a record did not hold together (bad magic, size, offset or,
        with ``check_crc``, body CRC) - recovery cuts the log there.
        """
        f = self.queue.find_file(start)
        if f is None:
            return [], start, True
        mm = f.mm
        base = f.file_from_offset
        rel = start - base
        limit = f.wrote_position
        file_size = self.file_size
        unpack = _DISPATCH_FIELDS.unpack_from
        short = _SHORT.unpack_from
        out: list[DispatchRecord] = []
        append = out.append
        clean = True
        while rel + 8 <= limit and len(out) < max_records:
            total, magic, crc, queue_id, queue_offset, phys, sys_flag, store_ts, body_len = \
                unpack(mm, rel) if rel + RECORD_HEADER_SIZE <= limit else (
                    *BLANK_RECORD.unpack_from(mm, rel), 0, 0, 0, 0, 0, 0, 0)
            if magic == BLANK_MAGIC_CODE:
                if rel + total != file_size:
                    clean = False
                    break
                rel = file_size
                break
            end = rel + total
            if magic != MESSAGE_MAGIC_CODE or total < RECORD_HEADER_SIZE + 3 or end > limit \
                    or phys != base + rel or body_len < 0:
                clean = False
                break
            p = rel + RECORD_HEADER_SIZE + body_len
            if p + 3 > end:
                clean = False
                break
            if check_crc and body_crc(mm[rel + RECORD_HEADER_SIZE:p]) != crc:
                log.warning("commitlog_crc_mismatch", offset=base + rel)
                clean = False
                break
            topic_end = p + 1 + mm[p]
            (props_len,) = short(mm, topic_end)
            if topic_end + 2 + props_len != end:
                clean = False
                break
            append((mm[p + 1:topic_end], queue_id, phys, total, queue_offset, store_ts, sys_flag,
                    mm[topic_end + 2:end]))
            rel = end
        return out, base + rel, clean

    # --- recovery ---

    def recover(self, start: int, check_crc: bool) -> int:
        """Walk from ``start`` (a record boundary), truncate after the last good record; returns the
        recovered end (the store then rebuilds consume queues and index up to it)."""
        self.queue.load()
        files = self.queue.files
        if not files:
            return 0
        start = max(start, files[0].file_from_offset)
        last_file_end = files[-1].file_from_offset + self.file_size
        start = min(start, last_file_end)
        end = start
        while True:
            _records, nxt, clean = self.read_records(end, check_crc=check_crc)
            progressed = nxt != end
            end = nxt
            if not clean or not progressed:
                break
        if end < last_file_end:
            self.queue.truncate_dirty_files(end)
        if self.queue.files:
            last = self.queue.files[-1]
            last.wrote_position = last.flushed_position = min(self.file_size, end - last.file_from_offset)
        self.queue.flushed_where = end
        return end

    def shutdown(self) -> None:
        self.queue.flush_all()
        self.queue.shutdown()


def _bad_item(raw: bytes, pos: int, max_size: int) -> tuple[PutMessageStatus, str]:
    """Why the batch item at ``pos`` was refused (the slow path of :meth:`CommitLog._encode_batch`)."""
    total, _magic, _crc, _flag, body_len = BATCH_ITEM_HEADER.unpack_from(raw, pos)
    if body_len == 0:
        return PutMessageStatus.MESSAGE_ILLEGAL, f"the message body of the batch item at byte {pos} is empty"
    if body_len > max_size:
        return PutMessageStatus.MESSAGE_ILLEGAL, (
            f"the message body size {body_len} of the batch item at byte {pos} exceeds maxMessageSize {max_size}")
    q = pos + BATCH_ITEM_HEADER_SIZE + body_len
    if 0 < body_len and q + 2 <= len(raw):
        props_len = (raw[q] << 8) | raw[q + 1]
        if props_len > _MAX_PROPERTIES and q + 2 + props_len == pos + total <= len(raw):
            return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, (
                f"properties of {props_len} bytes exceed {_MAX_PROPERTIES} in the batch item at byte {pos}")
    return PutMessageStatus.MESSAGE_ILLEGAL, f"the batch body does not decode: bad item at byte {pos}"
