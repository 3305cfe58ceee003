"""Many topics cost little disk, as in RocketMQ: only commitlog files are reserved up front; consume
queues and index files are sparse. And a dispatch worker whose broker died stops instead of writing on."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from procs import child_pids, freeze, thaw, wait_for
from rocketmesh import Message, Producer
from storekit import msg, open_store


def allocated_and_apparent(folder: Path) -> tuple[int, int]:
    """Bytes of disk the files under ``folder`` take, and their sizes."""
    allocated = apparent = 0
    for path in folder.rglob("*"):
        if path.is_file():
            st = path.stat()
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return allocated, apparent


def test_consume_queues_and_index_take_disk_only_for_what_they_hold(tmp_path: Path) -> None:
    cq_size = 20 * 30_000  # 600 KB per consume-queue file
    store = open_store(tmp_path, mapped_file_size_consume_queue=cq_size, max_hash_slot_num=50_000,
                       max_index_num=200_000, mapped_file_size_commit_log=1024 * 1024)
    try:
        for t in range(100):
            for q in range(4):
                assert store.put_message(msg(f"Many{t}", b"x" * 100, queue_id=q, keys=f"k{t}")).ok
        assert store.wait_dispatched(30)
    finally:
        store.shutdown()
    queues = tmp_path / "consumequeue"
    allocated, apparent = allocated_and_apparent(queues)
    assert apparent == 400 * cq_size
    assert allocated < apparent // 20, f"400 consume queues with one entry each take {allocated} bytes"
    allocated, apparent = allocated_and_apparent(tmp_path / "index")
    assert apparent > 4_000_000 and allocated < apparent // 10, (allocated, apparent)
    # The commitlog keeps its reserved blocks (appends into them are cheaper).
    allocated, apparent = allocated_and_apparent(tmp_path / "commitlog")
    assert allocated >= apparent


def test_a_dispatch_worker_whose_broker_died_stops_without_finishing_its_backlog(namesrv, broker) -> None:
    # The broker asks its worker to finish the backlog when it stops, and is killed while it waits
    # (as a supervisor does to a broker slow to stop): the worker must not go on writing alone.
    [worker] = child_pids(broker.pid)
    freeze(worker)
    try:
        with Producer("orphan-producer", namesrv.addr) as producer:
            for _ in range(40):  # 20,000 records: several of the worker's read chunks
                producer.send_batch([Message("OrphanTopic", b"y" * 64) for _ in range(500)])
        broker.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "dispatch_worker_stopping" in broker.stderr_text(), 30, "the broker asking its worker to stop")
        time.sleep(0.5)  # the request follows the log line at once
        os.kill(broker.pid, signal.SIGKILL)
        broker.proc.wait(10)
    finally:
        thaw(worker)
    wait_for(lambda: not os.path.exists(f"/proc/{worker}") or _zombie(worker), 30, "the orphaned worker gone")
    entries = 0
    for path in (broker.store_dir / "consumequeue" / "OrphanTopic").rglob("0*"):
        data = path.read_bytes()
        entries += sum(1 for i in range(0, len(data), 20) if data[i + 8:i + 12] != b"\0\0\0\0")
    assert entries < 20_000, "the worker dispatched the whole backlog after its broker was gone"


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
