"""Traffic and bookkeeping for the fault cases (test_crash, test_pause, test_restart_each).

``SendLoad`` runs several producers, each on its own thread and its own client
instance, sending numbered bodies to one topic as fast as sync sends go, and
keeps a ``Ledger``: how many sends were tried, which came back SEND_OK (body,
offset message id, broker, when). ``Deliveries`` is a push consumer's listener
that counts every delivery of every body, so that a case can say what is
missing and what came twice. ``restart`` brings a killed service process back
on its own port and data folder and waits until it is the new one that serves.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from clientkit import FAST_CLIENT
from procs import ServiceProcess
from rocketmesh import Message, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.client.results import SendStatus
from rocketmesh.model.codec import decode_message_id, decode_record
from rocketmesh.model.message import MessageExt
from rocketmesh.remoting import RemotingClient, RemotingError, RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.headers import ViewMessageRequestHeader


@dataclass(frozen=True, slots=True)
class Ack:
    """One SEND_OK: what was sent, where it was stored, when the send began and when its answer came
    (monotonic s)."""

    body: str
    offset_msg_id: str
    broker: str
    began: float
    at: float


class Ledger:
    """Every send tried and every SEND_OK, shared by the load's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.failed = 0
        self.not_ok = 0  # stored but not SEND_OK (FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE)
        self.acks: list[Ack] = []

    def tried(self) -> None:
        with self._lock:
            self.sent += 1

    def record(self, ack: Ack | None, failed: bool) -> None:
        with self._lock:
            if ack is not None:
                self.acks.append(ack)
            elif failed:
                self.failed += 1
            else:
                self.not_ok += 1

    def snapshot(self) -> list[Ack]:
        with self._lock:
            return list(self.acks)

    @property
    def acknowledged(self) -> int:
        with self._lock:
            return len(self.acks)

    def acks_since(self, t: float) -> list[Ack]:
        with self._lock:
            return [a for a in self.acks if a.at >= t]

    def first_ack_after(self, t: float, broker: str | None = None) -> float | None:
        """When the first SEND_OK (from ``broker``, if named) of a send begun after ``t`` answered; None when
        none yet. A send begun before ``t`` may have been answered before the fault and noted just after."""
        with self._lock:
            times = [a.at for a in self.acks if a.began > t and (broker is None or a.broker == broker)]
        return min(times, default=None)


class SendLoad:
    """``producers`` producers of one group sending ``prefix``-numbered bodies to ``topic`` until stopped.

    ``pause_s`` between sends keeps the rate modest where a case needs the CPU for something else.
    """

    def __init__(self, namesrv: str, topic: str, *, producers: int = 3, prefix: str = "m", pause_s: float = 0.0,
                 send_msg_timeout_ms: int = 2000, make_message: Callable[[str], Message] | None = None,
                 **producer_args: object) -> None:
        self.topic = topic
        self.ledger = Ledger()
        self.pause_s = pause_s
        self._make = make_message or (lambda body: Message(topic, body))
        self._stop = threading.Event()
        self.producers = [
            Producer(f"{prefix}-load", namesrv, instance_name=f"{prefix}-load-{i}",
                     send_msg_timeout_ms=send_msg_timeout_ms, **{**FAST_CLIENT, **producer_args})
            for i in range(producers)
        ]
        self._threads = [threading.Thread(target=self._run, args=(p, f"{prefix}{i}"), name=f"load-{prefix}{i}",
                                          daemon=True) for i, p in enumerate(self.producers)]

    def start(self) -> SendLoad:
        for p in self.producers:
            p.start()
        for t in self._threads:
            t.start()
        return self

    def _run(self, producer: Producer, name: str) -> None:
        seq = 0
        while not self._stop.is_set():
            body = f"{name}-{seq}"
            seq += 1
            self.ledger.tried()
            began = time.monotonic()
            try:
                r = producer.send(self._make(body))
            except Exception:  # noqa: BLE001 - a refused or timed-out send is what a fault looks like
                self.ledger.record(None, failed=True)
                self._stop.wait(0.02)  # a broken send returns at once; do not spin on it
                continue
            if r.send_status is SendStatus.SEND_OK:
                self.ledger.record(Ack(body, r.offset_msg_id, r.message_queue.broker_name, began,
                                           time.monotonic()), False)
            else:
                self.ledger.record(None, failed=False)
                self._stop.wait(0.02)  # SLAVE_NOT_AVAILABLE comes back at once: do not spin on it either
                continue
            if self.pause_s:
                self._stop.wait(self.pause_s)

    def stop(self) -> None:
        """Stop sending, wait for the threads (each ends within a send timeout), shut the producers down."""
        self._stop.set()
        for t in self._threads:
            t.join(15)
        for p in self.producers:
            p.shutdown()

    def __enter__(self) -> SendLoad:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Deliveries:
    """A push consumer's listener counting the deliveries of each body."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count: collections.Counter[str] = collections.Counter()

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with self._lock:
            self.count.update(m.body.decode() for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def missing(self, bodies: Iterable[str]) -> list[str]:
        with self._lock:
            return [b for b in bodies if b not in self.count]

    def duplicated(self) -> int:
        """Deliveries beyond the first of each body."""
        with self._lock:
            return sum(n - 1 for n in self.count.values() if n > 1)


def start_consumer(namesrv: str, group: str, topic: str, deliveries: Deliveries, **args: object) -> PushConsumer:
    """A started push consumer of ``topic`` from its first offset, feeding ``deliveries``."""
    c = PushConsumer(group, namesrv, instance_name=group, consume_from="CONSUME_FROM_FIRST_OFFSET",
                     **{**FAST_CLIENT, **args})
    c.subscribe(topic, "*")
    c.register_listener(deliveries)
    return c.start()


def consume_all(namesrv: str, group: str, topic: str, bodies: list[str], timeout_s: float = 60.0,
                quiet_s: float = 1.0) -> Deliveries:
    """Consume ``topic`` from the start with a new group until every one of ``bodies`` arrived (or the time
    is up: the caller asserts on ``missing``), then ``quiet_s`` more for late duplicates."""
    got = Deliveries()
    consumer = start_consumer(namesrv, group, topic, got)
    try:
        want = set(bodies)
        deadline = time.monotonic() + timeout_s
        while got.missing(want) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(quiet_s)
    finally:
        consumer.shutdown()
    return got


def view_at(client: RemotingClient, addr: str, offset_msg_id: str) -> bytes | None:
    """The body of the record at the offset id's commitlog offset on the broker at ``addr`` (which may be a
    slave, whatever address the id names); None when it has none or does not answer."""
    offset = decode_message_id(offset_msg_id)[2]
    try:
        resp = client.invoke_sync(addr, request(RequestCode.VIEW_MESSAGE_BY_ID,
                                                ViewMessageRequestHeader(offset).to_ext()), 3000)
    except RemotingError:
        return None
    if resp.code != ResponseCode.SUCCESS:
        return None
    return decode_record(resp.body).body


def tail_acks(acks: list[Ack], n: int) -> list[Ack]:
    """The ``n`` acknowledged messages stored last (highest commitlog offsets): a torn tail would take them."""
    return sorted(acks, key=lambda a: decode_message_id(a.offset_msg_id)[2])[-n:]


def restart(proc: ServiceProcess, timeout_s: float = 30.0) -> float:
    """Start a killed service again (same port, same data) and wait until it is ready; returns the seconds
    that took."""
    assert not proc.alive
    begin = time.monotonic()
    proc.start(timeout_s=timeout_s)
    return time.monotonic() - begin
