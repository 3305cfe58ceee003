"""The dispatch worker: a child process of the broker that writes the consume-queue and index files.

It follows the commitlog's written end, which the broker publishes in a
shared cell after every put, so the dispatch runs on a core of its own
instead of sharing the broker's interpreter lock. Messages on the pipe are
tuples:

    worker -> broker  ("ready", max offsets, min logic offsets, dispatched offset)
                      ("persisted", [(topic, queue id, files' new max offset)], dispatched offset)
                      ("reply", request id, payload)
    broker -> worker  ("clean", request id, commitlog min offset)   reply: min logic offsets
                      ("delete_topics", request id, [topic])        reply: None
                      ("stop", request id, final commitlog end)     reply: dispatched offset, then exit

Queue keys are (topic, queue id). If the broker goes away (the pipe closes),
the worker flushes what it built and exits.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from rocketmesh.broker.store.checkpoint import StoreCheckpoint
from rocketmesh.broker.store.commitlog import CommitLog
from rocketmesh.broker.store.config import MessageStoreConfig
from rocketmesh.broker.store.dispatch.dispatcher import Dispatcher, Persisted
from rocketmesh.broker.store.dispatch.position_cell import PositionCell
from rocketmesh.runtime.log import get_logger
from rocketmesh.server.log import configure_service

log = get_logger("broker", component="dispatch_worker")

#: Longest sleep of an idle worker between looks at the commitlog's end (a put wakes it sooner).
IDLE_WAIT_S = 0.05
#: Reports to the broker are at most this far apart while records keep coming (RocketMQ's
#: reput thread also works in 1 ms steps).
REPORT_INTERVAL_S = 0.001
#: An idle worker reports at once unless it reported less than this long ago; then at this distance.
#: Each report costs the broker a wake-up under its interpreter lock, and a trickle of messages would
#: otherwise cost one per message. Consumers do not wait for it: a message is readable from its
#: queue's in-memory tail from the put on.
IDLE_REPORT_INTERVAL_S = 0.005
#: While records came in the last WATCH_S, an idle worker looks for more every LOOK_S by itself
#: instead of asking the next put to wake it: waking another process costs the putting thread a
#: 10-25 us syscall, and a put per millisecond would pay it every time. Past WATCH_S of quiet it
#: sleeps until a put wakes it. Admin reads that must see a just-sent message wait for dispatch
#: (MessageStore.catch_up).
WATCH_S = 0.1
LOOK_S = 0.005


class BrokerGone(Exception):
    """The broker process that started this worker has exited."""


class DispatchWorker:
    """Recovers the queues and index, then dispatches new records until told to stop."""

    def __init__(self, config: MessageStoreConfig, conn: Connection, cell: Any) -> None:
        self.config = config
        self.conn = conn
        self.cell = cell
        self.dispatcher = Dispatcher(config)
        self.commitlog = CommitLog(config)
        self.checkpoint = StoreCheckpoint(config.checkpoint_path)
        self.reput = 0
        self._flush_interval = config.flush_interval_consume_queue / 1000
        self._unreported: dict[tuple[str, int], int] = {}
        self._reported = 0
        self._last_report = 0.0
        #: The broker that started us: should it die, we stop rather than write on behind its back.
        self._parent = os.getppid()

    def recover(self, end: int) -> None:
        """Drop entries past ``end``, rebuild from the checkpoint up to ``end``, report ``ready``."""
        t0 = time.monotonic()
        d = self.dispatcher
        d.load()
        d.truncate_dirty(end)
        self.commitlog.queue.load(following=True)
        self.commitlog.queue.follow(end)
        start = min(max(self.checkpoint.dispatched_phy_offset, self.commitlog.min_offset), end)
        self.reput = start
        self.dispatch_to(end, notify=False)
        self._reported = self.reput
        self.flush()
        mins = d.min_offsets()
        self.conn.send(("ready", d.max_offsets(), mins, self.reput))
        log.info("dispatch_worker_ready", queues=len(d.queues), rebuilt_from=start, end=end,
                 seconds=round(time.monotonic() - t0, 3))

    def dispatch_to(self, end: int, notify: bool = True) -> None:
        """Dispatch records up to ``end``; what queues moved is kept for the next report."""
        read = self.commitlog.read_records
        dispatch = self.dispatcher.dispatch
        pending = self._unreported
        while self.reput < end:
            if os.getppid() != self._parent:
                raise BrokerGone(f"the broker (pid {self._parent}) is gone")
            records, nxt, clean = read(self.reput)
            if records:
                for topic, queue_id, max_offset in dispatch(records):
                    pending[(topic, queue_id)] = max_offset
            if nxt == self.reput:
                if not clean:
                    log.error("dispatch_bad_record", offset=self.reput)
                break
            self.reput = nxt
            if not notify:
                pending.clear()

    def report(self) -> None:
        """Tell the broker which queues moved and how far dispatch got (also when only a blank
        record was passed). At most one report per REPORT_INTERVAL_S while records keep coming:
        each report costs the broker a wake-up under its interpreter lock."""
        if self.reput == self._reported:
            return
        persisted: Persisted = [(t, q, m) for (t, q), m in self._unreported.items()]
        self._unreported.clear()
        self._reported = self.reput
        self._last_report = time.monotonic()
        self.conn.send(("persisted", persisted, self.reput))

    def flush(self, thorough: bool = True) -> None:
        """Flush consume queues and index (RocketMQ's FlushConsumeQueueService). A regular turn syncs
        only queues with ``flushConsumeQueueLeastPages`` dirty pages, so thousands of queues that
        each took a few entries do not cost a sync each every second; a thorough one syncs every
        queue, and only then may the checkpoint say everything up to here is dispatched."""
        self.dispatcher.flush(0 if thorough else self.config.flush_consume_queue_least_pages)
        if not thorough:
            return
        cp = self.checkpoint
        if cp.dispatched_phy_offset != self.reput:
            cp.dispatched_phy_offset = self.reput
            cp.logics_msg_timestamp = cp.index_msg_timestamp = int(time.time() * 1000)
            cp.flush_logics()

    def loop(self) -> None:
        conn = self.conn
        next_flush = time.monotonic() + self._flush_interval
        next_thorough = time.monotonic() + self.config.flush_consume_queue_thorough_interval / 1000
        last_data = 0.0
        while True:
            end = self.cell[0]
            idle = end <= self.reput
            if not idle:
                self.commitlog.queue.follow(end)
                self.dispatch_to(end)
                last_data = time.monotonic()
            wait_s = IDLE_WAIT_S
            if self.reput != self._reported:
                since = time.monotonic() - self._last_report
                if since >= (IDLE_REPORT_INTERVAL_S if idle else REPORT_INTERVAL_S):
                    self.report()
                elif idle:
                    wait_s = IDLE_REPORT_INTERVAL_S - since  # report what we have when this runs out
            try:
                if idle and time.monotonic() - last_data < WATCH_S:
                    select.select([conn.fileno()], [], [], min(wait_s, LOOK_S))
                elif idle:
                    # Until a put wakes us (or a command comes); bounded, so flushes keep their pace.
                    self.cell.wait_beyond(self.reput, conn.fileno(), wait_s)
                if conn.poll(0):
                    if not self.handle(conn.recv()):
                        return
            except (EOFError, OSError):
                log.warning("dispatch_worker_orphaned")
                self.flush()
                return
            now = time.monotonic()
            if now >= next_flush:
                thorough = now >= next_thorough
                self.flush(thorough)
                next_flush = now + self._flush_interval
                if thorough:
                    next_thorough = now + self.config.flush_consume_queue_thorough_interval / 1000

    def handle(self, msg: tuple) -> bool:
        """One command from the broker; False when the worker should exit."""
        kind, req_id = msg[0], msg[1]
        if kind == "clean":
            min_phy = msg[2]
            mins = self.dispatcher.delete_expired(min_phy)
            self.commitlog.queue.drop_below(min_phy)
            self.conn.send(("reply", req_id, mins))
        elif kind == "delete_topics":
            self.dispatcher.delete_topics(set(msg[2]))
            self.conn.send(("reply", req_id, None))
        elif kind == "stop":
            final_end = msg[2]
            self.commitlog.queue.follow(final_end)
            self.dispatch_to(final_end)
            self.report()
            self.flush()
            self.conn.send(("reply", req_id, self.reput))
            return False
        else:
            log.error("dispatch_worker_unknown_command", kind=kind)
        return True

    def close(self) -> None:
        self.dispatcher.shutdown()
        self.commitlog.queue.shutdown()
        self.checkpoint.close()


def main(argv: list[str]) -> int:
    """``python -m rocketmesh.broker.store.dispatch.dispatch_worker CONN_FD CELL_FD WAKE_FD`` (started by DispatchLink).

    The first message on the connection is ``("init", MessageStoreConfig, commitlog end)``.
    """
    # Ctrl-C reaches the whole process group; the broker decides when this worker stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_service()
    conn = Connection(int(argv[0]))
    cell = PositionCell(int(argv[1]), int(argv[2]))
    kind, config, end = conn.recv()
    if kind != "init":
        return 2
    worker = DispatchWorker(config, conn, cell)
    try:
        worker.recover(end)
        worker.loop()
    except BrokerGone as exc:
        log.warning("dispatch_worker_orphaned", reason=str(exc), offset=worker.reput)
        return 1
    except Exception:  # noqa: BLE001 - logged; the broker sees the connection close and restarts us
        log.exception("dispatch_worker_failed", offset=worker.reput)
        return 1
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
