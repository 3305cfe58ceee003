"""Flush modes: SYNC_FLUSH group commit, timeouts reported, ASYNC_FLUSH flusher."""

import os
import threading
import time

from rocketmesh.broker.store import FlushDiskType, PutMessageStatus, flush
from storekit import msg, open_store


def test_sync_flush_acknowledges_only_flushed_data_and_groups_commits(tmp_path):
    store = open_store(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                       mapped_file_size_commit_log=1024 * 1024)
    results = []
    lock = threading.Lock()

    def writer(n):
        for _i in range(n):
            r = store.put_message(msg(body=b"x" * 512))
            with lock:
                results.append(r)
                # The put returned, so the commitlog is on disk past this record.
                assert store.commitlog.queue.flushed_where >= r.first.wrote_offset + r.first.wrote_bytes

    try:
        threads = [threading.Thread(target=writer, args=(50,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 400 and all(r.status is PutMessageStatus.PUT_OK for r in results)
        # Concurrent puts shared fsyncs: far fewer flushes than puts.
        assert store.group_commit.flush_count < 400
    finally:
        store.shutdown()


def test_sync_flush_timeout_is_reported_not_hidden(tmp_path):
    store = open_store(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=0)
    try:
        r = store.put_message(msg(body=b"late"))
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert r.status.stored  # written, just not confirmed on disk in time
        assert store.look_message_by_offset(r.first.wrote_offset).body == b"late"
    finally:
        store.shutdown()


def test_async_flush_flushes_in_the_background(tmp_path):
    store = open_store(tmp_path, flush_interval_commit_log=20, flush_commit_log_least_pages=0)
    try:
        r = store.put_message(msg(body=b"x" * 100))
        end = r.first.wrote_offset + r.first.wrote_bytes
        deadline = time.monotonic() + 5
        while store.commitlog.queue.flushed_where < end and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.commitlog.queue.flushed_where >= end
    finally:
        store.shutdown()


def _put_and_wait_here(store, n):
    """Store ``n`` messages the way the broker's I/O thread does: each waiter left to flush_pending."""
    called = []
    for _ in range(n):
        r = store.put_messages([msg(body=b"x" * 256)], wait_flush=False)
        end = r.first.wrote_offset + r.first.wrote_bytes
        store.when_durable(end, lambda status, end=end: called.append(
            (status, threading.get_ident(), store.commitlog.queue.flushed_where >= end)), flush_here=True)
    return called


def test_sends_left_to_flush_pending_share_one_fdatasync_on_the_calling_thread(tmp_path, monkeypatch):
    # The flusher thread takes over waiters that waited past the fallback, and everything after a slow
    # fdatasync (a loaded disk): not within this test (the next one is about that).
    monkeypatch.setattr(flush, "_FALLBACK_S", 5.0)
    monkeypatch.setattr(flush, "INLINE_FLUSH_MAX_MS", 60_000.0)
    store = open_store(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1024 * 1024)
    try:
        for _ in range(3):
            flushes = store.group_commit.flush_count
            called = _put_and_wait_here(store, 20)
            store.flush_pending()
            # Answered by the time flush_pending returns: all on disk, by this thread, with one fdatasync.
            assert called == [(PutMessageStatus.PUT_OK, threading.get_ident(), True)] * 20
            assert store.group_commit.flush_count == flushes + 1
        store.flush_pending()  # nothing waits: nothing to do
        assert store.group_commit.flush_count == flushes + 1
    finally:
        store.shutdown()


def test_the_flusher_thread_answers_waiters_when_flush_pending_never_comes(tmp_path):
    store = open_store(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1024 * 1024)
    try:
        called = _put_and_wait_here(store, 5)
        deadline = time.monotonic() + 5
        while len(called) < 5 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert [(status, on_disk) for status, _, on_disk in called] == [(PutMessageStatus.PUT_OK, True)] * 5
        assert {tid for _, tid, _ in called} != {threading.get_ident()}
    finally:
        store.shutdown()


def test_slow_fdatasyncs_go_back_to_the_flusher_thread(tmp_path, monkeypatch):
    """A disk whose fdatasync takes milliseconds must not stall the thread that reads requests."""
    real = os.fdatasync

    def slow_fdatasync(fd):
        time.sleep(0.02)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    store = open_store(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=1024 * 1024)
    try:
        _put_and_wait_here(store, 1)
        store.flush_pending()  # the first slow flush, done here: it tells the store fdatasyncs are slow
        called = _put_and_wait_here(store, 10)
        store.flush_pending()  # hands over to the flusher thread rather than flush here
        deadline = time.monotonic() + 5
        while len(called) < 10 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert [(status, on_disk) for status, _, on_disk in called] == [(PutMessageStatus.PUT_OK, True)] * 10
        assert threading.get_ident() not in {tid for _, tid, _ in called}
    finally:
        store.shutdown()
