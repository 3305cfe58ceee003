"""Fixed-size memory-mapped files named by their 20-digit start offset, and queues of them.

Both the commitlog and each consume queue are a ``MappedFileQueue``: a directory
of equal-sized files ``00000000000000000000``, ``00000000001073741824`` ... each
covering ``[file_from_offset, file_from_offset + file_size)`` of one logical
byte space.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="store")

_ZERO_CHUNK = 16 * 1024 * 1024
_PAGE = mmap.PAGESIZE


def allocate(fd: int, size: int) -> None:
    """Size a new file, reserving its blocks.

    Reserved blocks make the first write to each page several times cheaper than
    on a sparse file (no block allocation inside the page fault), which is most
    of a put's cost otherwise. Filesystems without fallocate get a sparse file; one
    without the room raises OSError (ENOSPC), see :func:`reserve`.
    """
    reserve(fd, 0, size)
    os.ftruncate(fd, size)  # the size, where the filesystem has no fallocate to set it


def reserve(fd: int, offset: int, length: int) -> None:
    """Reserve the blocks of ``[offset, offset + length)`` of a file (growing it to reach
    there, where the filesystem has fallocate).

    For files written through their mapping: a store into a page the filesystem cannot
    back would kill the process (SIGBUS), so the pages are reserved before they are
    written and a full disk raises OSError (ENOSPC) here instead. Filesystems without
    fallocate are left as they are.
    """
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise


#: warm()'s read size: each read hands the GIL back and forth once, so fewer and larger reads disturb the
#: writers less (a GiB is 256 reads).
_WARM_CHUNK = 4 * 1024 * 1024


def warm(fd: int, size: int) -> None:
    """Read a new (allocated, all-zero) file once so its pages are in the page cache.

    Appends to it then take only cheap minor faults. pread runs without the GIL,
    unlike MAP_POPULATE, so this can run beside the writers. A read that fails
    (``fd`` closed meanwhile) just ends the warming.
    """
    # The buffer is an anonymous mapping of its own rather than from malloc: a freed block of megabytes
    # raises glibc's mmap threshold, after which such blocks come from the thread's arena and each arena
    # keeps one resident.
    with mmap.mmap(-1, _WARM_CHUNK) as buf:
        try:
            for off in range(0, size, _WARM_CHUNK):
                if os.preadv(fd, [buf], off) <= 0:
                    break
        except OSError:
            pass


def warm_beside(f: MappedFile, name: str) -> None:
    """Warm ``f`` (:func:`warm`) on a thread of its own, beside whoever writes it.

    The thread reads through its own descriptor, so closing or deleting the file meanwhile never
    has it read whatever file takes the number next; it closes that descriptor when done.
    """
    try:
        fd = os.dup(f.fd)
    except OSError:
        return  # out of descriptors: the file is written cold, which only costs its first writes more

    def run() -> None:
        try:
            warm(fd, f.file_size)
        finally:
            os.close(fd)

    try:
        threading.Thread(target=run, name=name, daemon=True).start()
    except BaseException:
        os.close(fd)
        raise


def release_mapping(mm: mmap.mmap, fd: int) -> None:
    """Unmap and close; a mapping a reader still holds a view of goes when the view is dropped."""
    try:
        mm.close()
    except BufferError:
        pass
    os.close(fd)


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def offset_to_file_name(offset: int) -> str:
    return f"{offset:020d}"


def mapped_file_names(store_path: str) -> list[str]:
    """The names of the files of the queue in ``store_path`` (their 20-digit start offsets), in order; none
    when there is no such folder."""
    if not os.path.isdir(store_path):
        return []
    return sorted(n for n in os.listdir(store_path) if n.isdigit() and len(n) == 20)


class MappedFile:
    """One mapped file: a write position, a flush position, reads by relative position.

    Writers hold the owner's lock; ``wrote_position`` is published after the bytes
    are in place, so readers that stay below it never see a partial record.
    """

    __slots__ = ("path", "file_name", "file_from_offset", "file_size", "fd", "mm",
                 "wrote_position", "flushed_position", "store_timestamp", "_available")

    def __init__(self, path: str, file_size: int, reserve: bool = True) -> None:
        """Map ``path``, creating it at ``file_size`` if it is not there: with its blocks reserved
        (``reserve``, see :func:`allocate`), or sparse, taking disk only as it is written."""
        self.path = path
        self.file_name = os.path.basename(path)
        self.file_from_offset = int(self.file_name)
        self.file_size = file_size
        exists = os.path.exists(path)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not exists or os.fstat(self.fd).st_size != file_size:
                if reserve:
                    allocate(self.fd, file_size)
                else:
                    os.ftruncate(self.fd, file_size)
            self.mm = mmap.mmap(self.fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            if not exists:
                # A file this call made but could not size: left behind, it would stop the next start
                # ("is 0 bytes, config says ...").
                unlink_quietly(path)
            raise
        self.wrote_position = 0
        self.flushed_position = 0
        #: Store time of the last message written here (commitlog only), for expiry.
        self.store_timestamp = 0
        self._available = True

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    @property
    def available(self) -> bool:
        return self._available

    @property
    def last_modified(self) -> float:
        """mtime in seconds; the age used for expiry."""
        try:
            return os.stat(self.path).st_mtime
        except FileNotFoundError:
            return 0.0

    def append(self, pos: int, data: bytes) -> None:
        """Write ``data`` at relative ``pos``, the end of what is written, into a sparse file.

        Bytes that stay within the page the previous bytes are in are stored
        into the mapping (a copy); bytes that reach into a page not written yet
        go by pwrite. The first store into a page of a sparse file's mapping
        takes a fault that allocates the page's block, up to milliseconds on
        ext4, where pwrite allocates it in microseconds; later stores into that
        page cost a copy. Readers see either at once (one page cache). The caller
        still moves ``wrote_position``.
        """
        in_page = pos % _PAGE
        if in_page and in_page + len(data) <= _PAGE:
            self.mm[pos:pos + len(data)] = data
        else:
            os.pwrite(self.fd, data, pos)

    def read(self, pos: int, size: int) -> bytes:
        """Bytes at relative ``pos``; empty if the range is not written yet."""
        if pos < 0 or pos + size > self.wrote_position:
            return b""
        return self.mm[pos:pos + size]

    def flush(self) -> int:
        """fsync the file up to what is written now; returns the flushed position."""
        wrote = self.wrote_position
        if wrote > self.flushed_position and self._available:
            # fdatasync releases the GIL (mmap.flush would not), so puts carry on during it.
            os.fdatasync(self.fd)
            self.flushed_position = wrote
        return self.flushed_position

    def zero_from(self, pos: int, end: int | None = None) -> None:
        """Zero ``[pos, end)`` so stale bytes past a truncation can never be read as records."""
        end = self.file_size if end is None else end
        while pos < end:
            n = min(_ZERO_CHUNK, end - pos)
            self.mm[pos:pos + n] = bytes(n)
            pos += n

    def close(self) -> None:
        if self._available:
            self._available = False
            release_mapping(self.mm, self.fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        unlink_quietly(self.path)

    def __repr__(self) -> str:
        return f"MappedFile({self.file_name}, wrote={self.wrote_position})"


class MappedFileQueue:
    """A directory of equal-sized mapped files covering one logical byte space.

    ``reserve``: new files get their blocks reserved up front (the commitlog, where it makes
    appends cheaper); without it they are sparse (consume queues: a topic costs disk only for
    the entries it has, as in RocketMQ, so thousands of queues do not reserve gigabytes).
    """

    def __init__(self, store_path: str, file_size: int, preallocate: bool = False, reserve: bool = True) -> None:
        self.store_path = store_path
        self.file_size = file_size
        self.reserve = reserve
        #: Prepare the next file in the background (RocketMQ's AllocateMappedFileService).
        self.preallocate = preallocate
        #: The next file being prepared: its start offset, and the file once it is mapped (None if that failed).
        self._next: tuple[int, Future[MappedFile | None]] | None = None
        self.files: list[MappedFile] = []
        #: Logical offset up to which data is fsynced.
        self.flushed_where = 0
        self._lock = threading.Lock()

    # --- loading and creating ---

    def load(self) -> None:
        """Map the files already in the directory (recovery sets their positions)."""
        names = mapped_file_names(self.store_path)
        for name in names:
            path = os.path.join(self.store_path, name)
            size = os.path.getsize(path)
            if size == 0 and name == names[-1]:
                # Created and never sized: the process died between the two steps of creating the newest
                # file. It holds nothing, and the next write creates it again.
                log.warning("unsized_file_removed", file=path)
                os.remove(path)
                break
            if size != self.file_size:
                raise ValueError(
                    f"{path} is {size} bytes, config says {self.file_size}: "
                    "mappedFileSize changed over existing data")
            f = MappedFile(path, self.file_size)
            f.wrote_position = f.flushed_position = self.file_size
            self.files.append(f)

    def last_file(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def first_file(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def get_last_mapped_file(self, start_offset: int = 0) -> MappedFile:
        """The file to append to, creating the next one if there is none or the last is full."""
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.file_size
        else:
            create_offset = last.file_from_offset + self.file_size
        os.makedirs(self.store_path, exist_ok=True)
        f = self._take_prepared(create_offset)
        if f is None:
            f = MappedFile(os.path.join(self.store_path, offset_to_file_name(create_offset)), self.file_size,
                           reserve=self.reserve)
            if self.preallocate:
                # Warm it beside the writers: reading pages they are writing is harmless.
                warm_beside(f, "WarmMappedFile")
        with self._lock:
            self.files.append(f)
        if self.preallocate:
            self._prepare(create_offset + self.file_size)
        return f

    def _prepare(self, offset: int) -> None:
        """Create, allocate and map the file at ``offset`` on a background thread, and warm it.

        fallocate and the warming reads run without the GIL, so a roll-over finds its file ready and
        mostly in memory. (MAP_POPULATE would hold the GIL throughout.) The roll-over takes the file
        once it is mapped and leaves the warming going: warming a file of a GiB takes seconds on a
        busy broker, each read waiting for the GIL, and a put waiting for it would hold up every send
        behind it for that long.
        """
        made: Future[MappedFile | None] = Future()
        path = os.path.join(self.store_path, offset_to_file_name(offset))

        def create() -> None:
            f = None
            try:
                f = MappedFile(path, self.file_size, reserve=self.reserve)
                warm_beside(f, "WarmMappedFile")
            except OSError as exc:
                log.warning("preallocate_failed", file=path, error=str(exc))
            finally:
                made.set_result(f)

        threading.Thread(target=create, name="AllocateMappedFileService", daemon=True).start()
        self._next = (offset, made)

    def _take_prepared(self, offset: int) -> MappedFile | None:
        nxt, self._next = self._next, None
        if nxt is None:
            return None
        at, made = nxt
        f = made.result()
        if f is not None and at != offset:
            f.destroy()
            return None
        return f

    def discard_prepared(self) -> None:
        """Drop a prepared next file (shutdown, truncation)."""
        nxt, self._next = self._next, None
        if nxt is not None:
            f = nxt[1].result()
            if f is not None:
                f.destroy()

    def find_file(self, offset: int) -> MappedFile | None:
        """The file holding logical ``offset``, or None when it is deleted or not written yet."""
        files = self.files
        if not files:
            return None
        first = files[0]
        idx = (offset - first.file_from_offset) // self.file_size
        if idx < 0 or idx >= len(files):
            return None
        f = files[idx]
        if f.file_from_offset <= offset < f.file_from_offset + self.file_size:
            return f
        for f in files:  # only after a hole; not expected
            if f.file_from_offset <= offset < f.file_from_offset + self.file_size:
                return f
        return None

    # --- offsets ---

    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """Logical offset just past the last written byte."""
        last = self.files[-1] if self.files else None
        return last.file_from_offset + last.wrote_position if last else 0

    # --- flushing ---

    def flush(self, least_pages: int = 0) -> bool:
        """fsync from ``flushed_where`` on if at least ``least_pages`` 4 KiB pages are dirty.

        Returns True when something was flushed.
        """
        f = self.find_file(self.flushed_where)
        if f is None:
            f = self.files[0] if self.files and self.flushed_where < self.files[0].file_from_offset else None
            if f is None:
                return False
        flushed_rel = self.flushed_where - f.file_from_offset
        dirty = f.wrote_position - flushed_rel
        if dirty <= 0 or (least_pages > 0 and dirty < least_pages * 4096 and not f.is_full):
            return False
        pos = f.flush()
        self.flushed_where = f.file_from_offset + pos
        return True

    def flush_all(self) -> None:
        while self.flush(0):
            pass

    # --- truncation and deletion ---

    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at or past logical ``offset``: zero the tail of its file, delete later files."""
        self.discard_prepared()
        keep = []
        for f in self.files:
            end = f.file_from_offset + self.file_size
            if end <= offset:
                keep.append(f)
            elif f.file_from_offset <= offset:
                rel = offset - f.file_from_offset
                f.zero_from(rel)
                f.wrote_position = f.flushed_position = rel
                keep.append(f)
            else:
                log.warning("truncate_delete_file", file=f.path)
                f.destroy()
        with self._lock:
            self.files = keep
        self.flushed_where = min(self.flushed_where, offset)

    def delete_files(self, victims: list[MappedFile]) -> int:
        """Remove ``victims`` (a prefix of the queue) and delete them from disk."""
        if not victims:
            return 0
        gone = {id(f) for f in victims}
        with self._lock:
            self.files = [f for f in self.files if id(f) not in gone]
        for f in victims:
            f.destroy()
        return len(victims)

    def delete_expired_by_time(self, expired_ms: float, interval_ms: int, max_files: int,
                               force: bool = False) -> int:
        """Delete files older than ``expired_ms`` (all but the last), or any when ``force``."""
        now = time.time()
        deleted = 0
        for f in list(self.files[:-1]):
            if deleted >= max_files:
                break
            if force or (now - f.last_modified) * 1000 >= expired_ms:
                self.delete_files([f])
                deleted += 1
                if interval_ms > 0:
                    time.sleep(interval_ms / 1000)
            else:
                break
        return deleted

    def delete_while(self, expired: Callable[[MappedFile], bool]) -> int:
        """Delete leading files (never the last) for which ``expired(file)`` holds."""
        victims = []
        for f in self.files[:-1]:
            if not expired(f):
                break
            victims.append(f)
        return self.delete_files(victims)

    def shutdown(self) -> None:
        self.discard_prepared()
        for f in self.files:
            f.close()

    def destroy(self) -> None:
        """Delete every file and the directory itself."""
        self.discard_prepared()
        for f in self.files:
            f.destroy()
        self.files = []
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass
