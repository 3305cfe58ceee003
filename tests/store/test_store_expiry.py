"""Expiry: old commitlog files go at deleteWhen, on request or past the disk watermark; readers get OFFSET_TOO_SMALL."""

import os
import time

from procs import wait_for
from rocketmesh.broker.store import GetMessageStatus
from rocketmesh.model.codec import decode_record
from storekit import msg, open_store

HOUR = 3600


def fill(store, n=120):
    for i in range(n):
        store.put_message(msg(body=os.urandom(600), queue_id=i % 2, keys=f"k{i}"))


def age_commitlog(root, hours):
    """Make every commitlog file look ``hours`` old (the newest is never deleted anyway)."""
    then = time.time() - hours * HOUR
    for name in os.listdir(root / "commitlog"):
        os.utime(root / "commitlog" / name, (then, then))


def not_now_hour():
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


def test_expired_files_stay_outside_delete_hour_and_go_on_request(tmp_path):
    store = open_store(tmp_path, file_reserved_time=1, delete_when=not_now_hour(),
                       delete_commit_log_files_interval=0, max_index_num=40)
    try:
        fill(store)
        files_before = sorted(os.listdir(tmp_path / "commitlog"))
        index_before = len(os.listdir(tmp_path / "index"))
        age_commitlog(tmp_path, 2)
        assert store.cleaner.clean_once() == 0  # not the hour, disk not full: nothing goes
        assert sorted(os.listdir(tmp_path / "commitlog")) == files_before

        store.delete_expired_files_now()
        store.cleaner.clean_once()
        # The request also wakes the store's own clean thread, which may take it first: its round (commitlog
        # files, then the queue and index files that pointed only into them) may still be running here.
        wait_for(lambda: len(os.listdir(tmp_path / "index")) < index_before
                 and all(store.get_min_offset_in_queue("TopicTest", q) > 0 for q in (0, 1)),
                 10, what="the clean round the request started, to its end")
        left = sorted(os.listdir(tmp_path / "commitlog"))
        assert len(left) < len(files_before) and left[0] != files_before[0]
        cl_min = store.commitlog.min_offset
        assert cl_min == int(left[0]) > 0

        for qid in (0, 1):
            lo = store.get_min_offset_in_queue("TopicTest", qid)
            assert lo > 0
            r = store.get_message("g", "TopicTest", qid, 0, 32)
            assert r.status is GetMessageStatus.OFFSET_TOO_SMALL and r.next_begin_offset == lo
            r = store.get_message("g", "TopicTest", qid, lo, 32)
            assert r.status is GetMessageStatus.FOUND
            assert decode_record(r.records[0]).commitlog_offset >= cl_min
        assert store.query_message("TopicTest", "k0").records == []
        assert len(store.query_message("TopicTest", "k119").records) == 1
        assert len(os.listdir(tmp_path / "index")) < index_before
    finally:
        store.shutdown()


def test_unexpired_files_stay_even_on_request(tmp_path):
    store = open_store(tmp_path, file_reserved_time=72, delete_commit_log_files_interval=0)
    try:
        fill(store)
        before = os.listdir(tmp_path / "commitlog")
        store.delete_expired_files_now()
        store.cleaner.clean_once()
        # Every file is still there (the commitlog may have made its next file ahead of need meanwhile).
        assert set(before) <= set(os.listdir(tmp_path / "commitlog"))
        assert store.commitlog.min_offset == 0
    finally:
        store.shutdown()


def test_disk_watermark_triggers_cleaning_and_forcibly_removes_unexpired(tmp_path):
    # Past diskMaxUsedSpaceRatio expired files go whatever the hour.
    store = open_store(tmp_path, file_reserved_time=1, delete_when=not_now_hour(),
                       disk_max_used_space_ratio=0, delete_commit_log_files_interval=0)
    try:
        fill(store)
        age_commitlog(tmp_path, 2)
        assert store.cleaner.clean_once() > 0
        assert store.commitlog.min_offset > 0
    finally:
        store.shutdown()

    # Past diskSpaceCleanForciblyRatio even young files go (never the newest).
    store = open_store(tmp_path / "forced", file_reserved_time=72, delete_when=not_now_hour(),
                       disk_max_used_space_ratio=0, disk_space_clean_forcibly_ratio=0,
                       delete_commit_log_files_interval=0)
    try:
        fill(store)
        assert store.cleaner.clean_once() > 0
        assert store.commitlog.min_offset > 0
        assert store.put_message(msg(body=b"still writable")).ok
    finally:
        store.shutdown()
