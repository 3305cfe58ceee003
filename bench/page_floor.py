"""What new page-cache memory costs on this machine: the floor under every byte the broker stores.

Run::

    python bench/page_floor.py                 # 1 GiB, in a temporary folder on the store's disk
    python bench/page_floor.py --mib 512 --dir /path/on/the/broker/disk

Each commitlog page the broker writes is a page of memory the kernel hands
out for the first time in a while. On a virtual machine whose host backs guest
memory lazily (and takes back what the guest frees), touching such a page
costs a fault in the host as well. This prints, as CPU time per 4 KiB page:

* ``anon first``: touching new anonymous memory once,
* ``anon again``: touching the same amount again right after freeing it
  (the kernel hands back the pages it just got back),
* ``commitlog file``: preparing and writing a new file the way the broker does
  (fallocate, read once to bring it into the page cache, write through mmap),

and what the first and the last cost per second at a given rate of 1 KiB messages.
"""

from __future__ import annotations

import argparse
import mmap
import os
import resource
import tempfile

PAGE = 4096
#: A 1 KiB body's commitlog record with a topic and a unique key: what one message adds to the page cache.
RECORD_BYTES = 1180


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def touch_anon(size: int) -> float:
    """CPU seconds to write one byte into every page of ``size`` bytes of new anonymous memory."""
    t = cpu_s()
    m = mmap.mmap(-1, size)
    for off in range(0, size, PAGE):
        m[off] = 1
    spent = cpu_s() - t
    m.close()
    return spent


def commitlog_file(folder: str, size: int) -> float:
    """CPU seconds to allocate, warm and fill a new file as the broker's MappedFileQueue does."""
    path = os.path.join(folder, "page-floor.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t = cpu_s()
        os.posix_fallocate(fd, 0, size)
        for off in range(0, size, 8 << 20):
            os.pread(fd, min(8 << 20, size - off), off)
        m = mmap.mmap(fd, size)
        chunk = b"x" * 32768
        for off in range(0, size, len(chunk)):
            m[off:off + len(chunk)] = chunk
        spent = cpu_s() - t
        m.close()
        return spent
    finally:
        os.close(fd)
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="memory and file size to touch (MiB)")
    ap.add_argument("--dir", default=None, help="folder for the file (default: a temporary one)")
    ap.add_argument("--rate", type=int, default=150_000, help="messages/s to price the floor at")
    args = ap.parse_args()
    size = args.mib << 20
    pages = size // PAGE
    folder = args.dir or tempfile.mkdtemp(prefix="page-floor-")
    results = [("anon first", touch_anon(size)), ("anon again", touch_anon(size)),
               ("commitlog file", commitlog_file(folder, size))]
    pages_per_s = args.rate * RECORD_BYTES / PAGE
    for name, spent in results:
        us = spent / pages * 1e6
        print(f"{name:15s} {us:6.2f} us per 4 KiB page   {pages_per_s * us / 1e6 * 100:5.1f}% of a core "
              f"at {args.rate:,} msg/s of 1 KiB")
    if not args.dir:
        os.rmdir(folder)


if __name__ == "__main__":
    main()
