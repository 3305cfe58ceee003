"""Flush modes: SYNC_FLUSH group commit, timeouts reported, ASYNC_FLUSH flusher."""

import threading
import time

from rocketmesh.broker.store import FlushDiskType, PutMessageStatus

from storekit import msg, open_store


def test_sync_flush_acknowledges_only_flushed_data_and_groups_commits(tmp_path):
    store = open_store(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                       mapped_file_size_commit_log=1024 * 1024)
    results = []
    lock = threading.Lock()

    def writer(n):
        for i in range(n):
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
