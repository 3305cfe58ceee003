"""MessageStore: the broker's store engine, RocketMQ's DefaultMessageStore.

Owns the commitlog, the dispatch (consume queue and index files), the flush and
clean services and the checkpoint. The broker calls the store in-process; nothing
else opens these files (a lock file guards the directory).

One write path: a put appends records to the commitlog, which gives each its
queue offset; the dispatch (``dispatch.reput``) then turns each record into its
consume-queue entry and index keys and tells the arriving listeners (who wake
held pulls) which queues grew. A slave's replicated bytes and recovery go
through the same dispatch. A reader sees one :class:`ConsumeQueue` per topic and
queue.

Dispatch runs on the putting thread: before the put returns, or, for a caller
that says it will call :meth:`MessageStore.flush_pending` soon (the broker's I/O
thread, once per round of reading), in that call, after the caller has answered
its sends: a sync send's answer then does not wait for its dispatch, and a round
of sends is dispatched as one run. Every read dispatches what is pending first,
so a message is readable as soon as its put returned either way.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rocketmesh.broker.store.checkpoint import StoreCheckpoint
from rocketmesh.broker.store.cleaner import CleanService, disk_used_ratio
from rocketmesh.broker.store.commitlog import CommitLog, ReplicaGap
from rocketmesh.broker.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from rocketmesh.broker.store.dispatch.dispatcher import Dispatcher
from rocketmesh.broker.store.dispatch.reput import ArrivingListener, ReputMessageService
from rocketmesh.broker.store.flush import FlushConsumeQueueService, FlushRealTimeService, GroupCommitService
from rocketmesh.broker.store.index.consume_queue import BLANK_SIZE, ConsumeQueue
from rocketmesh.broker.store.inner_message import MessageExtBatch, MessageExtBrokerInner
from rocketmesh.broker.store.mapped_file import mapped_file_names
from rocketmesh.broker.store.replication import ReplicaTracker
from rocketmesh.broker.store.results import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from rocketmesh.model.codec import decode_record
from rocketmesh.model.delay_levels import parse_delay_levels
from rocketmesh.model.message import MessageConst, MessageExt
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="store")

#: A put that found the lock held this long answers OS_PAGECACHE_BUSY (osPageCacheBusyTimeOutMills).
OS_PAGECACHE_BUSY_MS = 1000
#: At most this many consume-queue entries are scanned per get when filtering.
MAX_FILTER_ENTRIES = 16000 // 20


def _files_with_records(path: str) -> list[str]:
    """The commitlog's file names in order, without the trailing files that hold no record yet.

    The commitlog makes its next file ahead of need, so the newest file is often
    empty; recovery's margin of "the last files" must count files with data.
    """
    names = mapped_file_names(path)
    while names:
        with open(os.path.join(path, names[-1]), "rb") as f:
            if f.read(4).strip(b"\0"):  # a record starts with its non-zero total size
                break
        names.pop()
    return names


def _physical_memory() -> int:
    """The machine's memory in bytes (RocketMQ's totalPhysicalMemorySize)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


class StoreLockedError(RuntimeError):
    """Another process has this store directory open."""


