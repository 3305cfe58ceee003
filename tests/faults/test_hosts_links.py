"""Slow and lossy links between hosts: the relay (or netem) that delays them, and clients and brokers across one.

- The delay itself: with 50 ms +/- 20 ms on one host's cable, a UDP ping-pong with it from another host
  (the test process's leg) takes 60 to 140 ms a round trip (the cable crossed twice) and spreads across
  that band; a burst of datagrams comes back out of order; 1 MiB over TCP arrives whole; after the heal
  round trips are back to a few ms. The relay ends with its net, and when the process that made the net
  dies.
- Clients across such a link: producers and a push consumer in a host whose link alone is slow (50 ms +/-
  20 ms each way, packets reordered) and lossy (1 %, then 5 %, each way), a SYNC_MASTER and its slave and a
  name server on hosts of their own. Throughput and send p99 of each phase recorded; every SEND_OK message
  consumed, each body matching the checksum it carries; every send answered within sendMsgTimeout, the
  consumer never standing still beyond its pull timeout while a message waits, the master answering
  throughout; the brokers' and the clients' memory and the consumer's held messages level off; after the
  heal sends are as fast as before.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hostkit import Mesh, runtime, start_mesh
from netkit import Net

from clientkit import FAST_CLIENT
from procs import ServiceProcess, wait_for
from reliability import ReliabilityRecorder
from rocketmesh import Admin, Message, MQError, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.model.message import MessageExt
from rocketmesh.remoting import RemotingClient, RemotingError

# -- the delay itself ----------------------------------------------------------------------------------------

#: Run in a host: echo every UDP datagram on ADDR:7001 to its sender; read each TCP connection on ADDR:7000 to
#: its end and answer with the byte count and its SHA-256.
ECHO = """
import hashlib, socket, sys, threading
addr = sys.argv[1]
tcp = socket.create_server((addr, 7000))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((addr, 7001))
def serve():
    while True:
        conn, _ = tcp.accept()
        h, n = hashlib.sha256(), 0
        while data := conn.recv(1 << 16):
            h.update(data)
            n += len(data)
        conn.sendall(f"{n} {h.hexdigest()}".encode())
        conn.close()
threading.Thread(target=serve, daemon=True).start()
print("ready", flush=True)
while True:
    data, peer = udp.recvfrom(100)
    udp.sendto(data, peer)
