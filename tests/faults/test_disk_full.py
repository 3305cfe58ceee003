"""Fault: the broker's store on a small filesystem that fills up (a 16 MB tmpfs).

Sends are refused with SERVICE_NOT_AVAILABLE and a remark naming the path, its use and the limit
before anything is corrupted; consumers still read everything that was acknowledged; once space is
freed the broker notices within its check interval (cleanResourceInterval) and takes sends again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultload import Deliveries, start_consumer
from storefaultkit import tmpfs

from procs import BrokerProcess, NamesrvProcess, wait_for
from rocketmesh import Message, Producer
from rocketmesh.broker.store import GetMessageStatus, PutMessageStatus
from rocketmesh.client.errors import MQBrokerError
from rocketmesh.remoting import ResponseCode
from storekit import msg, open_store

TOPIC = "DiskFullTopic"
#: The filesystem, and how much of it the filler leaves to the store's growth.
FS_SIZE = "16m"
LEFT_FOR_STORE = 4 * 1024 * 1024
#: The broker's disk check runs every cleanResourceInterval; short, so the case is quick.
CHECK_INTERVAL_MS = 300


def body(key: str) -> str:
    """A 1 KiB body that names its message."""
    return key.ljust(1024, ".")
#: Bounds: sends before the disk must have filled, and seconds for each phase.
MAX_SENDS = 20_000
PHASE_S = 60.0


@pytest.fixture
def small_store(tmp_path: Path) -> Iterator[Path]:
    """The broker's store folder, a 16 MB tmpfs (unmounted at teardown, after the broker stopped)."""
    with tmpfs(tmp_path / "broker" / "store", FS_SIZE) as mount:
        yield mount


@pytest.fixture
def disk_broker(tmp_path: Path, namesrv: NamesrvProcess, small_store: Path) -> Iterator[BrokerProcess]:
    # Built here rather than by start_broker: its store must be the mounted folder, and it must stop
    # before the filesystem is unmounted (this fixture's teardown runs before small_store's).
    # cleanFileForciblyEnable=false: past diskSpaceCleanForciblyRatio RocketMQ deletes the oldest
    # commitlog files even unexpired; this case is about refusing writes, not about losing reads.
    proc = BrokerProcess(tmp_path / "broker", namesrv.addr, mappedFileSizeCommitLog=1024 * 1024,
                         cleanResourceInterval=CHECK_INTERVAL_MS, cleanFileForciblyEnable="false")
    assert proc.store_dir == small_store
    try:
        proc.start(timeout_s=30)
        proc.wait_registered()
        yield proc
    finally:
        proc.stop()


def fill(mount: Path, leave: int) -> Path:
    """A file taking all of ``mount``'s free space but ``leave`` bytes (its blocks reserved)."""
    filler = mount / "filler"
    free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.posix_fallocate(fd, 0, max(4096, free - leave))
    finally:
        os.close(fd)
    return filler


def file_sizes(folder: Path) -> list[int]:
    """The sizes of the files in ``folder`` still there when looked at (another thread may remove one)."""
    sizes = []
    for p in folder.iterdir():
        try:
            sizes.append(p.stat().st_size)
        except FileNotFoundError:
            continue
    return sizes


def test_a_full_disk_refuses_sends_clearly_keeps_reads_and_recovers(
        namesrv: NamesrvProcess, disk_broker: BrokerProcess, small_store: Path, reliability) -> None:
    acked: list[str] = []
    sent = 0
    refusals: list[MQBrokerError] = []
    filler = fill(small_store, LEFT_FOR_STORE)
    with Producer("disk-full-producer", namesrv.addr, send_msg_timeout_ms=3000) as producer:
        # Fill the rest with messages until the broker refuses; a refusal must be the disk-full one.
        deadline = time.monotonic() + PHASE_S
        while sent < MAX_SENDS and time.monotonic() < deadline:
            key = f"k{sent}"
            sent += 1
            try:
                producer.send(Message(TOPIC, body(key).encode()))
                acked.append(body(key))
            except MQBrokerError as exc:
                refusals.append(exc)
                if len(refusals) >= 3:
                    break
            time.sleep(0.0005)  # a steady rate: the disk check runs between sends
        assert refusals, f"{sent} sends of 1 KiB into a {FS_SIZE} filesystem and none refused"
        first = refusals[0]
        codes = {ResponseCode(e.response_code).name for e in refusals}
        assert codes == {"SERVICE_NOT_AVAILABLE"}, [str(e) for e in refusals]
        remark = first.remark
        assert "disk" in remark and str(small_store) in remark and "%" in remark \
            and "diskSpaceWarningLevelRatio" in remark, remark
        assert disk_broker.alive, disk_broker.output()

        # Reads keep working: everything acknowledged is consumed.
        got = Deliveries()
        consumer = start_consumer(namesrv.addr, "disk-full-readers", TOPIC, got)
        try:
            wait_for(lambda: not got.missing(acked), 30, "every acknowledged message consumed")
            # Sends are still refused while the disk stays full.
            with pytest.raises(MQBrokerError) as still:
                producer.send(Message(TOPIC, body("still-full").encode()))
            assert still.value.response_code == ResponseCode.SERVICE_NOT_AVAILABLE

            # Free the space: sends resume within the check interval (and a few retries' slack).
            filler.unlink()
            freed = time.monotonic()
            resumed = None
            while resumed is None and time.monotonic() - freed < 10:
                try:
                    producer.send(Message(TOPIC, body("after-free").encode()))
                    resumed = time.monotonic() - freed
                    acked.append(body("after-free"))
                except MQBrokerError:
                    time.sleep(0.05)
            assert resumed is not None, "sends not taken again 10 s after the space was freed"
            for i in range(50):
                producer.send(Message(TOPIC, body(f"after{i}").encode()))
                acked.append(body(f"after{i}"))
            wait_for(lambda: not got.missing(acked), 30, "the messages sent after recovery consumed")
        finally:
            consumer.shutdown()
    assert disk_broker.alive
    assert "store_disk_full" in disk_broker.stderr_text() + disk_broker.stdout_text()
    assert set(got.count) <= set(acked), "a consumer got a message that is not one of those acknowledged"
    lost = len(got.missing(acked))
    reliability.fault(f"disk full ({FS_SIZE} tmpfs store)", cycles=1, sent=sent + 51, acknowledged=len(acked),
                      lost=lost, duplicated=got.duplicated(), recovery_s=[resumed],
                      note=f"refused with {ResponseCode(first.response_code).name}: {remark}; "
                           f"sends resumed {resumed:.2f} s after the filler was deleted "
                           f"(check interval {CHECK_INTERVAL_MS} ms)")
    assert lost == 0


