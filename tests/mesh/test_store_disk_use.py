"""Many topics cost little disk, as in RocketMQ: commitlog files are reserved up front, consume queues are
sparse, and an index file reserves its hash slots and its entries only a run ahead of use."""

from __future__ import annotations

from pathlib import Path

from rocketmesh.broker.store.index.index_file import ENTRY_SIZE, HEADER_SIZE, RESERVE_AHEAD_ENTRIES, SLOT_SIZE
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
    finally:
        store.shutdown()
    queues = tmp_path / "consumequeue"
    allocated, apparent = allocated_and_apparent(queues)
    assert apparent == 400 * cq_size
    assert allocated < apparent // 20, f"400 consume queues with one entry each take {allocated} bytes"
    allocated, apparent = allocated_and_apparent(tmp_path / "index")
    # 800 entries held: the header and slots, those entries and the run reserved ahead of them, not 4 MB.
    ahead = (800 + RESERVE_AHEAD_ENTRIES) * ENTRY_SIZE
    assert apparent > 4_000_000 and allocated <= HEADER_SIZE + 50_000 * SLOT_SIZE + ahead + 2 * 4096, \
        (allocated, apparent)
    # The commitlog keeps its reserved blocks (appends into them are cheaper).
    allocated, apparent = allocated_and_apparent(tmp_path / "commitlog")
    assert allocated >= apparent
