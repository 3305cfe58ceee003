"""What the broker's Python does for one SEND_MESSAGE, in-process: the part of a sync send's round trip
that is ours on the broker side.

Run::

    python bench/send_path.py                 # 4 rounds of 40,000 sends, 1 KiB bodies
    python bench/send_path.py --rounds 8 -n 100000

A BrokerController runs in this process (no name server: it only logs that it
cannot register). Each send is a SEND_MESSAGE request as a Producer encodes it,
handled the way the broker's remoting I/O thread handles an inline send
(``SendMessageProcessor.enqueue`` while the broker keeps up): decode the frames,
check and build the message, put it in the store, add it to the broker's
tallies, answer, and finish the put's dispatch after the answer. The answer goes
to the server's mailbox, as from any thread but the server's own; the server is
stopped first, so no thread wakes for it.

Prints, per round, the whole handling, a split of it into its steps (each timed
apart), and the whole less the put: what the send path spends outside the store.
Times are the CPU time of this thread (``time.thread_time_ns``), so that other
work on the machine moves them little. A build from before the inline path had
a method of its own is timed through ``SendMessageProcessor._handle``.

On a sync send, a microsecond saved here saves about two of round trip on the
2-core VM (see BENCHMARKS.md and ``bench/remoting_bench.py --handler-us``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

os.environ.setdefault("ROCKETMESH_LOG_LEVEL", "ERROR")  # the broker cannot register here, and need not say so

from rocketmesh.broker.config import load_broker_config  # noqa: E402
from rocketmesh.broker.controller import BrokerController  # noqa: E402
from rocketmesh.broker.metrics import message_type_of  # noqa: E402
from rocketmesh.broker.store import PutMessageStatus  # noqa: E402
from rocketmesh.model.message import MessageConst  # noqa: E402
from rocketmesh.remoting import RemotingCommand, RemotingServer, RequestCode, RequestContext, ResponseCode  # noqa: E402
from rocketmesh.remoting.protocol.command import decode  # noqa: E402
from rocketmesh.remoting.protocol.headers import SendMessageResponseHeader, send_header_of  # noqa: E402

TOPIC = "SendPathBench"


def request_frames(body: bytes) -> list[bytes]:
    """A SEND_MESSAGE as a Producer encodes it (header fields of RocketMQ's SendMessageRequestHeader)."""
    ext = {
        "producerGroup": "bench-producer", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": 1, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": f"{MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX}\x017F000001000100000000000000000A\x02"
                      f"{MessageConst.WAIT_STORE_MSG_OK}\x01true\x02",
        "reconsumeTimes": 0, "unitMode": False, "batch": False,
    }
    return RemotingCommand(int(RequestCode.SEND_MESSAGE), 1, 0, None, ext, body).encode()


@contextlib.contextmanager
def in_process_broker(prefix: str) -> Iterator[BrokerController]:
    """A started BrokerController in this process, its store in a new temporary folder (no name server: it only
    logs that it cannot register); shut down and its folder removed on the way out."""
    root = tempfile.mkdtemp(prefix=prefix)
    config, store_config = load_broker_config(None, {
        "storePathRootDir": root, "listenAddress": "127.0.0.1", "listenPort": 0, "namesrvAddr": "127.0.0.1:1",
        "brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": 1024 * 1024 * 1024})
    broker = BrokerController(config, store_config)
    broker.start()
    try:
        yield broker
    finally:
        broker.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def context(server: RemotingServer, cmd: RemotingCommand) -> RequestContext:
    """The context the broker's I/O thread gives a request it read from one producer's connection."""
    return RequestContext(server, b"bench", "bench@127.0.0.1:1", cmd, time.monotonic(), b"bench\x001")


def arguments(doc: str | None, per_round: str, n: int) -> argparse.Namespace:
    """The options of send_path and pull_path: ``-n`` (``per_round`` a round, default ``n``), rounds, body."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=n, help=f"{per_round} per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--body", type=int, default=1024, help="body bytes")
    return ap.parse_args()


def main() -> None:
    args = arguments(__doc__, "sends", 40_000)
    with in_process_broker("send-path-") as broker:
        measure(broker, args)


def measure(broker: BrokerController, args: argparse.Namespace) -> None:
    server, sends, store = broker.server, broker.send, broker.store
    frames = request_frames(os.urandom(args.body))
    clock = time.thread_time_ns

    store_one = getattr(sends, "_store", None)

    def whole(n: int) -> float:
        start = clock()
        if store_one is None:  # a build from before the inline path had a method of its own
            for _ in range(n):
                cmd = decode(frames)
                sends._handle([(cmd, context(server, cmd))])
            return (clock() - start) / n / 1000
        for _ in range(n):
            # What SendMessageProcessor.enqueue does on the I/O thread while the broker keeps up.
            cmd = decode(frames)
            sends._answer((store_one(cmd, context(server, cmd), on_io_thread=True),), PutMessageStatus.PUT_OK)
            store.flush_pending()
        return (clock() - start) / n / 1000

    metrics = sends.metrics

    def split(n: int) -> list[float]:
        spent = [0, 0, 0, 0, 0]
        for _ in range(n):
            t0 = clock()
            cmd = decode(frames)
            ctx = context(server, cmd)
            t1 = clock()
            header = send_header_of(cmd.ext)
            msgs = sends._build(cmd, header, ctx)
            t2 = clock()
            result = store.put_messages(msgs, wait_flush=False)
            t3 = clock()
            metrics.sent(header.topic, message_type_of(header.topic, msgs[0].topic), len(result.appended),
                         len(cmd.body))
            t4 = clock()
            first = result.appended[0]
            ext = SendMessageResponseHeader(first.msg_id, header.queue_id, first.queue_offset).to_ext()
            ctx.respond(RemotingCommand(ResponseCode.SUCCESS, ext=ext))
            t5 = clock()
            spent[0] += t1 - t0
            spent[1] += t2 - t1
            spent[2] += t3 - t2
            spent[3] += t4 - t3
            spent[4] += t5 - t4
        return [s / n / 1000 for s in spent]

    whole(5_000)  # warm-up: topic auto-creation, the commitlog's first pages
    time.sleep(3)  # the store reads its new commitlog file into the page cache on a thread of its own
    # Stop the server's I/O thread: the answers then wait in its mailbox instead of waking it for each
    # one, so this thread runs alone with the GIL, as the broker's I/O thread does when it handles a send.
    server.stop(0)
    print(f"body {args.body} B, {args.n:,} sends a round", flush=True)
    for _ in range(args.rounds):
        total = whole(args.n)
        parts = split(args.n)
        outside = total - parts[2]
        print(f"handling {total:6.2f} us/send   outside the store {outside:5.2f} us   decode {parts[0]:5.2f}  "
              f"checks {parts[1]:5.2f}  put {parts[2]:5.2f}  tallies {parts[3]:5.2f}  answer {parts[4]:5.2f}",
              flush=True)


if __name__ == "__main__":
    main()
