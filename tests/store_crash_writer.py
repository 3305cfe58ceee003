"""A store writer for the crash test: SYNC_FLUSH puts from several threads, one ACK line per acknowledged put.

    python store_crash_writer.py STORE_DIR THREADS

Each line: ``ACK <thread> <seq> <commitlog offset> <queue id> <queue offset> <body hex>``.
Runs until killed.
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))

from rocketmesh.broker.store import FlushDiskType, PutMessageStatus  # noqa: E402
from storekit import msg, open_store  # noqa: E402


def main() -> None:
    root, threads = sys.argv[1], int(sys.argv[2])
    store = open_store(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    out = sys.stdout
    lock = threading.Lock()

    def writer(t: int) -> None:
        seq = 0
        while True:
            body = os.urandom(100 + (seq * 37) % 900)
            r = store.put_message(msg(body=body, queue_id=t, keys=f"t{t}-s{seq}"))
            if r.status is PutMessageStatus.PUT_OK:
                a = r.first
                with lock:
                    out.write(f"ACK {t} {seq} {a.wrote_offset} {t} {a.queue_offset} {body.hex()}\n")
                    out.flush()
            seq += 1

    for t in range(threads):
        threading.Thread(target=writer, args=(t,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
