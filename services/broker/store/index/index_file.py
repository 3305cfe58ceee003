"""IndexFile: a hash index from ``topic#key`` to commitlog offsets, RocketMQ's layout.

One file::

    header (40): beginTimestamp 8 | endTimestamp 8 | beginPhyOffset 8 | endPhyOffset 8 |
                 hashSlotCount 4 | indexCount 4
    slots:       hashSlotNum x 4   (number of the newest entry for that slot, 0 = empty)
    entries:     indexNum x 20     keyHash 4 | phyOffset 8 | timeDiff 4 (s since begin) | prevIndex 4

Entry number 0 is never used, so 0 in a slot or a prevIndex means "none".
Files are named by their creation time (yyyyMMddHHmmssSSS) under ``index/``.

The key hash is CRC32 of the UTF-8 key masked to 31 bits; RocketMQ uses Java's
String.hashCode there. The layout and the slot arithmetic are the same; the
choice keeps per-message indexing cheap in Python. Readers compare the keys of
the messages found, so a hash collision never returns a wrong message.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
import zlib
from datetime import datetime

from rocketmesh.broker.store.mapped_file import release_mapping, reserve, unlink_quietly
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="index")

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT = struct.Struct(">i")
SLOT_SIZE = 4
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
#: Entries whose blocks are reserved ahead of the one being written (1 MiB of them).
RESERVE_AHEAD_ENTRIES = 1024 * 1024 // ENTRY_SIZE


def key_hash(key: bytes) -> int:
    return zlib.crc32(key) & 0x7FFFFFFF


class IndexFile:
    """One mapped index file."""

    def __init__(self, path: str, hash_slot_num: int, index_num: int,
                 end_phy_offset: int = 0, end_timestamp: int = 0) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = HEADER_SIZE + hash_slot_num * SLOT_SIZE + index_num * ENTRY_SIZE
        exists = os.path.exists(path)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not exists or os.fstat(self.fd).st_size != self.file_size:
                os.ftruncate(self.fd, self.file_size)
            # The file is written through its mapping, where a page a full disk cannot back is SIGBUS,
            # not an error: the header and the slots (written anywhere) get their blocks now, the
            # entries (written in order) a run at a time ahead of use, so a new file takes the disk
            # its slots need, not the whole of its entries (400 MB at RocketMQ's defaults).
            self._entries_base = HEADER_SIZE + hash_slot_num * SLOT_SIZE
            reserve(self.fd, 0, self._entries_base)
            self._reserved_entries = 0
        except OSError:
            os.close(self.fd)
            if not exists:
                unlink_quietly(path)
            raise
        self.mm = mmap.mmap(self.fd, self.file_size, mmap.MAP_SHARED)
        if exists:
            self._read_header()
            self._repair_tail()
        else:
            self.begin_timestamp = 0
            self.end_timestamp = end_timestamp
            self.begin_phy_offset = end_phy_offset
            self.end_phy_offset = end_phy_offset
            self.hash_slot_count = 0
            self.index_count = 1
            self._write_header()

    def _read_header(self) -> None:
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, self.index_count) = HEADER.unpack_from(self.mm, 0)
        if self.index_count <= 0:
            self.index_count = 1

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.index_num

    def _write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                         self.end_phy_offset, self.hash_slot_count, self.index_count)

    def put_key(self, key: bytes, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` -> ``phy_offset``; False when the file is full."""
        return self.put_keys([(key, phy_offset, store_timestamp)]) == 1

    def put_keys(self, items: list[tuple[bytes, int, int]]) -> int:
        """Add (key, commitlog offset, store time) entries in order; returns how many fitted.

        Each entry is written before the slot that points to it, and the header
        once at the end: after a crash, :meth:`_repair_tail` finds entries the
        header does not count yet, so a slot never points at a missing entry.
        """
        room = self.index_num - self.index_count
        if room <= 0 or not items:
            return 0
        if len(items) > room:
            items = items[:room]
        self._reserve_entries(self.index_count + len(items))
        mm = self.mm
        slots = self.hash_slot_num
        base = self._entries_base
        count = start = self.index_count
        if count <= 1:
            self.begin_timestamp = items[0][2]
            self.begin_phy_offset = items[0][1]
        begin_ts = self.begin_timestamp
        slot_count = self.hash_slot_count
        unpack_slot, pack_slot, pack_entry = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
        crc32 = zlib.crc32
        for key, phy, ts in items:
            h = crc32(key) & 0x7FFFFFFF
            slot_pos = HEADER_SIZE + (h % slots) * SLOT_SIZE
            (prev,) = unpack_slot(mm, slot_pos)
            if prev <= 0 or prev >= count:
                prev = 0
                slot_count += 1
            diff = (ts - begin_ts) // 1000
            pack_entry(mm, base + count * ENTRY_SIZE, h, phy, diff if 0 <= diff < 0x7FFFFFFF else 0, prev)
            pack_slot(mm, slot_pos, count)
            count += 1
        _, self.end_phy_offset, self.end_timestamp = items[-1]
        self.index_count = count
        self.hash_slot_count = slot_count
        self._write_header()
        return count - start

    def _reserve_entries(self, upto: int) -> None:
        """Reserve the blocks of entries below ``upto`` and a run beyond (OSError when the disk is full)."""
        if upto <= self._reserved_entries:
            return
        end = min(self.index_num, upto + RESERVE_AHEAD_ENTRIES)
        start = self._reserved_entries
        reserve(self.fd, self._entries_base + start * ENTRY_SIZE, (end - start) * ENTRY_SIZE)
        self._reserved_entries = end

    def _repair_tail(self) -> None:
        """Count entries written after the header was last written (a crash in between)."""
        count = self.index_count
        while count < self.index_num:
            h, phy, diff, _ = ENTRY.unpack_from(self.mm, self._entries_base + count * ENTRY_SIZE)
            if h == 0 and phy == 0:
                break
            count += 1
            self.end_phy_offset = phy
            self.end_timestamp = self.begin_timestamp + diff * 1000
        if count != self.index_count:
            log.info("index_tail_repaired", file=self.path, entries=count - self.index_count)
            self.index_count = count
            self._write_header()

    def select_phy_offsets(self, key: bytes, max_num: int, begin: int, end: int) -> list[int]:
        """Commitlog offsets indexed under ``key`` stored within [begin, end] ms, newest first."""
        h = key_hash(key)
        (cur,) = SLOT.unpack_from(self.mm, HEADER_SIZE + (h % self.hash_slot_num) * SLOT_SIZE)
        out: list[int] = []
        seen = 0
        # Entries are written before the slot that points at them, so a slot may lead
        # to an entry the header does not count yet (its writer is mid-run): follow it.
        while 0 < cur < self.index_num and len(out) < max_num and seen < self.index_num:
            seen += 1
            eh, phy, diff, prev = ENTRY.unpack_from(self.mm, self._entries_base + cur * ENTRY_SIZE)
            ts = self.begin_timestamp + diff * 1000
            if eh == h and begin <= ts <= end:
                out.append(phy)
            if eh == 0 and phy == 0 or prev <= 0 or prev >= cur:
                break
            cur = prev
        return out

    def overlaps(self, begin: int, end: int) -> bool:
        """Whether this file's time span meets [begin, end] (in whole seconds, as stored)."""
        return self.begin_timestamp - 1000 <= end and begin <= self.end_timestamp + 1000

    def flush(self) -> None:
        os.fdatasync(self.fd)

    def close(self) -> None:
        release_mapping(self.mm, self.fd)

    def destroy(self) -> None:
        self.close()
        unlink_quietly(self.path)


class IndexService:
    """The list of index files: build entries from dispatched messages, answer key queries."""

    def __init__(self, store_path: str, hash_slot_num: int, index_num: int) -> None:
        self.store_path = store_path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self._lock = threading.Lock()

    def load(self) -> None:
        if not os.path.isdir(self.store_path):
            return
        for name in sorted(os.listdir(self.store_path)):
            if name.isdigit():
                self.files.append(IndexFile(os.path.join(self.store_path, name),
                                            self.hash_slot_num, self.index_num))

    def truncate_dirty(self, phy_offset: int) -> None:
        """After recovery cut the commitlog at ``phy_offset``: forget entries past it.

        Files that begin past it go; a file that spans it keeps its entries (queries
        check keys against the message found) but its end offset is set back, so the
        rebuilt messages are indexed again.
        """
        keep = []
        for f in self.files:
            if f.begin_phy_offset >= phy_offset and f.index_count > 1:
                f.destroy()
                continue
            if f.end_phy_offset >= phy_offset:
                f.end_phy_offset = phy_offset - 1
                f._write_header()
            keep.append(f)
        self.files = keep

    @property
    def end_phy_offset(self) -> int:
        return self.files[-1].end_phy_offset if self.files else -1

    def _last_writable(self, phy_offset: int, ts: int) -> IndexFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            return last
        os.makedirs(self.store_path, exist_ok=True)
        name = datetime.fromtimestamp(time.time()).strftime("%Y%m%d%H%M%S%f")[:17]
        path = os.path.join(self.store_path, name)
        while os.path.exists(path):
            path += "0"
        f = IndexFile(path, self.hash_slot_num, self.index_num,
                      end_phy_offset=last.end_phy_offset if last else phy_offset,
                      end_timestamp=last.end_timestamp if last else ts)
        if last is not None:
            last.flush()
        with self._lock:
            self.files.append(f)
        return f

    def build_index(self, items: list[tuple[bytes, bytes | None, bytes | None, int, int]]) -> None:
        """Index a run of messages: (topic, KEYS, UNIQ_KEY, commitlog offset, store time) each.

        ``topic#key`` goes in for every space-separated key and for the unique key;
        messages at or below the newest file's end offset are indexed already.
        """
        last = self.files[-1] if self.files else None
        done_upto = last.end_phy_offset if last is not None and last.index_count > 1 else -1
        entries: list[tuple[bytes, int, int]] = []
        for topic, keys, uniq, phy_offset, ts in items:
            if phy_offset <= done_upto:
                continue
            prefix = topic + b"#"
            if keys:
                for key in keys.split(b" "):
                    if key:
                        entries.append((prefix + key, phy_offset, ts))
            if uniq:
                entries.append((prefix + uniq, phy_offset, ts))
        while entries:
            first = entries[0]
            f = self._last_writable(first[1], first[2])
            entries = entries[f.put_keys(entries):]

    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Commitlog offsets for ``topic#key`` in the time range, newest files first."""
        full = f"{topic}#{key}".encode()
        out: list[int] = []
        with self._lock:
            files = list(self.files)
        for f in reversed(files):
            if len(out) >= max_num:
                break
            if f.overlaps(begin, end):
                out.extend(f.select_phy_offsets(full, max_num - len(out), begin, end))
        return out

    def last_update(self) -> tuple[int, int]:
        """(end timestamp, end commitlog offset) of the newest file."""
        if not self.files:
            return 0, 0
        f = self.files[-1]
        return f.end_timestamp, f.end_phy_offset

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete files (never the newest) whose every entry points below the commitlog's start."""
        victims = []
        with self._lock:
            for f in self.files[:-1]:
                if f.end_phy_offset < commitlog_min_offset:
                    victims.append(f)
                else:
                    break
            self.files = self.files[len(victims):]
        for f in victims:
            f.destroy()
        return len(victims)

    def flush(self) -> None:
        for f in list(self.files[-1:]):
            f.flush()

    def shutdown(self) -> None:
        for f in self.files:
            f.flush()
            f.close()
        self.files = []
