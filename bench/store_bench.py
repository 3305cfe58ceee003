"""Store engine benchmark: put + dispatch and consume-queue reads, in-process.

    python bench/store_bench.py [--count 200000] [--body 1024] [--dir /tmp/rocketmesh-bench]

Puts 1 KiB messages one by one and in batches of 32 under ASYNC_FLUSH and
SYNC_FLUSH (as a list of messages, and as a SEND_BATCH_MESSAGE body the way
the broker stores a producer's batch), each message carrying a UNIQ_KEY as a producer sets it (so the
index is built too). A put run starts on a store that has its first files (as
a running broker has) and its clock stops when the dispatcher has built every
consume queue and index entry. Reads go through the consume queue in
pulls of 32. A roll-over run puts lists of 32 from an empty store across two
256 MiB commitlog files and reports its slowest put, the one that met a
roll-over. Each figure is the median of --repeat runs. The disk's sequential
write rate (dd, 1 MiB blocks, fdatasync at the end) is printed beside them as
the limit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from rocketmesh.broker.store import (
    FlushDiskType,
    MessageExtBatch,
    MessageExtBrokerInner,
    MessageStore,
    MessageStoreConfig,
)
from rocketmesh.model.codec import encode_batch, encode_properties
from rocketmesh.model.message import Message, MessageConst

TOPIC = "BenchTopic"
QUEUES = 4


def make_messages(n: int, body: bytes) -> list[MessageExtBrokerInner]:
    prefix = uuid.uuid4().hex[:16].upper()
    born = int(time.time() * 1000)
    return [MessageExtBrokerInner(
        topic=TOPIC, body=body, queue_id=i % QUEUES, born_timestamp=born,
        properties=encode_properties({MessageConst.TAGS: "TagA",
                                      MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"{prefix}{i:016X}"}))
        for i in range(n)]


def make_wire_batches(n: int, body: bytes, size: int) -> list[MessageExtBatch]:
    """``n`` messages as producer batch bodies of ``size``, each batch to the next queue."""
    prefix = uuid.uuid4().hex[:16].upper()
    born = int(time.time() * 1000)
    out = []
    for start in range(0, n, size):
        msgs = [Message(TOPIC, body, tags="TagA",
                        properties={MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"{prefix}{i:016X}"})
                for i in range(start, min(n, start + size))]
        out.append(MessageExtBatch(TOPIC, (start // size) % QUEUES, encode_batch(msgs), born_timestamp=born))
    return out


def open_store(root: str, flush: FlushDiskType) -> MessageStore:
    shutil.rmtree(root, ignore_errors=True)
    store = MessageStore(MessageStoreConfig(store_path_root_dir=root, flush_disk_type=flush,
                                            mapped_file_size_commit_log=256 * 1024 * 1024))
    store.start()
    return store


def bench_put(root: str, flush: FlushDiskType, n: int, body: bytes, batch: int, wire: bool = False) -> float:
    msgs = make_wire_batches(n, body, batch) if wire else make_messages(n, body)
    store = open_store(root, flush)
    try:
        # Steady state: the first commitlog and index files exist before the clock starts
        # (a running broker creates one per 256 MiB-1 GiB, not per run).
        store.put_messages(make_messages(32, body))
        time.sleep(1.0)  # the new file's background warm-up, as on a broker that has been running
        t0 = time.perf_counter()
        if wire:
            put_batch = store.put_batch
            for b in msgs:
                put_batch(b)
        elif batch == 1:
            put = store.put_message
            for m in msgs:
                put(m)
        else:
            put = store.put_messages
            for i in range(0, n, batch):
                put(msgs[i:i + batch])
        return n / (time.perf_counter() - t0)
    finally:
        store.shutdown()


def bench_rollover(root: str, n: int, body: bytes) -> float:
    """The slowest put (ms) of lists of 32, ASYNC_FLUSH, over ``n`` messages from an empty store: at each
    roll-over to the next 256 MiB commitlog file a put takes the file prepared in the background."""
    msgs = make_messages(n, body)
    store = open_store(root, FlushDiskType.ASYNC_FLUSH)
    try:
        put = store.put_messages
        worst = 0.0
        for i in range(0, n, 32):
            t0 = time.perf_counter()
            put(msgs[i:i + 32])
            worst = max(worst, time.perf_counter() - t0)
        return worst * 1000
    finally:
        store.shutdown()


def bench_read(root: str, n: int, body: bytes) -> float:
    store = open_store(root, FlushDiskType.ASYNC_FLUSH)
    try:
        msgs = make_messages(n, body)
        for i in range(0, n, 32):
            store.put_messages(msgs[i:i + 32])
        t0 = time.perf_counter()
        got = 0
        for q in range(QUEUES):
            off = 0
            while True:
                r = store.get_message("bench", TOPIC, q, off, 32)
                if not r.records:
                    break
                got += len(r.records)
                off = r.next_begin_offset
        assert got == n, (got, n)
        return n / (time.perf_counter() - t0)
    finally:
        store.shutdown()


def disk_write_mb_s(root: str) -> float:
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "dd.test")
    out = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", "count=512", "conv=fdatasync"],
                         capture_output=True, text=True)
    os.unlink(path)
    line = out.stderr.strip().splitlines()[-1]
    secs = float(line.split(",")[-2].split()[0])
    return 512 * 1024 * 1024 / secs / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200_000)
    ap.add_argument("--sync-count", type=int, default=20_000, help="messages for the SYNC_FLUSH one-by-one run")
    ap.add_argument("--rollover-count", type=int, default=560_000,
                    help="messages for the roll-over run (two roll-overs of 256 MiB at 1 KiB; 0: skip it)")
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "rocketmesh-bench"))
    args = ap.parse_args()
    body = os.urandom(args.body)
    mb = args.body / 1e6
    runs = [
        ("put+dispatch ASYNC_FLUSH one by one", FlushDiskType.ASYNC_FLUSH, args.count, 1, False),
        ("put+dispatch ASYNC_FLUSH batch 32", FlushDiskType.ASYNC_FLUSH, args.count, 32, False),
        ("put+dispatch ASYNC_FLUSH wire batch 32", FlushDiskType.ASYNC_FLUSH, args.count, 32, True),
        ("put+dispatch SYNC_FLUSH one by one (1 thread)", FlushDiskType.SYNC_FLUSH, args.sync_count, 1, False),
        ("put+dispatch SYNC_FLUSH batch 32", FlushDiskType.SYNC_FLUSH, args.count, 32, False),
    ]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, body {args.body} B, "
          f"median of {args.repeat}")
    def report(name: str, rates: list[float]) -> None:
        r = statistics.median(rates)
        print(f"{name:48s} {r:>10,.0f} msg/s {r * mb:>8.1f} MB/s   (runs {min(rates):,.0f} .. {max(rates):,.0f})")

    for name, flush, n, batch, wire in runs:
        report(name, [bench_put(args.dir, flush, n, body, batch, wire) for _ in range(args.repeat)])
    report("read through consume queue, pulls of 32", [bench_read(args.dir, args.count, body)
                                                        for _ in range(args.repeat)])
    if args.rollover_count:
        worst = [bench_rollover(args.dir, args.rollover_count, body) for _ in range(args.repeat)]
        print(f"{'slowest put, lists of 32 over 2 roll-overs':48s} {statistics.median(worst):>10.1f} ms"
              f"   (runs {min(worst):.1f} .. {max(worst):.1f})")
    print(f"{'disk sequential write (dd 1 MiB, fdatasync)':48s} {'':>10s}       {disk_write_mb_s(args.dir):>8.1f} MB/s")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