"""

#: Where the delay of the self-test puts each round trip: the cable crossed twice, each 50 +/- 20 ms.
DELAY_MS, JITTER_MS = 50, 20
RTT_LOW_S, RTT_HIGH_S = 2 * (DELAY_MS - JITTER_MS) / 1000, 2 * (DELAY_MS + JITTER_MS) / 1000
#: What a busy two-core machine may add to a round trip (scheduling the relay, the echo and this process).
RTT_SLACK_S = 0.08


def _round_trips(addr: str, n: int) -> list[float]:
    """Seconds each of ``n`` UDP pings to the echo at ``addr`` took, one after another (a lost one fails)."""
    times = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        for i in range(n):
            t = time.monotonic()
            s.sendto(f"p{i}".encode(), (addr, 7001))
            while (got := s.recv(100)) != f"p{i}".encode():
                # Only a late answer to an earlier ping may come first.
                assert got.startswith(b"p") and int(got[1:]) < i, got
            times.append(time.monotonic() - t)
    return times


def _burst_order(addr: str, n: int) -> list[int]:
    """The numbers of ``n`` datagrams sent at once to the echo at ``addr``, in the order their echoes came."""
    got = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(n):
            s.sendto(f"b{i}".encode(), (addr, 7001))
        s.settimeout(1.0)
        with pytest.raises(TimeoutError):  # the last echo is in within 1 s; none for a second after
            while True:
                got.append(int(s.recv(100)[1:]))
    return got


def _send_tcp(addr: str, size: int) -> float:
    """Seconds to send ``size`` random bytes to the echo at ``addr`` over TCP and hear its answer, which must
    be their count and digest."""
    data = os.urandom(size)
    t = time.monotonic()
    with socket.create_connection((addr, 7000), timeout=20) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        answer = s.recv(200).decode()
    assert answer == f"{size} {hashlib.sha256(data).hexdigest()}", answer
    return time.monotonic() - t


def test_a_delayed_link_holds_each_packet_its_own_time_reorders_them_and_heals(
        make_net: Callable[..., Net], tmp_path: Path) -> None:
    # The relay ends when the process that made its net dies without closing it (its stdin closes), and what
    # that process left is removed by the next net made.
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from netkit import Net; "
         "net = Net(['x'], relayed=['x']).open(); "
         "print(net.relays['x'].pid if net.relays else 0, net['x'].netns, flush=True); sys.stdin.read()",
         str(Path(__file__).parent)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        relay_pid, child_ns = child.stdout.readline().split()
    finally:
        child.kill()
        child.wait(10)
    if int(relay_pid):
        wait_for(lambda: not Path(f"/proc/{relay_pid}").exists() or
                 Path(f"/proc/{relay_pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 5,
                 what=f"the relay {relay_pid} of a dead test process gone")

    net = make_net("a", "b", relayed=["a"])
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert child_ns not in namespaces, "what the dead process left is removed by the next net made"
    a = net["a"]
    out = tmp_path / "echo.out"
    with open(out, "w") as f:
        echo = subprocess.Popen(a.exec_argv(sys.executable, "-I", "-S", "-c", ECHO, a.addr), stdout=f)
    try:
        wait_for(lambda: "ready" in out.read_text(), 10, what="the echo listening in host a")
        plain = _round_trips(a.addr, 20)
        with net.delay("a", DELAY_MS, jitter_ms=JITTER_MS):
            slow = _round_trips(a.addr, 40)
            order = _burst_order(a.addr, 200)
            transfer_s = _send_tcp(a.addr, 1 << 20)
        healed = _round_trips(a.addr, 20)
    finally:
        echo.kill()
        echo.wait()
    # Each round trip within the band, and spread across it: the delay is drawn for each packet.
    assert RTT_LOW_S - 0.002 <= min(slow) and max(slow) <= RTT_HIGH_S + RTT_SLACK_S, (min(slow), max(slow))
    assert 0.085 <= statistics.median(slow) <= 0.125 + RTT_SLACK_S / 2, statistics.median(slow)
    assert max(slow) - min(slow) >= 0.02, (min(slow), max(slow))
    # Packets overtake each other: the burst's echoes come back out of order, none lost.
    assert sorted(order) == list(range(200)), f"{200 - len(set(order))} of 200 datagrams lost, or some twice"
    overtaken = sum(1 for x, y in zip(order, order[1:], strict=False) if y < x)
    assert overtaken >= 20, f"only {overtaken} of 200 datagrams came back before one sent earlier"
    # 1 MiB through a 100 ms round trip with reordering, whole (_send_tcp checks its digest).
    assert transfer_s < 15, transfer_s
    # Healed: round trips as before the delay.
    assert statistics.median(healed) < 0.02 and statistics.median(plain) < 0.02, (plain, healed)
    relays = list(net.relays.values())
    net.close()
    for relay in relays:  # the relays end with their net
        assert relay.proc.poll() is not None and not Path(f"/proc/{relay.pid}").exists()


# -- clients and brokers across a slow, lossy link -----------------------------------------------------------

TOPIC = "LinksTopic"
#: A name server and broker-a's master and slave on hosts of their own; the clients on a fourth ("client").
LAYOUT = {"namesrv": ("ns1",), "groups": {"broker-a": ("a", "a-slave")}}
#: The clients' settings: a send is given up after SEND_TIMEOUT_MS (all its attempts together); a pull the
#: broker holds (long polling) answers within SUSPEND_MS, and one unanswered is given up after PULL_TIMEOUT_MS.
SEND_TIMEOUT_MS = 3000
SUSPEND_MS, PULL_TIMEOUT_MS = 2000, 5000
SENDERS = 4
QUEUES = 4
#: The consumer stops pulling a queue holding this many messages (pull_threshold_for_queue, its default).
PULL_THRESHOLD_FOR_QUEUE = 1000
#: What a busy two-core machine may add to a timeout before an answer counts as a stall.
STALL_SLACK_S = 1.5
#: The phases of the run, in seconds: healthy, then 50 +/- 20 ms each way with 1 % loss each way, then with
#: 5 %, then healed.
PHASES = (("healthy", 4.0, 0), ("slow, 1% loss", 10.0, 1), ("slow, 5% loss", 12.0, 5), ("healed", 5.0, 0))
#: How often the sampler asks.
SAMPLE_S = 1.0


def _clients_main(namesrv: str, topic: str) -> None:
    """The clients, run in the client host (this module run as a script): SENDERS producers sending keyed
    messages whose bodies carry their own checksum, and a push consumer checking each one. Prints a line for
    each send (``sent KEY STATUS BEGAN ANSWERED``, monotonic s: one clock for every namespace) and each delivery
    (``got KEY ok|bad AT``); stops sending at a line ``stop`` on stdin, shuts down when stdin closes."""
    lock = threading.Lock()

    def emit(*fields: object) -> None:
        with lock:
            print(*fields, flush=True)

    def listener(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            payload, _, digest = m.body.rpartition(b"|")
            whole = hashlib.sha256(payload).hexdigest().encode() == digest and payload.startswith(f"{m.keys}:".encode())
            emit("got", m.keys, "ok" if whole else "bad", f"{time.monotonic():.4f}")
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("links-consumer", namesrv, instance_name="links-consumer",
                            consume_from="CONSUME_FROM_FIRST_OFFSET", broker_suspend_max_time_ms=SUSPEND_MS,
                            consumer_timeout_ms_when_suspend=PULL_TIMEOUT_MS,
                            pull_threshold_for_queue=PULL_THRESHOLD_FOR_QUEUE, **FAST_CLIENT)
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    consumer.start()
    producers = [Producer("links-producer", namesrv, instance_name=f"links-producer-{i}",
                          send_msg_timeout_ms=SEND_TIMEOUT_MS, **FAST_CLIENT).start() for i in range(SENDERS)]
    stop = threading.Event()

    def send_all(i: int, producer: Producer) -> None:
        seq = 0
        while not stop.is_set():
            key = f"k{i}-{seq}"
            seq += 1
            payload = f"{key}:{os.urandom(96).hex()}".encode()
            body = payload + b"|" + hashlib.sha256(payload).hexdigest().encode()
            began = time.monotonic()
            try:
                status = producer.send(Message(topic, body, keys=key)).send_status.name
            except Exception as exc:  # noqa: BLE001 - a send given up is an answer too: recorded, not raised
                status = f"error:{type(exc).__name__}"
            emit("sent", key, status, f"{began:.4f}", f"{time.monotonic():.4f}")
            stop.wait(0.01)

    threads = [threading.Thread(target=send_all, args=(i, p), daemon=True) for i, p in enumerate(producers)]
    for t in threads:
        t.start()
    emit("ready", consumer.client_id)
    for line in sys.stdin:
        if line.strip() == "stop":
            stop.set()
            for t in threads:
                t.join(SEND_TIMEOUT_MS / 1000 + 5)
            emit("stopped")
    for p in producers:
        p.shutdown()
    consumer.shutdown()
    emit("bye")


def _rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (0 once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return 0.0
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("VmRSS:"))) / 1024


def _p99(values: list[float]) -> float:
    """The 99th percentile of ``values`` (0 for none)."""
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else max(values, default=0)


class _Sampler:
    """Every second, from this process (never across the faulted link): the resident memory of the broker's
    master, its slave and the clients' process, the messages the consumer holds pulled but not consumed (asked
    through the broker, as ``mqadmin consumerStatus`` asks: that answer crosses the link), and whether the
    master answered its runtime request, and how fast."""

    def __init__(self, mesh: Mesh, clients_pid: int) -> None:
        self.mesh = mesh
        self.clients_pid = clients_pid
        self.client_id = ""
        self.rss: list[tuple[float, float, float, float]] = []  # (at, master, slave, clients) MiB
        self.cached: list[tuple[float, int]] = []  # (at, messages held by the consumer)
        self.answers: list[float | None] = []  # seconds the master took to answer, None: it did not
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="links-sampler", daemon=True)

    def _run(self) -> None:
        g = self.mesh.groups["broker-a"]
        with RemotingClient(name="links-sampler") as client, Admin(self.mesh.namesrv) as admin:
            while not self._stop.wait(SAMPLE_S):
                now = time.monotonic()
                self.rss.append((now, _rss_mib(g.master.pid or 0), _rss_mib(g.slave.pid or 0),
                                 _rss_mib(self.clients_pid)))
                try:
                    runtime(client, g.master)  # given 3 s (hostkit.runtime)
                    self.answers.append(time.monotonic() - now)
                except (MQError, RemotingError):
                    self.answers.append(None)
                if self.client_id:
                    with contextlib.suppress(MQError, RemotingError):
                        info = admin.consumer_running_info("links-consumer", self.client_id)
                        self.cached.append((now, sum(q.cached_msg_count for q in info.mq_table.values())))

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)


def test_clients_across_a_slow_lossy_link_lose_nothing_stall_nowhere_and_grow_nothing(
        make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess], tmp_path: Path,
        reliability: ReliabilityRecorder) -> None:
    # The clients run in a host of their own, so that the slow and lossy link is theirs alone: every client
    # request (routes, sends, pulls, heartbeats) crosses it, while the brokers reach each other and the name
    # server, and this process reaches them all, over healthy links. Delaying a broker's host instead would
    # slow its replication and registration too, which is not the fault under test.
    net = make_net("ns1", "a", "a-slave", "client", relayed=["client"])
    mesh = start_mesh(net, start_on, LAYOUT, topics={TOPIC: QUEUES})
    servers = ["ns1", "a", "a-slave"]
    out = tmp_path / "clients.out"
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), str(tests.parent)])}
    with open(out, "w") as f:
        clients = subprocess.Popen(net["client"].exec_argv(sys.executable, __file__, "clients", mesh.namesrv, TOPIC),
                                   stdin=subprocess.PIPE, stdout=f, stderr=subprocess.STDOUT, text=True, env=env)

    def lines(word: str) -> list[list[str]]:
        return [ln.split() for ln in out.read_text().splitlines() if ln.startswith(word + " ") or ln == word]

    phases: list[tuple[str, float, float]] = []  # (name, began, ended)
    try:
        ready = wait_for(lambda: lines("ready"), 30, what="the clients started in the client host")
        wait_for(lambda: lines("got"), 30, what="the first message consumed in the client host")
        with _Sampler(mesh, clients.pid) as sampler:
            sampler.client_id = ready[0][1]
            for name, seconds, percent in PHASES:
                faults = []
                if percent:
                    faults.append(net.delay("client", DELAY_MS, jitter_ms=JITTER_MS))
                    faults.append(net.loss("client", percent, peers=servers))
                    faults += [net.loss(s, percent, peers=["client"]) for s in servers]
                began = time.monotonic()
                time.sleep(seconds)
                for fault in faults:
                    fault.heal()
                phases.append((name, began, time.monotonic()))
            clients.stdin.write("stop\n")
            clients.stdin.flush()
            wait_for(lambda: lines("stopped"), SEND_TIMEOUT_MS / 1000 + 10, what="the senders stopped")
            acked = {ln[1] for ln in lines("sent") if ln[2] == "SEND_OK"}
            wait_for(lambda: acked <= {ln[1] for ln in lines("got")}, 30, what="every SEND_OK consumed",
                     interval_s=0.5)
            time.sleep(1.0)  # late duplicates
        clients.stdin.close()
        clients.wait(30)
    finally:
        if clients.poll() is None:
            clients.kill()
            clients.wait()
    assert lines("bye"), f"the clients did not shut down cleanly:\n{out.read_text()[-3000:]}"

    sends = [(ln[1], ln[2], float(ln[3]), float(ln[4])) for ln in lines("sent")]
    gots = [(ln[1], ln[2], float(ln[3])) for ln in lines("got")]
    acks = {key: answered for key, status, _, answered in sends if status == "SEND_OK"}
    first_got: dict[str, float] = {}
    for key, _, at in gots:
        first_got.setdefault(key, at)
    lost = sorted(set(acks) - set(first_got))
    corrupted = [key for key, whole, _ in gots if whole != "ok"]
    duplicated = len(gots) - len(first_got)

    # Per phase: sends begun in it, their answers' times, SEND_OKs per second.
    figures = {}
    for name, began, ended in phases:
        in_phase = [(status, answered - start) for _, status, start, answered in sends if began <= start < ended]
        latencies = [lat for status, lat in in_phase if status == "SEND_OK"]
        figures[name] = (len(latencies) / (ended - began), _p99(latencies), len(in_phase) - len(latencies))
    slowest = max(answered - start for _, _, start, answered in sends)
    # Recovery: from the heal to the first send begun after it answered as fast as healthy sends were (p99).
    healed_at = phases[-1][1]
    healthy_p99 = figures["healthy"][1]
    back = min((answered for _, status, start, answered in sends
                if start >= healed_at and status == "SEND_OK" and answered - start <= max(healthy_p99, 0.02)),
               default=None)
    # The consumer's progress: the longest it went without a delivery while some message waited for it, that
    # is, was acknowledged but not yet delivered (one delivered before its sender heard SEND_OK never waited).
    acked_by = sorted(acks.values())
    settled_by = sorted(max(a, first_got.get(k, math.inf)) for k, a in acks.items())
    deliveries = sorted(first_got.values())
    stall = max((nxt - prev for prev, nxt in zip(deliveries, deliveries[1:], strict=False)
                 if bisect.bisect_right(acked_by, prev) > bisect.bisect_right(settled_by, prev)), default=0.0)
    rss = sampler.rss
    half = len(rss) // 2
    grown = {who: (max(r[i] for r in rss[:half]), max(r[i] for r in rss[half:]))
             for i, who in ((1, "master"), (2, "slave"), (3, "clients"))}
    cached = [n for _, n in sampler.cached]
    answered = [a for a in sampler.answers if a is not None]

    relay = ""
    if "client" in net.relays:  # what the relay went through: frames it had to drop would be loss not asked for
        moved = net.relays["client"].set(0, 0)
        relay = (f"; the relay moved {moved['forwarded']} frames, dropped {moved['dropped']}, held at most "
                 f"{moved['held'] / 1024:.0f} KiB at once")
    note = "; ".join(f"{name}: {rate:.0f} SEND_OK/s, send p99 {p99 * 1000:.0f} ms, {failed} not SEND_OK"
                     for name, (rate, p99, failed) in figures.items())
    reliability.fault(
        "Hosts: clients across a slow lossy link (50 ms +/- 20 ms each way, 1% then 5% loss both ways)",
        cycles=2, sent=len(sends), acknowledged=len(acks), lost=len(lost), duplicated=duplicated,
        recovery_s=[back - healed_at] if back is not None else [],
        note=f"producers and a push consumer in a client host whose link alone is slow (reordering: each "
             f"packet's delay drawn on its own, {'netem' if net.netem else 'the relay'}); {note}; slowest send "
             f"{slowest:.2f} s (sendMsgTimeout {SEND_TIMEOUT_MS} ms); the consumer never went more than "
             f"{stall:.2f} s without a delivery while a message waited (pull timeout {PULL_TIMEOUT_MS} ms); "
             f"{len(corrupted)} corrupted; RSS MiB first half -> second half: "
             + ", ".join(f"{w} {a:.0f} -> {b:.0f}" for w, (a, b) in grown.items())
             + f"; consumer held at most {max(cached, default=0)} messages; the master answered "
             f"{len(answered)} of {len(sampler.answers)} runtime requests, slowest in {max(answered, default=0):.2f} s"
             + relay)

    assert not lost, f"{len(lost)} acknowledged messages never consumed: {lost[:10]}"
    assert not corrupted, f"{len(corrupted)} deliveries failed their checksum: {corrupted[:10]}"
    assert slowest <= SEND_TIMEOUT_MS / 1000 + STALL_SLACK_S, f"a send took {slowest:.2f} s"
    assert stall <= PULL_TIMEOUT_MS / 1000 + STALL_SLACK_S, f"the consumer stood still {stall:.2f} s"
    assert sampler.answers and None not in sampler.answers, f"the master did not answer: {sampler.answers}"
    for name, (rate, _, _) in figures.items():
        assert rate > 0, f"nothing acknowledged while {name}"
    assert back is not None, "sends never came back to their healthy pace after the heal"
    # Nothing grows without bound: each process's memory in the second half of the run within a margin of the
    # first half's peak, and the consumer's holding under its flow-control threshold.
    for who, (first, second) in grown.items():
        assert second <= first * 1.15 + 8, f"{who}'s RSS grew from {first:.0f} MiB to {second:.0f} MiB"
    assert len(cached) >= len(rss) // 2, f"the consumer answered {len(cached)} of {len(rss)} status requests"
    assert max(cached) <= PULL_THRESHOLD_FOR_QUEUE * QUEUES, cached


if __name__ == "__main__" and sys.argv[1:2] == ["clients"]:
    _clients_main(*sys.argv[2:4])