def test_no_room_for_the_next_commitlog_file_refuses_the_put_and_stops_writes(tmp_path: Path) -> None:
    # The check's limit is out of the way (100%): the store must still neither map a file the full
    # filesystem cannot back (a store into it would be SIGBUS) nor leave a half-made file behind.
    with tmpfs(tmp_path / "store", "4m") as mount:
        size = 1024 * 1024
        store = open_store(mount, mapped_file_size_commit_log=size, disk_space_warning_level_ratio=100)
        commitlog = mount / "commitlog"
        try:
            assert store.put_message(msg(body=b"first", keys="first")).ok
            # The first file and its successor, made ahead of need, hold their blocks before the filler
            # takes the rest: the roll to the successor then finds no room for a third.
            wait_for(lambda: sum(p.stat().st_blocks * 512 for p in commitlog.iterdir()) == 2 * size,
                     10, "the commitlog's next file made ahead of need")
            filler = fill(mount, 512 * 1024)
            statuses = [PutMessageStatus.PUT_OK]
            for i in range(4000):
                r = store.put_message(msg(body=b"e" * 1024, keys=f"e{i}"))
                statuses.append(r.status)
                if not r.ok:
                    break
            # Which store file meets the full disk first depends on when the commitlog makes its next file
            # ahead of need: the next commitlog file (the put is refused), or a consume-queue or index page
            # of a put already in the commitlog (that put is stored, and the next one is refused).
            assert statuses[-1] in (PutMessageStatus.CREATE_MAPEDFILE_FAILED,
                                    PutMessageStatus.SERVICE_NOT_AVAILABLE), statuses[-3:]
            stored = len(statuses) - 1
            again = store.put_message(msg(body=b"e"))
            assert again.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk is full" in again.remark
            # A third file being made ahead of need when the disk filled is removed by its maker.
            wait_for(lambda: all(n == size for n in file_sizes(commitlog)), 10,
                     "no half-made commitlog file left")
            got = store.get_message("g", "TopicTest", 0, 0, 32)
            assert got.status is GetMessageStatus.FOUND
            os.unlink(filler)
            assert store.get_max_offset_in_queue("TopicTest", 0) == stored
        finally:
            store.shutdown()


def test_a_put_whose_queue_entries_find_no_room_is_kept_and_readable_once_there_is_room(tmp_path: Path) -> None:
    # The commitlog file has room; the consume queue's and the index's next pages do not. The put that
    # wrote its record is stored (PUT_OK: the record is in the commitlog), its dispatch fails, writes stop,
    # and the entries are built by the first read after space is freed.
    size = 2 * 1024 * 1024
    with tmpfs(tmp_path / "store", "8m") as mount:
        store = open_store(mount, mapped_file_size_commit_log=size, disk_space_warning_level_ratio=100)
        try:
            assert store.put_message(msg(body=b"first", keys="k-first")).ok
            # The commitlog's first file and the next, made ahead of need, have their blocks.
            wait_for(lambda: sum(os.stat(p).st_blocks * 512 for p in (mount / "commitlog").iterdir()) == 2 * size,
                     10, "the commitlog's next file made ahead of need")
            filler = fill(mount, 16 * 1024)
            stored = 1
            refused = None
            for i in range(2000):
                r = store.put_message(msg(body=b"e" * 100, keys=f"k{i}"))
                if not r.ok:
                    refused = r
                    break
                stored += 1
            assert refused is not None, "a full disk never stopped the puts"
            assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk is full" in refused.remark
            info = store.runtime_info()
            assert info["dispatchFailedTimes"] >= 1 and info["dispatchBehindBytes"] > 0
            assert store.get_max_offset_in_queue("TopicTest", 0) < stored  # not readable yet, and no error
            os.unlink(filler)
            assert store.get_max_offset_in_queue("TopicTest", 0) == stored
            assert store.runtime_info()["dispatchBehindBytes"] == 0
            last = store.query_message("TopicTest", f"k{stored - 2}")
            assert len(last.records) == 1
            got = store.get_message("g", "TopicTest", 0, 0, stored)
            assert got.status is GetMessageStatus.FOUND and len(got.records) == stored
        finally:
            store.shutdown()
