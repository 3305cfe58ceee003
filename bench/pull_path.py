"""What the broker's Python does for a message on its way to a waiting consumer, in-process: the broker's
part of an end-to-end delivery.

Run::

    python bench/pull_path.py                 # 4 rounds of 20,000 messages, 1 KiB bodies
    python bench/pull_path.py --rounds 8 -n 50000

A BrokerController runs in this process, as in ``bench/send_path.py`` (no name server: it only logs that it
cannot register). A consumer that keeps up costs the broker three requests a message: the producer's send,
the wake-up of the pull the broker held for the queue (the held pull is run again and answered with the new
message), and the consumer's next pull, which finds nothing and is held. Each round times, in this thread's
CPU (``time.thread_time_ns``):

- ``pull found``: a PULL_MESSAGE decoded and handled when one message waits at its offset (answered at once);
- ``pull held``: the same when nothing waits (the pull is held);
- ``send``: a SEND_MESSAGE handled as the I/O thread handles it, its dispatch included, no pull held;
- ``send + wake``: the same with the queue's pull held, so the dispatch wakes it and answers it;

and ``wake`` = ``send + wake`` less ``send``: what answering a held pull adds to a send. The broker's share
of a message end to end is about ``send + wake`` plus ``pull held``. Answers go to the stopped server's
mailbox, so no thread wakes for them.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("ROCKETMESH_LOG_LEVEL", "ERROR")  # the broker cannot register here, and need not say so

from rocketmesh.broker.controller import BrokerController  # noqa: E402
from rocketmesh.broker.store import PutMessageStatus  # noqa: E402
from rocketmesh.remoting import RemotingCommand, RequestCode  # noqa: E402
from rocketmesh.remoting.protocol.command import decode  # noqa: E402
from rocketmesh.remoting.protocol.headers import PullMessageRequestHeader  # noqa: E402
from send_path import TOPIC, arguments, context, in_process_broker, request_frames  # noqa: E402

GROUP = "pull-path-bench"


def pull_frames(offset: int) -> list[bytes]:
    """A PULL_MESSAGE as a PushConsumer encodes it for queue 1 of the bench's topic at ``offset``."""
    header = PullMessageRequestHeader(GROUP, TOPIC, 1, offset, 32, 0b0110, 0, 15_000, "*", 0, "TAG")
    return RemotingCommand(int(RequestCode.PULL_MESSAGE), offset + 1, 0, None, header.to_ext()).encode()


def main() -> None:
    args = arguments(__doc__, "messages", 20_000)
    with in_process_broker("pull-path-") as broker:
        measure(broker, args)


def measure(broker: BrokerController, args: argparse.Namespace) -> None:
    server, sends, store, pulls = broker.server, broker.send, broker.store, broker.pull
    send = request_frames(os.urandom(args.body))
    clock = time.thread_time_ns

    def put() -> None:
        """One send as the I/O thread handles it while the broker keeps up, its dispatch included."""
        cmd = decode(send)
        sends._answer((sends._store(cmd, context(server, cmd), on_io_thread=True),), PutMessageStatus.PUT_OK)
        store.flush_pending()

    def pull(offset: int) -> RemotingCommand | None:
        cmd = decode(pull_frames(offset))
        return pulls.handle(cmd, context(server, cmd))

    def next_offset() -> int:
        return store.get_max_offset_in_queue(TOPIC, 1)

    def round_(n: int) -> tuple[float, float, float, float]:
        spent = [0, 0, 0, 0]
        for _ in range(n):
            offset = next_offset()
            t0 = clock()
            put()  # queue 1 of 8: a put lands on queue 1 only when the sender asks for it
            t1 = clock()
            held = pull(offset + 1)  # nothing there yet: held
            t2 = clock()
            put()  # wakes the held pull (its answer: the new message)
            t3 = clock()
            found = pull(offset)  # the first message of the pair, there: answered at once
            t4 = clock()
            if held is not None or found is None:
                raise SystemExit("the broker answered a pull otherwise than a consumer that keeps up sees")
            spent[0] += t1 - t0
            spent[1] += t2 - t1
            spent[2] += t3 - t2
            spent[3] += t4 - t3
        return spent[0] / n / 1000, spent[1] / n / 1000, spent[2] / n / 1000, spent[3] / n / 1000

    for _ in range(2000):  # warm-up: topic auto-creation, the commitlog's first pages
        put()
    time.sleep(3)  # the store reads its new commitlog file into the page cache on a thread of its own
    server.stop(0)  # answers wait in the mailbox: this thread runs alone, as the broker's I/O thread does
    print(f"body {args.body} B, {args.n:,} messages a round", flush=True)
    for _ in range(args.rounds):
        alone, held, woken, found = round_(args.n)
        print(f"send {alone:6.2f} us   send + wake {woken:6.2f} us   wake {woken - alone:6.2f} us   "
              f"pull held {held:6.2f} us   pull found {found:6.2f} us   a message end to end "
              f"{woken + held:6.2f} us", flush=True)


if __name__ == "__main__":
    main()
