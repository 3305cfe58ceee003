"""HA_TRANSFER and HA_APPEND: a broker's side of master/slave replication (RocketMQ's HAConnection on
the master and HAClient's writing on the slave; the loop between them is the ha service, ``rocketmesh.ha``).

A master answers HA_TRANSFER with its commitlog bytes from the asked offset (at
most the asked size, within one file) and takes that offset as the slave's
acknowledgement: the slave has everything below it, and SYNC_MASTER sends
waiting for it are released. With nothing new to send it holds the request
until a put writes bytes, or the request's suspend time passes. An empty slave
(offset 0) is sent the master's commitlog from its first byte on.

A slave answers HA_APPEND by appending the bytes where its commitlog ends. A
chunk that does not start there is refused, naming the slave's real end, and
the ha service goes on from that offset. An empty body asks where that is.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocketmesh.broker.processor.handlers import BAD_REQUEST_ERRORS, ok, register_all
from rocketmesh.broker.store import BrokerRole
from rocketmesh.broker.store.commitlog import ReplicaGap
from rocketmesh.remoting import RemotingCommand, RequestCode, RequestContext, ResponseCode, response_to
from rocketmesh.remoting.protocol.headers import (
    HaAppendRequestHeader,
    HaAppendResponseHeader,
    HaTransferRequestHeader,
    HaTransferResponseHeader,
)
from rocketmesh.runtime.log import get_logger

if TYPE_CHECKING:
    from rocketmesh.broker.parts import BrokerParts
    from rocketmesh.remoting import RemotingServer

log = get_logger("broker", component="ha")

#: The longest a master holds an HA_TRANSFER that finds nothing (whatever the request asks).
MAX_SUSPEND_MS = 30_000
#: The most bytes one HA_TRANSFER answer carries (whatever the request asks).
MAX_TRANSFER_BYTES = 4 * 1024 * 1024


@dataclass(eq=False)
class _HeldTransfer:
    req: RemotingCommand
    ctx: RequestContext
    header: HaTransferRequestHeader
    deadline: float
    done: bool = False


class HaProcessor:
    """Serves HA_TRANSFER on a master and HA_APPEND on a slave (see the module docstring)."""

    def __init__(self, broker: BrokerParts) -> None:
        self.broker = broker
        self.store = broker.store
        self.store_config = broker.store_config
        self._held: list[_HeldTransfer] = []
        self._deadlines: list[tuple[float, int, _HeldTransfer]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._deadline_loop, name="HaTransferHold", daemon=True)
        # Under SYNC_FLUSH a slave's append waits for its flush: then off the I/O thread, one at a time, in
        # order. Otherwise it is a copy and a few queue entries, answered on the I/O thread at once (the
        # slave's acknowledgement, on which SYNC_MASTER sends wait, comes a thread hand-off sooner).
        self._appender = ThreadPoolExecutor(1, thread_name_prefix="ha-append") \
            if self.store.put_waits else None
        self.transferred_bytes = 0
        self.appended_bytes = 0
        #: The ha services' client identities and the slave each one feeds.
        self._feeders: dict[bytes, str] = {}

    def register(self, server: RemotingServer) -> None:
        # An ha service whose connection closed acknowledges nothing more: its slave is out of sync at
        # once (SYNC_MASTER sends then hear SLAVE_NOT_AVAILABLE rather than wait for the timeout).
        server.on_disconnect(self._feeder_gone)
        self.store.register_arriving_listener(self._on_arriving)
        self._thread.start()
        register_all(server, {
            RequestCode.HA_TRANSFER: (self.transfer, None),
            RequestCode.HA_APPEND: (self.append, self._appender),
        }, BAD_REQUEST_ERRORS)

    def stop(self) -> None:
        """Answer held transfers (with nothing) and stop."""
        with self._cond:
            self._stopped = True
            held, self._held = self._held, []
            self._cond.notify_all()
        for h in held:
            self._answer(h)
        self._thread.join(2)
        if self._appender is not None:
            self._appender.shutdown(wait=True, cancel_futures=True)

    # --- master ---

    def transfer(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand | None:
        """HA_TRANSFER: bytes from the asked offset, now or once written."""
        h = HaTransferRequestHeader.from_ext(req.ext)
        role = self.store_config.broker_role
        if role is BrokerRole.SLAVE:
            return response_to(req, ResponseCode.SYSTEM_ERROR,
                               f"broker {self.broker.broker_addr} is a SLAVE: replicate from its master")
        if h.offset < 0 or h.max_bytes <= 0:
            raise ValueError(f"offset {h.offset} and maxBytes {h.max_bytes} must be >= 0 and > 0")
        store = self.store
        end = store.max_physical_offset
        if h.offset > end:
            log.error("ha_slave_ahead", slave=h.slave_addr, slave_offset=h.offset, master_end=end)
            return response_to(req, ResponseCode.SYSTEM_ERROR, (
                f"the slave {h.slave_addr} has the commitlog up to {h.offset}, past this master's end {end}: "
                "the master lost its tail (a crash under ASYNC_FLUSH); rebuild the slave's store from the master"))
        start = self._start_of(h)
        if h.offset and h.offset < store.min_physical_offset:
            return response_to(req, ResponseCode.SYSTEM_ERROR, (
                f"the slave {h.slave_addr} needs the commitlog from {h.offset}, but this master keeps it from "
                f"{store.min_physical_offset} on: rebuild the slave's store"))
        store.replicas.ack(h.slave_addr, h.offset)
        self._feeders[ctx.identity] = h.slave_addr
        resp = self._read(req, h, start)
        if resp is not None or h.suspend_millis <= 0:
            return resp if resp is not None else self._empty(req, start)
        held = _HeldTransfer(req, ctx, h, time.monotonic() + min(h.suspend_millis, MAX_SUSPEND_MS) / 1000)
        with self._cond:
            if not self._stopped:
                self._held.append(held)
                heapq.heappush(self._deadlines, (held.deadline, next(self._seq), held))
                self._cond.notify()
        # A put may have written bytes between the read and the hold.
        if store.max_physical_offset > start:
            self._wake()
        return None

    def _start_of(self, h: HaTransferRequestHeader) -> int:
        """Where a transfer's bytes start: the asked offset, or an empty slave's: the master's first byte."""
        return self.store.min_physical_offset if h.offset == 0 else h.offset

    def _feeder_gone(self, identity: bytes) -> None:
        slave = self._feeders.pop(identity, None)
        if slave is not None:
            log.warning("ha_slave_disconnected", slave=slave)
            self.store.replicas.gone(slave)

    def _read(self, req: RemotingCommand, h: HaTransferRequestHeader, start: int) -> RemotingCommand | None:
        data = self.store.read_commitlog(start, min(h.max_bytes, MAX_TRANSFER_BYTES))
        if not data:
            return None
        self.transferred_bytes += len(data)
        return response_to(req, ResponseCode.SUCCESS, None, self._ext(start), data)

    def _empty(self, req: RemotingCommand, start: int) -> RemotingCommand:
        return response_to(req, ResponseCode.SUCCESS, None, self._ext(start))

    def _ext(self, start: int) -> dict:
        store = self.store
        return HaTransferResponseHeader(start, store.max_physical_offset, store.min_physical_offset,
                                               self.store_config.mapped_file_size_commit_log).to_ext()

    def _on_arriving(self, grown: list) -> None:
        if self._held:
            self._wake()

    def _wake(self) -> None:
        with self._cond:
            held, self._held = self._held, []
        rest = []
        for h in held:
            resp = None if h.done else self._read(h.req, h.header, self._start_of(h.header))
            if resp is None:
                rest.append(h)
            else:
                h.done = True
                h.ctx.respond(resp)
        if rest:
            with self._cond:
                self._held.extend(h for h in rest if not h.done)

    def _answer(self, h: _HeldTransfer) -> None:
        if h.done:
            return
        h.done = True
        start = self._start_of(h.header)
        h.ctx.respond(self._read(h.req, h.header, start) or self._empty(h.req, start))

    def _deadline_loop(self) -> None:
        while True:
            expired = []
            with self._cond:
                if self._stopped:
                    return
                now = time.monotonic()
                while self._deadlines and self._deadlines[0][0] <= now:
                    _, _, h = heapq.heappop(self._deadlines)
                    if not h.done:
                        expired.append(h)
                if expired:
                    self._held = [h for h in self._held if h not in expired]
                else:
                    self._cond.wait(self._deadlines[0][0] - now if self._deadlines else None)
                    continue
            for h in expired:
                try:
                    self._answer(h)
                except Exception:  # noqa: BLE001 - one bad answer must not stop the others
                    log.exception("ha_transfer_answer_failed")

    # --- slave ---

    def append(self, req: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        """HA_APPEND: write the master's bytes where this slave's commitlog ends."""
        h = HaAppendRequestHeader.from_ext(req.ext)
        own = self.store_config.mapped_file_size_commit_log
        if req.body and h.file_size != own:
            return response_to(req, ResponseCode.SYSTEM_ERROR, (
                f"the master's commitlog files are {h.file_size} bytes, this slave's {own}: "
                "set mappedFileSizeCommitLog alike on master and slave"))
        try:
            end = self.store.append_replica(h.offset, req.body or b"")
        except ReplicaGap as exc:
            return response_to(req, ResponseCode.SYSTEM_ERROR, str(exc), HaAppendResponseHeader(exc.end).to_ext())
        self.appended_bytes += len(req.body or b"")
        return ok(req, HaAppendResponseHeader(end))