class MessageFilter(Protocol):
    """Filters a pull: first on the consume queue's tag code, then on the stored record."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: bytes) -> bool: ...


@dataclass
class StoreStats:
    """Counters for runtime info (put/get totals; TPS is derived by the broker)."""

    put_message_times_total: int = 0
    put_message_size_total: int = 0
    put_message_failed_times: int = 0
    get_message_times_total_found: int = 0
    get_message_times_total_miss: int = 0
    get_message_transferred_msg_count: int = 0
    started_at: float = field(default_factory=time.time)


class MessageStore:
    """The store engine. ``load()`` recovers, ``start()`` starts the background services."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        os.makedirs(config.store_path_root_dir, exist_ok=True)
        self._lock_fd = os.open(config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise StoreLockedError(f"store {config.store_path_root_dir} is in use by another process") from None
        self.commitlog = CommitLog(config)
        self.checkpoint = StoreCheckpoint(config.checkpoint_path)
        #: The consume queues and the index (their one writer).
        self.dispatcher = Dispatcher(config)
        #: (topic, queue id) -> its consume queue, made by the dispatch of its first record.
        self._queues: dict[tuple[str, int], ConsumeQueue] = self.dispatcher.queues
        self.reput = ReputMessageService(self.commitlog, self.dispatcher,
                                         partial_records=config.broker_role is BrokerRole.SLAVE,
                                         on_error=self._on_write_error)
        self.stats = StoreStats()
        self.group_commit: GroupCommitService | None = None
        #: Told the duration of each commitlog flush round (ms); set before ``start()``.
        self.flush_observer: Callable[[float], None] | None = None
        self.flush_commitlog: FlushRealTimeService | None = None
        self.flush_logics = FlushConsumeQueueService(config.flush_interval_consume_queue,
                                                     config.flush_consume_queue_thorough_interval,
                                                     self._flush_logics)
        self.cleaner = CleanService(self.config, self.commitlog, self.check_disk_space, self.clean_logics)
        #: A master's slaves and how far each has the commitlog.
        self.replicas = ReplicaTracker(config.ha_housekeeping_interval, config.ha_max_gap_not_in_sync)
        self.last_exit_ok = True
        self._loaded = False
        self._running = False
        self._writable = False
        #: Why puts are refused for want of disk space, None while there is enough (see check_disk_space).
        self._disk_full: str | None = None
        self._shutdown = False

    # --- life cycle ---

    def load(self) -> None:
        """Recover: the commitlog tail (by CRC after a crash), then queues and index past the checkpoint.

        The commitlog is walked and cut after its last good record; queue and
        index entries past that end go; the dispatch then rebuilds what the
        checkpoint does not cover, and each queue's next offset is where its
        consume queue ends (RocketMQ's recoverTopicQueueTable).
        """
        cfg = self.config
        self.last_exit_ok = not os.path.exists(cfg.abort_path)
        cp = self.checkpoint
        start = cp.dispatched_phy_offset
        t0 = time.monotonic()
        size = cfg.mapped_file_size_commit_log
        names = _files_with_records(cfg.store_path_commit_log)
        if self.last_exit_ok:
            walk = start
            if cfg.check_crc_on_recover and names:
                # As RocketMQ's recoverNormally: the last three files are walked with CRC checks, so a
                # record damaged while the broker was stopped is cut (and logged), never served.
                walk = min(walk, int(names[-3] if len(names) >= 3 else names[0]))
            end = self.commitlog.recover(walk - walk % size, check_crc=cfg.check_crc_on_recover)
        else:
            # After a crash, walk with CRC checks from the start of the file holding the
            # older of the two checkpointed offsets, and over at least the last two files:
            # a torn or corrupt record is cut there, and everything after it with it.
            walk = min(start, cp.physic_flushed_offset or start)
            if len(names) >= 2:
                walk = min(walk, int(names[-2]))
            end = self.commitlog.recover(walk - walk % size, check_crc=True)
        dispatcher = self.dispatcher
        dispatcher.load()
        dispatcher.truncate_dirty(end)
        rebuilt_from = min(max(start, self.commitlog.min_offset), end)
        self.reput.rebuild(rebuilt_from, end)
        self.commitlog.topic_queue_table.update(dispatcher.max_offsets())
        self._loaded = True
        log.info("store_recovered", clean_shutdown=self.last_exit_ok, commitlog_min=self.commitlog.min_offset,
                 commitlog_max=end, queues=len(self._queues), rebuilt_from=rebuilt_from,
                 seconds=round(time.monotonic() - t0, 3))

    def start(self) -> None:
        """Start flush and clean services; mark the store as running (abort file)."""
        cfg = self.config
        if not self._loaded:
            self.load()
        with open(cfg.abort_path, "w"):
            pass
        self.checkpoint.physic_flushed_offset = self.commitlog.queue.flushed_where
        if cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.group_commit = GroupCommitService(self.commitlog.queue, cfg.sync_flush_timeout,
                                                   self._on_commitlog_flushed)
            self.group_commit.flush_observer = self.flush_observer
            self.group_commit.start()
        else:
            self.flush_commitlog = FlushRealTimeService(
                self.commitlog.queue, cfg.flush_interval_commit_log, cfg.flush_commit_log_least_pages,
                cfg.flush_commit_log_thorough_interval, self._on_commitlog_flushed)
            self.flush_commitlog.flush_observer = self.flush_observer
            self.flush_commitlog.start()
        self.flush_logics.start()
        self.cleaner.start()
        self._running = True
        self._update_writable()

    def shutdown(self) -> None:
        """Flush everything, dispatch what is left and checkpoint, remove the abort file: the next start is cheap."""
        if self._shutdown:
            return
        self._shutdown = True
        self._running = self._writable = False
        self.cleaner.stop()
        if self.group_commit is not None:
            self.group_commit.stop()
        if self.flush_commitlog is not None:
            self.flush_commitlog.stop()
        self.flush_logics.stop()
        self.commitlog.queue.flush_all()
        self.reput.dispatch_pending()
        self._flush_logics(thorough=True)
        cp = self.checkpoint
        cp.physic_flushed_offset = self.commitlog.queue.flushed_where
        cp.physic_msg_timestamp = int(time.time() * 1000)
        cp.flush()
        cp.close()
        # A dispatch stopped short by a record that does not hold together leaves the abort file: the next
        # start then walks the commitlog with CRC checks and cuts it there.
        clean = self.reput.reput_offset >= self.commitlog.max_offset
        self.commitlog.shutdown()
        self.dispatcher.shutdown()
        if clean and os.path.exists(self.config.abort_path):
            os.unlink(self.config.abort_path)
        os.close(self._lock_fd)
        log.info("store_shutdown", commitlog_max=self.commitlog.max_offset, clean=clean)

    def _flush_logics(self, thorough: bool) -> None:
        """Sync consume queues and index (see :class:`FlushConsumeQueueService`); after a thorough sync,
        checkpoint the commitlog offset dispatched before it began."""
        dispatched = self.reput.reput_offset
        self.dispatcher.flush(0 if thorough else self.config.flush_consume_queue_least_pages)
        cp = self.checkpoint
        if thorough and cp.dispatched_phy_offset != dispatched:
            cp.dispatched_phy_offset = dispatched
            cp.logics_msg_timestamp = cp.index_msg_timestamp = int(time.time() * 1000)
            cp.flush()

    # --- writing ---

    def _check_writable(self) -> PutMessageResult | None:
        commitlog = self.commitlog
        if self._writable and not commitlog.begin_time_in_lock:
            return None
        if not self._running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="store is not running")
        if self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark="a slave does not take writes")
        if commitlog.lock_held_ms > OS_PAGECACHE_BUSY_MS:
            return PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY, remark="commitlog put lock held too long")
        if self._disk_full is not None:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, remark=self._disk_full)
        return None

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Store one message. The status says whether and how durably it was stored."""
        return self.put_messages([msg])

    def put_messages(self, msgs: list[MessageExtBrokerInner], wait_flush: bool = True,
                     finish_later: bool = False) -> PutMessageResult:
        """Store messages under one lock (each gets its own queue offset and AppendResult).

        They are readable when this returns. ``wait_flush=False`` returns as soon
        as the records are written; when :attr:`put_waits`, the caller then owes a
        :meth:`wait_durable` before it may report them as PUT_OK (the broker does
        this once for many sends).

        ``finish_later`` (with ``wait_flush=False``): the caller calls :meth:`flush_pending` on this thread
        before it waits for anything else (the broker's I/O thread does, after each round of reading),
        and the store finishes the put's work there, after the caller has answered. Held pulls then hear
        of the messages at that call; any read before it finishes the work first.
        """
        return self._put(self.commitlog.put_messages, msgs, wait_flush, finish_later)

    def put_batch(self, batch: MessageExtBatch, wait_flush: bool = True, finish_later: bool = False
                  ) -> PutMessageResult:
        """Store a SEND_BATCH_MESSAGE's items as consecutive messages of its queue.

        The result holds one AppendResult for the whole batch (``msg_num``
        messages, comma-separated ids). ``wait_flush`` and ``finish_later`` as in :meth:`put_messages`.
        """
        return self._put(self.commitlog.put_batch, batch, wait_flush, finish_later)

    def _put(self, put: Callable, what: Any, wait_flush: bool, finish_later: bool = False) -> PutMessageResult:
        """Append with ``put``, dispatch (or leave that to :meth:`flush_pending`, ``finish_later``), then
        (``wait_flush``) wait until durable as the config asks."""
        refused = self._check_writable()
        if refused is None:
            try:
                result = put(what)
            except OSError as exc:
                log.error("put_failed", error=str(exc))
                result = PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED, remark=str(exc))
                self._on_write_error(exc)
        else:
            result = refused
        st = self.stats
        if result.appended:
            if wait_flush or not finish_later:
                self.reput.dispatch_pending()
            for a in result.appended:
                st.put_message_times_total += a.msg_num
                st.put_message_size_total += a.wrote_bytes
            if wait_flush and self.put_waits:
                result.status = self.wait_durable(a.wrote_offset + a.wrote_bytes)
        else:
            st.put_message_failed_times += 1
        return result

    def _on_write_error(self, exc: OSError) -> None:
        """A commitlog, consume-queue or index file could not be written. Out of space: stop writes now
        rather than at the next disk check (records already in the commitlog are dispatched once there
        is room again)."""
        if exc.errno == errno.ENOSPC:
            self.check_disk_space(disk_used_ratio(self.config.store_path_root_dir) * 100, no_space=True)

    def _update_writable(self) -> None:
        """Puts are taken only by a running master whose disk has room."""
        self._writable = (self._running and not self._shutdown and self.config.broker_role is not BrokerRole.SLAVE
                          and self._disk_full is None)

    def check_disk_space(self, used_percent: float, no_space: bool = False) -> None:
        """RocketMQ's disk check (CleanCommitLogService.isSpaceToDelete): past diskSpaceWarningLevelRatio
        of the store's partition in use (or when a file could not be created for want of space,
        ``no_space``) the store refuses puts with a remark naming the path, the use and the limit, so
        that no write finds a full disk; reads go on. Writes resume once use is below the limit again."""
        cfg = self.config
        limit = cfg.disk_space_warning_level_ratio
        if used_percent > limit or no_space:
            if self._disk_full is None:
                why = "; no space was left to write a store file" if no_space else ""
                self._disk_full = (
                    f"the store's disk is full: {cfg.store_path_root_dir} is {used_percent:.1f}% used, the limit "
                    f"is diskSpaceWarningLevelRatio={limit}%{why}; sends are refused until space is freed "
                    "(reads go on), send to another broker")
                self._update_writable()
                log.error("store_disk_full", path=cfg.store_path_root_dir, used_percent=round(used_percent, 1),
                          disk_space_warning_level_ratio=limit, no_space=no_space)
        elif self._disk_full is not None:
            self._disk_full = None
            self._update_writable()
            log.info("store_disk_ok", path=cfg.store_path_root_dir, used_percent=round(used_percent, 1),
                     disk_space_warning_level_ratio=limit)

    @property
    def put_waits(self) -> bool:
        """True when a stored put is not durable until :meth:`wait_durable` says so (SYNC_FLUSH, or
        SYNC_MASTER): the one place that knows what durability a put's answer waits for."""
        return self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH \
            or self.config.broker_role is BrokerRole.SYNC_MASTER

    def when_durable(self, offset: int, done: Callable[[PutMessageStatus], None], flush_here: bool = False) -> None:
        """Call ``done(status)`` once the commitlog up to ``offset`` is as durable as the config asks:
        on disk under SYNC_FLUSH (else FLUSH_DISK_TIMEOUT), then on a slave under SYNC_MASTER
        (FLUSH_SLAVE_TIMEOUT after syncFlushTimeout; SLAVE_NOT_AVAILABLE at once with no slave in
        sync); PUT_OK at once when neither applies. ``done`` runs on whichever thread settles it
        (one that flushed, the one that took the slave's acknowledgement): it must be quick.

        ``flush_here``: the caller will call :meth:`flush_pending` on this thread before it waits for
        anything else (the broker's I/O thread does, after each round of requests)."""
        cfg = self.config
        if cfg.broker_role is not BrokerRole.SYNC_MASTER:
            if self.group_commit is not None:
                self.group_commit.when_flushed(offset, done, flush_here)
            else:
                done(PutMessageStatus.PUT_OK)
            return

        def flushed(status: PutMessageStatus) -> None:
            if status is not PutMessageStatus.PUT_OK:
                done(status)
            elif not self.replicas.in_sync(offset):
                done(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            else:
                self.replicas.when_acked(offset, done, cfg.sync_flush_timeout / 1000)

        if self.group_commit is not None:
            self.group_commit.when_flushed(offset, flushed, flush_here)
        else:
            flushed(PutMessageStatus.PUT_OK)

    def flush_pending(self) -> None:
        """Finish what puts left to this call (``finish_later``): dispatch their records, telling held pulls;
        then, under SYNC_FLUSH, flush for the waiters :meth:`when_durable` was told to flush here, on this
        thread (the flusher thread does it instead while fdatasyncs are slow). Cheap when nothing waits."""
        self.reput.dispatch_pending()
        if self.group_commit is not None:
            self.group_commit.flush_pending()

    def wait_durable(self, offset: int) -> PutMessageStatus:
        """:meth:`when_durable`, waited for on this thread."""
        # A held lock as the latch: released by the callback (cheaper than an Event on this path).
        settled = threading.Lock()
        settled.acquire()
        box: list[PutMessageStatus] = []

        def settle(status: PutMessageStatus) -> None:
            box.append(status)
            settled.release()
        self.when_durable(offset, settle)
        # Each stage calls back by its own timeout; this bound only guards against a stage that never does.
        if not settled.acquire(timeout=2 * self.config.sync_flush_timeout / 1000 + 1):
            return PutMessageStatus.FLUSH_DISK_TIMEOUT
        return box[0]

    # --- replication ---

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes:
        """A master: up to ``max_bytes`` of its commitlog from ``offset``, within one file (b"" when
        nothing is there yet)."""
        return self.commitlog.read_span(offset, max_bytes)

    def append_replica(self, offset: int, data: bytes) -> int:
        """A slave: append bytes of the master's commitlog that start at ``offset``; returns the new
        end. ReplicaGap when ``offset`` is not where this commitlog ends; the bytes are flushed
        before this returns under SYNC_FLUSH, and held pulls hear of the messages they complete."""
        if self.config.broker_role is not BrokerRole.SLAVE:
            raise ReplicaGap(self.commitlog.max_offset, f"this broker is a {self.config.broker_role.value}, "
                                                        "not a SLAVE: it takes no replicated bytes")
        if not data:
            return self.commitlog.max_offset
        end = self.commitlog.append_replica(offset, data)
        self.reput.dispatch_pending()
        if self.group_commit is not None:
            self.wait_durable(end)
        return end

    @property
    def max_physical_offset(self) -> int:
        """Where the commitlog ends (a slave: how far it has its master's)."""
        return self.commitlog.max_offset

    @property
    def min_physical_offset(self) -> int:
        return self.commitlog.min_offset

    # --- dispatch ---

    def register_arriving_listener(self, listener: ArrivingListener) -> None:
        """Call ``listener`` after every dispatch that grew a queue (the long-poll wake-up), on the thread
        that dispatched: the new messages are readable by then."""
        self.reput.listeners.append(listener)

    @property
    def dispatch_behind_bytes(self) -> int:
        """Commitlog bytes not in the consume queues and index yet (0 once a put has returned)."""
        return self.reput.behind_bytes

    # --- consume queues ---

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """``topic``/``queue_id``'s consume queue, None before its first message.

        Every reader of a queue gets it here: what puts wrote is dispatched first, so the queue holds
        every message whose put has returned."""
        self.reput.dispatch_pending()
        return self._queues.get((topic, queue_id))

    def consume_queues(self) -> list[ConsumeQueue]:
        self.reput.dispatch_pending()
        return list(self._queues.values())

    def _on_commitlog_flushed(self, offset: int) -> None:
        cp = self.checkpoint
        if cp.physic_flushed_offset != offset:
            cp.physic_flushed_offset = offset
            cp.physic_msg_timestamp = int(time.time() * 1000)
            cp.flush()

    # --- reading ---

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.max_offset if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.min_offset if cq else 0

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        entry = cq.get(offset) if cq else None
        return entry[0] if entry else 0

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        """True when the record at queue ``offset`` is too far behind the commitlog's end to still be in the
        page cache (``accessMessageInMemoryMaxRatio`` of the machine's memory); False when it is near, or
        when the queue has no such entry yet."""
        cq = self.find_consume_queue(topic, queue_id)
        entry = cq.get(offset) if cq else None
        if not entry:
            return False
        in_memory = _physical_memory() * self.config.access_message_in_memory_max_ratio // 100
        return self.commitlog.max_offset - entry[0] > in_memory

    def suggest_pulling_from_slave(self, result: GetMessageResult) -> bool:
        """True when what a pull read lies further behind the commitlog's end than the page cache holds
        (accessMessageInMemoryMaxRatio of the machine's memory): the master's cue to send a consumer
        to its slave, when slaveReadEnable."""
        in_memory = _physical_memory() * self.config.access_message_in_memory_max_ratio // 100
        return bool(result.records) and result.behind_bytes > in_memory

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """First queue offset whose message was stored at or after ``timestamp`` (ms)."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp, self.commitlog.store_timestamp_at)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        entry = cq.get(offset) if cq else None
        if not entry or entry[1] == BLANK_SIZE:
            return -1
        return self.commitlog.store_timestamp_at(entry[0])

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset)

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    message_filter: MessageFilter | None = None) -> GetMessageResult:
        """Read up to ``max_msg_nums`` records of one queue from ``offset`` (RocketMQ's getMessage)."""
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return self._count(GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0))
        min_off, max_off = cq.min_offset, cq.max_offset
        if max_off == 0:
            return self._count(GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_off, max_off))
        if offset < min_off:
            return self._count(GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_off, min_off, max_off))
        if offset == max_off:
            return self._count(GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_off, max_off))
        if offset > max_off:
            nxt = min_off if min_off == 0 else max_off
            return self._count(GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, nxt, min_off, max_off))

        max_bytes = self.config.max_transfer_bytes_on_message_in_memory
        records: list[bytes] = []
        queue_offsets: list[int] = []
        total_bytes = 0
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        commitlog = self.commitlog
        cl_min = commitlog.min_offset
        scan_limit = max(MAX_FILTER_ENTRIES, max_msg_nums)
        scanned = 0
        idx = offset
        next_offset = offset
        last_phys = 0
        done = False
        while not done and idx < max_off and scanned < scan_limit:
            seen = False
            for i, phys, size, tags in cq.iter_from(idx, scan_limit - scanned):
                seen = True
                scanned += 1
                next_offset = i + 1
                if size == BLANK_SIZE:
                    continue
                if phys < cl_min:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    continue
                rec = self._read_matching(phys, size, tags, message_filter)
                if rec is None:
                    continue
                if not rec:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    continue
                records.append(rec)
                queue_offsets.append(i)
                total_bytes += size
                last_phys = phys
                if len(records) >= max_msg_nums or total_bytes >= max_bytes:
                    done = True
                    break
            if not seen:
                if idx < cq.max_offset:
                    # The file holding ``idx`` is gone: go on from the next one.
                    status = GetMessageStatus.OFFSET_FOUND_NULL
                    next_offset = cq.roll_next_file(idx)
                break
            idx = next_offset
        if records:
            status = GetMessageStatus.FOUND
        behind = commitlog.max_offset - last_phys if records else 0
        result = GetMessageResult(status, next_offset, min_off, max_off, records, queue_offsets, behind)
        self.stats.get_message_transferred_msg_count += len(records)
        return self._count(result)

    def _read_matching(self, phys: int, size: int, tags_code: int,
                       message_filter: MessageFilter | None) -> bytes | None:
        """The record at ``phys`` if ``message_filter`` takes it (tag code first, then the record), None
        if it does not, b"" if the record is gone."""
        if message_filter is None:
            return self.commitlog.read(phys, size)
        if not message_filter.is_matched_by_consume_queue(tags_code):
            return None
        rec = self.commitlog.read(phys, size)
        if rec and not message_filter.is_matched_by_commit_log(rec):
            return None
        return rec

    def _count(self, result: GetMessageResult) -> GetMessageResult:
        if result.status is GetMessageStatus.FOUND:
            self.stats.get_message_times_total_found += 1
        else:
            self.stats.get_message_times_total_miss += 1
        return result

    def look_message_by_offset(self, commitlog_offset: int) -> MessageExt | None:
        """The message stored at ``commitlog_offset`` (the offset inside a message id), or None.

        Its body is as stored: a compressed one stays compressed, with its sysFlag bit, so that a copy the
        broker makes of it (retry, dead letter, delivery of a delayed message) is inflated once, by its
        consumer (see :mod:`rocketmesh.model.codec`).
        """
        rec = self.commitlog.read_record(commitlog_offset)
        if not rec:
            return None
        try:
            return decode_record(rec, inflate=False)
        except ValueError:
            return None

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int | None = None) -> QueryMessageResult:
        """Messages of ``topic`` indexed under ``key`` (a KEYS entry or UNIQ_KEY), stored within [begin, end]."""
        self.reput.dispatch_pending()
        end = end if end is not None else int(time.time() * 1000) + 1000
        index = self.dispatcher.index
        offsets = index.query_offsets(topic, key, max_num * 2 + 8, begin, end)
        records = []
        for phys in offsets:
            if phys < self.commitlog.min_offset:
                continue
            rec = self.commitlog.read_record(phys)
            if not rec:
                continue
            try:
                msg = decode_record(rec, inflate=False)  # only its keys are read here
            except ValueError:
                continue
            keys = (msg.keys or "").split(MessageConst.KEY_SEPARATOR)
            if msg.topic == topic and (key in keys or msg.unique_key == key) and begin <= msg.store_timestamp <= end:
                records.append(rec)
                if len(records) >= max_num:
                    break
        ts, phy = index.last_update()
        return QueryMessageResult(records, ts, phy)

    # --- administration ---

    def delete_topics(self, topics: Iterable[str]) -> int:
        """Delete the consume queues of ``topics`` (their commitlog records expire as usual); a later
        message of one of them starts its queue at offset 0 again. Returns how many queues went."""
        topics = set(topics)
        with self.commitlog.put_lock:  # no put of theirs in between
            self.reput.dispatch_pending()
            with self.reput.lock:
                table = self.commitlog.topic_queue_table
                for key in [k for k in table if k[0] in topics]:
                    del table[key]
                return self.dispatcher.delete_topics(topics)

    def clean_logics(self) -> None:
        """After commitlog files went: delete the queue and index files that point only below them."""
        with self.reput.lock:
            self.dispatcher.delete_expired(self.commitlog.min_offset)

    def topics(self) -> set[str]:
        self.reput.dispatch_pending()
        # list() copies the keys in one step: a first put may add a queue meanwhile.
        return {t for t, _ in list(self._queues)}

    def queue_ids(self, topic: str) -> list[int]:
        self.reput.dispatch_pending()
        return sorted(q for t, q in list(self._queues) if t == topic)

    def delete_expired_files_now(self) -> None:
        """Ask the clean service to delete expired files on its next turn, whatever the hour."""
        self.cleaner.request_delete_now()

    def runtime_info(self) -> dict[str, object]:
        """Figures for GET_BROKER_RUNTIME_INFO."""
        st = self.stats
        return {
            "putMessageTimesTotal": st.put_message_times_total,
            "putMessageSizeTotal": st.put_message_size_total,
            "putMessageFailedTimes": st.put_message_failed_times,
            "getMessageTimesTotalFound": st.get_message_times_total_found,
            "getMessageTimesTotalMiss": st.get_message_times_total_miss,
            "getMessageTransferedMsgCount": st.get_message_transferred_msg_count,
            "commitLogMinOffset": self.commitlog.min_offset,
            "commitLogMaxOffset": self.commitlog.max_offset,
            "dispatchBehindBytes": self.dispatch_behind_bytes,
            "dispatchFailedTimes": self.reput.failed_times,
            "commitLogDiskRatio": round(disk_used_ratio(self.config.store_path_root_dir), 4),
            "flushDiskType": self.config.flush_disk_type.value,
            "bootTimestamp": int(st.started_at * 1000),
        }
