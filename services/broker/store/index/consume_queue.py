"""ConsumeQueue: per topic and queue id, 20-byte entries pointing into the commitlog.

Entry: commitlog offset (8) | size (4) | tag hash code (8). For SCHEDULE_TOPIC_XXXX
the last field holds the delivery time instead. Files hold
``mappedFileSizeConsumeQueue / 20`` entries (300,000 by default) and live in
``consumequeue/<topic>/<queueId>/<20-digit start byte offset>``.

The store's dispatch is the one writer (``dispatch.dispatcher``); readers read
the same files, below the written end. Files are sparse: a queue takes disk
only for the entries it holds.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator

from rocketmesh.broker.store.mapped_file import MappedFileQueue
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="consume_queue")

CQ_STORE_UNIT_SIZE = 20
ENTRY = struct.Struct(">qiq")
#: Entries written to pad a queue that does not start at offset 0 of its file.
BLANK_SIZE = 0x7FFFFFFF


class ConsumeQueue:
    """One topic/queue's index of commitlog positions, addressed by logical offset."""

    def __init__(self, topic: str, queue_id: int, root: str, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size - file_size % CQ_STORE_UNIT_SIZE
        self.queue = MappedFileQueue(os.path.join(root, topic, str(queue_id)), self.file_size,
                                     preallocate=False, reserve=False)
        #: Commitlog offset just past the last message this queue points to.
        self.max_physic_offset = -1
        #: Byte offset of the first live entry.
        self.min_logic_offset = 0

    # --- loading and recovery ---

    def load(self) -> None:
        self.queue.load()

    def recover(self) -> None:
        """Find the last valid entry (walking the last file) and drop what follows it."""
        files = self.queue.files
        if not files:
            return
        last = files[-1]
        mm = last.mm
        pos = 0
        max_phys = -1
        while pos + CQ_STORE_UNIT_SIZE <= self.file_size:
            offset, size, _ = ENTRY.unpack_from(mm, pos)
            if offset < 0 or size <= 0:
                break
            if size != BLANK_SIZE:
                max_phys = offset + size
            pos += CQ_STORE_UNIT_SIZE
        last.wrote_position = last.flushed_position = pos
        if max_phys < 0 and len(files) > 1:
            prev = files[-2]
            offset, size, _ = ENTRY.unpack_from(prev.mm, self.file_size - CQ_STORE_UNIT_SIZE)
            max_phys = offset + size if size != BLANK_SIZE else -1
        self.max_physic_offset = max_phys
        self.queue.flushed_where = last.file_from_offset + pos
        if pos < self.file_size:
            last.zero_from(pos, min(self.file_size, pos + 4096))
        first = files[0]
        self.min_logic_offset = first.file_from_offset
        # Skip padding entries at the head of the first file.
        p = 0
        while p < first.wrote_position:
            _, size, _ = ENTRY.unpack_from(first.mm, p)
            if size != BLANK_SIZE:
                break
            p += CQ_STORE_UNIT_SIZE
        self.min_logic_offset = first.file_from_offset + p

    def truncate_dirty(self, phy_offset: int) -> None:
        """Remove entries pointing at or past ``phy_offset`` (a commitlog truncated by recovery)."""
        idx = self.max_offset
        while idx > self.min_offset:
            entry = self.get(idx - 1)
            if entry is None or entry[1] == BLANK_SIZE or entry[0] < phy_offset:
                break
            idx -= 1
        if idx < self.max_offset:
            self.queue.truncate_dirty_files(idx * CQ_STORE_UNIT_SIZE)
        self._reset_max_phys()

    def _reset_max_phys(self) -> None:
        last = self.queue.last_file()
        self.max_physic_offset = -1
        if last is None:
            return
        files = self.queue.files
        for f in reversed(files):
            pos = f.wrote_position
            while pos >= CQ_STORE_UNIT_SIZE:
                offset, size, _ = ENTRY.unpack_from(f.mm, pos - CQ_STORE_UNIT_SIZE)
                if size != BLANK_SIZE:
                    self.max_physic_offset = offset + size
                    return
                pos -= CQ_STORE_UNIT_SIZE

    # --- writing ---

    def put(self, phys: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Add the entry for queue offset ``queue_offset``; an entry already present is skipped."""
        if phys + size <= self.max_physic_offset:
            return True  # rebuilt by recovery already
        expected = queue_offset * CQ_STORE_UNIT_SIZE
        files = self.queue.files
        if files:
            f = files[-1]
            pos = f.wrote_position
            if pos < self.file_size and f.file_from_offset + pos == expected:
                f.append(pos, ENTRY.pack(phys, size, tags_code))
                f.wrote_position = pos + CQ_STORE_UNIT_SIZE
                self.max_physic_offset = phys + size
                return True
        f = self.queue.get_last_mapped_file(expected)
        cur = f.file_from_offset + f.wrote_position
        if f.wrote_position == 0 and expected != cur and len(self.queue.files) == 1:
            # A queue that starts past zero (its earlier files expired, or a reset):
            # pad the head of the file so positions stay ``offset * 20``.
            self._pad(f, expected - f.file_from_offset)
            self.min_logic_offset = expected
            cur = expected
        if expected < cur:
            log.warning("consume_queue_duplicate", topic=self.topic, queue_id=self.queue_id,
                        queue_offset=queue_offset, current=cur // CQ_STORE_UNIT_SIZE)
            return True
        if expected > cur:
            log.error("consume_queue_gap", topic=self.topic, queue_id=self.queue_id,
                      queue_offset=queue_offset, current=cur // CQ_STORE_UNIT_SIZE)
            while cur < expected:
                f = self.queue.get_last_mapped_file(cur)
                self._pad(f, min(self.file_size, expected - f.file_from_offset))
                cur = f.file_from_offset + f.wrote_position
            f = self.queue.get_last_mapped_file(expected)
        pos = f.wrote_position
        f.append(pos, ENTRY.pack(phys, size, tags_code))
        f.wrote_position = pos + CQ_STORE_UNIT_SIZE
        self.max_physic_offset = phys + size
        return True

    def put_run(self, first_offset: int, entries: list[bytes], end_phys: int) -> None:
        """Add packed entries (``ENTRY.pack`` each) for consecutive queue offsets from ``first_offset``.

        ``end_phys`` is the end of the last entry's message. Copied in one piece
        when they continue the last file and fit in it, else entry by entry as
        :meth:`put` does.
        """
        files = self.queue.files
        if files:
            f = files[-1]
            pos = f.wrote_position
            data = b"".join(entries)
            if pos + len(data) <= self.file_size and f.file_from_offset + pos == first_offset * CQ_STORE_UNIT_SIZE \
                    and ENTRY.unpack_from(data)[0] >= self.max_physic_offset:
                f.append(pos, data)
                f.wrote_position = pos + len(data)
                self.max_physic_offset = end_phys
                return
        unpack = ENTRY.unpack
        for i, entry in enumerate(entries):
            phys, size, tags_code = unpack(entry)
            self.put(phys, size, tags_code, first_offset + i)

    def _pad(self, f, upto_rel: int) -> None:
        pos = f.wrote_position
        if pos < upto_rel:
            n = -(-(upto_rel - pos) // CQ_STORE_UNIT_SIZE)
            f.append(pos, ENTRY.pack(0, BLANK_SIZE, 0) * n)
            pos += n * CQ_STORE_UNIT_SIZE
        f.wrote_position = pos

    # --- reading ---

    @property
    def min_offset(self) -> int:
        """Smallest logical offset still readable."""
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        """Logical offset the next message will get (number of entries ever written)."""
        return self.queue.max_offset // CQ_STORE_UNIT_SIZE

    def get(self, index: int) -> tuple[int, int, int] | None:
        """(commitlog offset, size, tag code) of entry ``index``, or None."""
        pos = index * CQ_STORE_UNIT_SIZE
        if pos < self.min_logic_offset:
            return None
        f = self.queue.find_file(pos)
        if f is None:
            return None
        rel = pos - f.file_from_offset
        if rel + CQ_STORE_UNIT_SIZE > f.wrote_position:
            return None
        return ENTRY.unpack_from(f.mm, rel)

    def iter_from(self, index: int, max_entries: int) -> Iterator[tuple[int, int, int, int]]:
        """Up to ``max_entries`` entries (index, offset, size, tag code) from ``index``, within one file."""
        pos = index * CQ_STORE_UNIT_SIZE
        f = self.queue.find_file(pos)
        if f is None:
            return iter(())
        rel = pos - f.file_from_offset
        return _entries(f.mm, rel, min(f.wrote_position, rel + max_entries * CQ_STORE_UNIT_SIZE), index)

    def roll_next_file(self, index: int) -> int:
        """First logical offset of the file after the one holding ``index``."""
        per_file = self.file_size // CQ_STORE_UNIT_SIZE
        return index + per_file - index % per_file

    def offset_by_time(self, timestamp: int, store_time_at: Callable[[int], int]) -> int:
        """First logical offset whose message was stored at or after ``timestamp`` (ms).

        Binary search over the live entries, reading each probe's store time from
        the commitlog. Past every message -> max offset; before all -> min offset.
        """
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            entry = self.get(mid)
            if entry is None or entry[1] == BLANK_SIZE:
                lo = mid + 1
                continue
            ts = store_time_at(entry[0])
            if ts < 0 or ts < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # --- expiry ---

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete files all of whose entries point below the commitlog's first byte."""
        def expired(f) -> bool:
            offset, size, _ = ENTRY.unpack_from(f.mm, self.file_size - CQ_STORE_UNIT_SIZE)
            return size != BLANK_SIZE and 0 < size and offset + size <= commitlog_min_offset

        n = self.queue.delete_while(expired)
        self.correct_min_offset(commitlog_min_offset)
        return n

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Move the min offset to the first entry whose message still exists."""
        first = self.queue.first_file()
        if first is None:
            return
        pos = max(0, self.min_logic_offset - first.file_from_offset)
        while pos + CQ_STORE_UNIT_SIZE <= first.wrote_position:
            offset, size, _ = ENTRY.unpack_from(first.mm, pos)
            if size != BLANK_SIZE and offset >= commitlog_min_offset:
                break
            pos += CQ_STORE_UNIT_SIZE
        self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset + pos)

    def flush(self, least_pages: int = 0) -> bool:
        return self.queue.flush(least_pages)

    def flush_all(self) -> None:
        self.queue.flush_all()

    def shutdown(self) -> None:
        self.queue.flush_all()
        self.queue.shutdown()

    def destroy(self) -> None:
        self.queue.destroy()
        try:
            os.rmdir(os.path.dirname(self.queue.store_path))
        except OSError:
            pass


def _entries(buf, pos: int, end: int, index: int) -> Iterator[tuple[int, int, int, int]]:
    """The entries packed in ``buf`` from byte ``pos`` to ``end`` as (index, offset, size, tag code), the
    first being queue offset ``index``."""
    unpack = ENTRY.unpack_from
    while pos + CQ_STORE_UNIT_SIZE <= end:
        offset, size, tags = unpack(buf, pos)
        yield index, offset, size, tags
        index += 1
        pos += CQ_STORE_UNIT_SIZE
