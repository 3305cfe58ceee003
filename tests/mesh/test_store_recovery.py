"""Checkpoint and recovery: clean restarts, SIGKILL mid-stream, torn and corrupt tails."""

import os
import signal
import subprocess
import sys
import time

from procs import wait_for
from rocketmesh.broker.store import GetMessageStatus
from rocketmesh.model.codec import decode_record
from storekit import check_queues_agree_with_commitlog, msg, open_store

WRITER = os.path.join(os.path.dirname(os.path.dirname(__file__)), "store_crash_writer.py")


def test_clean_restart_keeps_everything_and_continues_offsets(tmp_path):
    store = open_store(tmp_path)
    for i in range(50):
        store.put_message(msg(body=b"m%d" % i, queue_id=i % 2, keys=f"k{i}"))
    store.shutdown()
    assert not (tmp_path / "abort").exists()

    store = open_store(tmp_path)
    try:
        assert store.last_exit_ok
        assert store.get_max_offset_in_queue("TopicTest", 0) == 25
        r = store.put_message(msg(queue_id=0))
        assert r.first.queue_offset == 25
        assert check_queues_agree_with_commitlog(store) == 51
        assert len(store.query_message("TopicTest", "k7").records) == 1
    finally:
        store.shutdown()


def read_acks(proc, want, timeout=60):
    acks = []
    deadline = time.monotonic() + timeout
    while len(acks) < want and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("ACK "):
            acks.append(line.split())
    return acks


def write_then_kill(root, threads: int, at_least: int) -> list[list[str]]:
    """Run the SYNC_FLUSH writer, SIGKILL it mid-stream once ``at_least`` puts are acknowledged."""
    proc = subprocess.Popen([sys.executable, WRITER, str(root), str(threads)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        acks = read_acks(proc, at_least)
        os.kill(proc.pid, signal.SIGKILL)
        # Lines acknowledged before the kill landed are still in the pipe.
        acks += [ln.split() for ln in proc.stdout.read().splitlines() if ln.startswith("ACK ")]
    finally:
        proc.kill()
        proc.wait(10)
    return acks


def test_sigkill_mid_stream_loses_no_acknowledged_message(tmp_path):
    acks = write_then_kill(tmp_path, threads=4, at_least=400)
    assert len(acks) >= 400
    assert (tmp_path / "abort").exists()  # it did not shut down cleanly

    store = open_store(tmp_path)
    try:
        assert not store.last_exit_ok
        for _, t, seq, phys, qid, qoff, body_hex in acks:
            m = store.look_message_by_offset(int(phys))
            assert m is not None, f"acknowledged message t{t}-s{seq} lost"
            assert m.body == bytes.fromhex(body_hex) and m.keys == f"t{t}-s{seq}"
            assert (m.queue_id, m.queue_offset) == (int(qid), int(qoff))
            got = store.get_message("g", "TopicTest", int(qid), int(qoff), 1)
            assert got.status is GetMessageStatus.FOUND and decode_record(got.records[0]).body == m.body
        assert check_queues_agree_with_commitlog(store) >= len(acks)
        t, seq = acks[-1][1], acks[-1][2]
        assert len(store.query_message("TopicTest", f"t{t}-s{seq}").records) == 1
        # New writes continue each queue without a gap.
        for q in range(4):
            top = store.get_max_offset_in_queue("TopicTest", q)
            assert store.put_message(msg(queue_id=q)).first.queue_offset == top
    finally:
        store.shutdown()


FILE_SIZE = 16 * 1024  # storekit's commitlog file size


def flip_body_bytes(root, phys: int) -> None:
    """Damage the record at commitlog offset ``phys``: invert four bytes of its body (its CRC no longer holds)."""
    path = root / "commitlog" / f"{phys - phys % FILE_SIZE:020d}"
    with open(path, "r+b") as f:
        f.seek(phys % FILE_SIZE + 88 + 3)
        b = f.read(4)
        f.seek(phys % FILE_SIZE + 88 + 3)
        f.write(bytes(x ^ 0xFF for x in b))


def test_corrupt_tail_after_crash_is_truncated_not_served(tmp_path):
    acks = write_then_kill(tmp_path, threads=2, at_least=200)
    acks.sort(key=lambda a: int(a[3]))
    victim = acks[-5]  # flip bytes inside the body of the fifth-last record
    phys = int(victim[3])
    flip_body_bytes(tmp_path, phys)

    store = open_store(tmp_path)
    try:
        assert store.commitlog.max_offset == phys  # cut at the corrupt record
        assert store.look_message_by_offset(phys) is None
        for a in acks[:-5]:
            assert store.look_message_by_offset(int(a[3])).body == bytes.fromhex(a[6])
        for a in acks[-5:]:
            qid, qoff = int(a[4]), int(a[5])
            got = store.get_message("g", "TopicTest", qid, qoff, 1)
            assert got.status is not GetMessageStatus.FOUND or \
                decode_record(got.records[0]).commitlog_offset < phys
            assert store.query_message("TopicTest", f"t{a[1]}-s{a[2]}").records == []
        check_queues_agree_with_commitlog(store)
        # The cut region is reused by new writes and served correctly.
        r = store.put_message(msg(body=b"after", queue_id=0, keys="after"))
        assert r.first.wrote_offset == phys
        assert [decode_record(x).body for x in store.query_message("TopicTest", "after").records] == [b"after"]
    finally:
        store.shutdown()


def test_after_a_crash_the_last_two_files_with_records_are_checked_not_the_empty_one_made_ahead(tmp_path):
    # The commitlog makes its next file before it is needed. After a crash the walk with CRC checks
    # covers at least the last two files: two that hold records, so the checkpoint cannot hide a
    # damaged record one file back.
    store = open_store(tmp_path)
    offsets = []
    while not offsets or offsets[-1] < FILE_SIZE + 2000:
        offsets.append(store.put_message(msg(body=os.urandom(900), keys=f"k{len(offsets)}")).first.wrote_offset)
    made_ahead = tmp_path / "commitlog" / f"{2 * FILE_SIZE:020d}"
    wait_for(made_ahead.exists, 10, "the third commitlog file made ahead")
    # Everything flushed and checkpointed, then the broker died before it could say it stopped cleanly: the
    # disk as a crash leaves it has the abort file and the made-ahead file (a clean stop deletes the latter).
    store.shutdown()
    (tmp_path / "abort").touch()
    made_ahead.write_bytes(bytes(FILE_SIZE))

    victim = max(o for o in offsets if o < FILE_SIZE)  # the first file's last record
    flip_body_bytes(tmp_path, victim)
    store = open_store(tmp_path)
    try:
        assert not store.last_exit_ok
        assert store.commitlog.max_offset == victim
        assert store.look_message_by_offset(victim) is None
        assert store.query_message("TopicTest", f"k{offsets.index(victim)}").records == []
        assert store.look_message_by_offset(offsets[0]).keys == "k0"
        check_queues_agree_with_commitlog(store)
    finally:
        store.shutdown()
