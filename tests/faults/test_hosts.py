"""Many hosts: the mesh across simulated machines, and what SYNC_MASTER keeps when master and slave are cut apart.

Each service runs in a host of its own: a network namespace with its own address on a private bridge
(netkit.py), the address the service listens on and, for a broker, the one it registers (brokerIP1). The
test process is the client host: its producer and consumer reach the services over that bridge only.

- Deployment: two name servers, broker-a and broker-b (each a SYNC_MASTER and its slave with the slave's ha
  service), the scheduler and the txn-checker on five hosts (RocketMQ's 2m-2s layout: a name server beside
  each master), clients on two more. Both name servers route both groups to the hosts' addresses; from the
  second client host (its own process) sends, a batch, an order's steps, a delayed message and two
  transactions (one committed, one left unknown and checked back by the txn-checker); all of it consumed on
  the first client host (the test process), the order in order, each born host its client's; a message found
  by key.
- Master cut off from its slave under SYNC_MASTER: a symmetric partition between their hosts (the ha
  service sits on the slave's host, so it is cut from the master too). Every send answers within
  syncFlushTimeout, FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE, and any SEND_OK is one the slave holds;
  after the heal the slave catches up to the master's commitlog byte for byte (no gap, nothing twice) and
  every SEND_OK message is consumed.
- The hosts themselves: each fault of netkit.py cuts what it says and its heal undoes it; what a dead run
  left is removed.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from faultload import consume_all, view_at
from hostkit import FIVE_HOSTS, SYNC_FLUSH_TIMEOUT_MS, runtime, start_mesh
from netkit import Net

from clientkit import FAST_CLIENT
from procs import ServiceProcess, wait_for
from reliability import ReliabilityRecorder
from rocketmesh import Admin, Message, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, PushConsumer
from rocketmesh.client.results import SendStatus
from rocketmesh.model.message import MessageExt
from rocketmesh.remoting import RemotingClient

TOPIC = "HostsTopic"
ORDER_TOPIC = "HostsOrderTopic"
#: Master and slave of broker-a on hosts of their own, name servers on two more.
GROUP_A = {"namesrv": ("ns1", "ns2"), "groups": {"broker-a": ("master", "slave")}}
#: How long master and slave stay cut apart: past the housekeeping interval, so both answers are seen.
PARTITION_S = 3.5
#: What an answer may take beyond syncFlushTimeout on a busy two-core machine.
SLACK_S = 1.0


#: Run in the second client host: a producer that sends each kind of message the mesh takes, and prints one JSON
#: line per send ({"body", "status", "broker", "msg_id"}), then "checked" when the txn-checker asks about the
#: transaction left unknown, and "done".
SECOND_CLIENT = """
import sys, threading, orjson
from rocketmesh import LocalTransactionState, Message, Producer, TransactionProducer
from rocketmesh.client.producer.selector import SelectMessageQueueByHash
namesrv, topic, order_topic = sys.argv[1:4]
fast = dict(heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000)
def say(**kw):
    print(orjson.dumps(kw).decode(), flush=True)
def said(body, r):
    say(body=body, status=r.send_status.name, broker=r.message_queue.broker_name, msg_id=r.msg_id)
with Producer("hosts-second-client", namesrv, **fast) as p:
    for i in range(10):
        said(f"c2-{i}", p.send(Message(topic, f"c2-{i}", keys=f"c2-{i}")))
    r = p.send_batch([Message(topic, f"c2-batch{i}") for i in range(8)])
    for i in range(8):
        said(f"c2-batch{i}", r)
    for step in ("created", "paid", "shipped", "delivered"):
        said(f"order-7 {step}", p.send(Message(order_topic, f"order-7 {step}"), selector=SelectMessageQueueByHash(),
                                      arg="order-7"))
    said("c2-later", p.send(Message(topic, "c2-later", delay_level=1)))
checked = threading.Event()
class Listener:
    def execute_local_transaction(self, msg, arg):
        return LocalTransactionState.UNKNOW if msg.body == b"c2-tx-unknown" else LocalTransactionState.COMMIT_MESSAGE
    def check_local_transaction(self, msg):
        checked.set()
        return LocalTransactionState.COMMIT_MESSAGE
with TransactionProducer("hosts-second-tx", namesrv, Listener(), **fast) as tp:
    for body in ("c2-tx-commit", "c2-tx-unknown"):
        said(body, tp.send_message_in_transaction(Message(topic, body), arg=None))
    if checked.wait(30):
        print("checked", flush=True)
print("done", flush=True)
"""


def test_a_mesh_on_five_hosts_serves_clients_on_two_more_with_every_kind_of_message(
        make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess], tmp_path: Path,
        reliability: ReliabilityRecorder) -> None:
    net = make_net("a", "b", "a-slave", "b-slave", "sys", "client2")
    began = time.monotonic()
    mesh = start_mesh(net, start_on, FIVE_HOSTS, topics={TOPIC: 2, ORDER_TOPIC: 2})
    up_s = time.monotonic() - began
    # Each name server on its own routes both groups by their hosts' addresses (brokerIP1, listenAddress).
    expected = {name: {0: g.master.addr, 1: g.slave.addr} for name, g in mesh.groups.items()}
    for name, (master_host, slave_host) in FIVE_HOSTS["groups"].items():  # type: ignore[attr-defined]
        assert expected[name][0].split(":")[0] == net[master_host].addr
        assert expected[name][1].split(":")[0] == net[slave_host].addr
    for n in mesh.namesrvs:
        with Admin(n.addr) as admin:
            route = admin.wait_topic_route(TOPIC)
        assert {bd.broker_name: bd.broker_addrs for bd in route.broker_datas} == expected, n.addr

    lock = threading.Lock()
    got: dict[str, list[MessageExt]] = {}
    arrived: dict[str, float] = {}
    ordered: list[str] = []

    def listener(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with lock:
            for m in msgs:
                got.setdefault(m.body.decode(), []).append(m)
                arrived.setdefault(m.body.decode(), time.monotonic())
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def in_order(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        ordered.extend(m.body.decode() for m in msgs)
        return ConsumeOrderlyStatus.SUCCESS

    consumer = PushConsumer("hosts-group", mesh.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(listener)
    orderly = PushConsumer("hosts-order-group", mesh.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                           **FAST_CLIENT)
    orderly.subscribe(ORDER_TOPIC, "*")
    orderly.register_listener(in_order, orderly=True)
    bodies = [f"h{i}" for i in range(20)]
    with consumer, orderly:
        # The first client host: the test process.
        with Producer("hosts-producer", mesh.namesrv, **FAST_CLIENT) as producer:
            results = [producer.send(Message(TOPIC, b, keys=b)) for b in bodies]
        assert [r.send_status for r in results] == [SendStatus.SEND_OK] * len(bodies)
        assert {r.message_queue.broker_name for r in results} == {"broker-a", "broker-b"}
        # The second: its own process on its own host.
        second = tmp_path / "client2.out"
        with open(second, "w") as out:
            run = subprocess.run(net["client2"].exec_argv(sys.executable, "-c", SECOND_CLIENT, mesh.namesrv, TOPIC,
                                                          ORDER_TOPIC), stdout=out, stderr=subprocess.STDOUT,
                                 timeout=90, check=False)
        lines = second.read_text().splitlines()
        assert run.returncode == 0 and lines[-2:] == ["checked", "done"], "\n".join(lines[-30:])
        sent2 = [orjson.loads(line) for line in lines if line.startswith("{")]
        assert all(s["status"] == "SEND_OK" for s in sent2 if not s["body"].startswith("c2-tx")), sent2
        bodies2 = [s["body"] for s in sent2]
        # A message id starts with its client's address (RocketMQ's MessageClientIDSetter): the second client's
        # host has no default route, and still names itself by its address on the bridge, not 127.0.0.1.
        client2_hex = socket.inet_aton(net["client2"].addr).hex().upper()
        assert all(s["msg_id"].startswith(client2_hex) for s in sent2), (client2_hex, sent2[:2])
        everything = bodies + [b for b in bodies2 if b != "c2-tx-unknown" and not b.startswith("order-")] + \
            ["c2-tx-unknown"]
        wait_for(lambda: set(got) >= set(everything), 60, what="every message consumed on the first client host")
        wait_for(lambda: len(ordered) >= 4, 30, what="the order's four steps")
    assert ordered[:4] == [f"order-7 {s}" for s in ("created", "paid", "shipped", "delivered")], ordered
    for body in bodies:
        m = got[body][0]
        assert m.store_host in (mesh.groups["broker-a"].master.addr, mesh.groups["broker-b"].master.addr)
        assert m.born_host.rsplit(":", 1)[0] == net.local.addr, m.born_host
    for body in bodies2:
        if body in got:
            assert got[body][0].born_host.rsplit(":", 1)[0] == net["client2"].addr, (body, got[body][0].born_host)
    later = got["c2-later"][0]
    assert later.store_timestamp - later.born_timestamp >= 900, "the delay-level-1 message was not delayed"
    # Found by key from the first client host, wherever it was stored.
    with Admin(mesh.namesrv) as admin:
        found = admin.query_msg_by_key(TOPIC, "c2-3")
    assert [m.body for m in found] == [b"c2-3"]
    duplicated = sum(len(v) - 1 for v in got.values())
    sent = len(bodies) + len(bodies2)
    reliability.fault(
        "Hosts: deployment on 5 hosts (2 name servers, broker-a and broker-b as SYNC_MASTER + slave + ha, "
        "scheduler, txn-checker), clients on 2 more", cycles=0, sent=sent, acknowledged=sent, lost=0,
        duplicated=duplicated,
        note=f"network namespaces on a private bridge; routes from both name servers carry the hosts' addresses; "
             f"sends, a batch, an order's steps in order, a delayed message (through the scheduler's host), a "
             f"committed and a checked-back transaction (through the txn-checker's host) from the second client "
             f"host, all consumed on the first with each born host its client's; a message found by key; mesh up "
             f"in {up_s:.1f} s")


def test_sync_master_cut_off_from_its_slave_claims_nothing_the_slave_lacks_and_the_slave_catches_up(
        make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess], remoting_client: RemotingClient,
        reliability: ReliabilityRecorder) -> None:
    net = make_net("ns1", "ns2", "master", "slave")
    mesh = start_mesh(net, start_on, GROUP_A)
    g = mesh.groups["broker-a"]
    sent = 0
    acked: list[str] = []
    answers: dict[SendStatus, int] = {}
    slowest = 0.0
    with Producer("hosts-sync-producer", mesh.namesrv, send_msg_timeout_ms=5000, **FAST_CLIENT) as producer:

        def send(body: str) -> SendStatus:
            nonlocal sent, slowest
            sent += 1
            t = time.monotonic()
            r = producer.send(Message(TOPIC, body))
            slowest = max(slowest, time.monotonic() - t) if cut else slowest
            answers[r.send_status] = answers.get(r.send_status, 0) + 1
            if r.send_status is SendStatus.SEND_OK:
                acked.append(body)
                if cut:  # SEND_OK under SYNC_MASTER: the slave must hold it, cut off or not
                    assert view_at(remoting_client, g.slave.addr, r.offset_msg_id) == body.encode(), \
                        f"{body} answered SEND_OK, not on the slave"
            return r.send_status

        cut = False
        for i in range(20):
            assert send(f"before{i}") is SendStatus.SEND_OK
        partition = net.partition("master", "slave")
        cut = True
        ends = time.monotonic() + PARTITION_S
        i = 0
        while time.monotonic() < ends:
            send(f"cut{i}")
            i += 1
            time.sleep(0.02)  # SLAVE_NOT_AVAILABLE comes back at once: a few dozen of them are enough
        during = dict(answers)
        partition.heal()
        cut = False
        healed = time.monotonic()
        i = 0
        while send(f"after{i}") is not SendStatus.SEND_OK:
            i += 1
            assert time.monotonic() - healed < 30, f"no SEND_OK within 30 s of the heal: {answers}"
            time.sleep(0.05)
        first_ok_s = time.monotonic() - healed
    assert set(during) - {SendStatus.SEND_OK} == {SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE}, \
        during
    assert during[SendStatus.SEND_OK] == 20, f"SEND_OK while cut off: {during}"
    assert slowest <= SYNC_FLUSH_TIMEOUT_MS / 1000 + SLACK_S, f"a send took {slowest:.2f} s while cut off"
    end = runtime(remoting_client, g.master)["commitLogMaxOffset"]
    wait_for(lambda: runtime(remoting_client, g.slave)["commitLogMaxOffset"] >= end, 30,
             what="the slave at the master's end")
    caught_up_s = time.monotonic() - healed
    assert g.slave.commitlog_digest(end) == g.master.commitlog_digest(end)
    got = consume_all(mesh.namesrv, "hosts-sync-check", TOPIC, acked, timeout_s=30, quiet_s=0.5)
    lost = len(got.missing(acked))
    status = g.ha.status()
    reliability.fault(
        "Hosts: SYNC_MASTER cut off from its slave (symmetric partition)", cycles=1, sent=sent,
        acknowledged=len(acked), lost=lost, duplicated=got.duplicated(), recovery_s=[caught_up_s],
        note=f"{PARTITION_S} s partition between the master's host and the slave's (its ha service there); "
             f"answers while cut off: {during[SendStatus.FLUSH_SLAVE_TIMEOUT]} FLUSH_SLAVE_TIMEOUT, "
             f"{during[SendStatus.SLAVE_NOT_AVAILABLE]} SLAVE_NOT_AVAILABLE, no SEND_OK, slowest {slowest:.2f} s "
             f"(syncFlushTimeout {SYNC_FLUSH_TIMEOUT_MS} ms); after the heal the first SEND_OK in "
             f"{first_ok_s:.2f} s, the slave's commitlog equal to the master's to its end ({end} bytes) in "
             f"{caught_up_s:.2f} s (recovery); ha resyncs {status['resyncs']}")
    assert lost == 0, got.missing(acked)[:10]


#: A TCP listener that reads each connection to its end and answers with the bytes it got, and a UDP socket
#: printing each datagram, on ADDR.
PEER = """
import contextlib, socket, sys, threading
addr = sys.argv[1]
tcp = socket.create_server((addr, 7000))
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind((addr, 7001))
def serve():
    while True:
        conn, _ = tcp.accept()
        with conn, contextlib.suppress(OSError):  # a connection cut mid-way leaves the server serving
            received = 0
            while chunk := conn.recv(65536):
                received += len(chunk)
            conn.sendall(str(received).encode())  # the client checks that all it sent arrived
threading.Thread(target=serve, daemon=True).start()
print("ready", flush=True)
while True:
    print(udp.recv(100).decode(), flush=True)
"""

#: Run in a host: connect to ADDR:7000 and send N bytes (exit 1 when that fails within 3 s, or when the peer
#: did not get all N), or send COUNT datagrams to ADDR:7001.
CLIENT = """
import socket, sys
addr, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if what == "tcp":
    try:
        with socket.create_connection((addr, 7000), timeout=0.5) as s:
            s.settimeout(3)
            s.sendall(b"x" * n)
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := s.recv(32):
                answer += chunk
    except OSError:
        sys.exit(1)
    if answer != str(n).encode():
        sys.exit(1)
else:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(n):
            s.sendto(str(i).encode(), (addr, 7001))
"""


def test_the_hosts_faults_cut_what_they_say_and_heal(make_net: Callable[..., Net], tmp_path) -> None:
    import itertools
    import socket
    import subprocess
    import sys

    from netkit import PREFIX

    net = make_net("a", "b")
    # What a run killed before its teardown left (its pid dead) goes when the next net is made.
    probe = subprocess.Popen(["true"])
    probe.wait()
    leftover = f"{PREFIX}-{probe.pid}-0-old"
    subprocess.run(["ip", "netns", "add", leftover], check=True)
    make_net("c")
    assert leftover not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    a, b = net["a"], net["b"]
    out = tmp_path / "peer.out"
    with open(out, "w") as f:
        peer = subprocess.Popen(b.exec_argv(sys.executable, "-I", "-S", "-c", PEER, b.addr), stdout=f)
    try:
        wait_for(lambda: "ready" in out.read_text(), 10, what="the peer listening in host b")

        def tcp(size: int = 1) -> float | None:
            """Seconds host a took to send ``size`` bytes to host b over TCP; None when it could not."""
            t = time.monotonic()
            done = subprocess.run(a.exec_argv(sys.executable, "-I", "-S", "-c", CLIENT, b.addr, "tcp", str(size)))
            return time.monotonic() - t if done.returncode == 0 else None

        marks = itertools.count()

        def datagrams(n: int) -> int:
            """How many of ``n`` datagrams from host a reached host b: those b printed before the mark this
            process sends it afterwards (over its own leg, never faulted)."""
            before = len(out.read_text().splitlines())
            subprocess.run(a.exec_argv(sys.executable, "-I", "-S", "-c", CLIENT, b.addr, "udp", str(n)), check=True)
            mark = f"mark{next(marks)}"
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(mark.encode(), (b.addr, 7001))
            lines = wait_for(lambda: (lines := out.read_text().splitlines()) and mark in lines and lines, 10,
                             what=f"{mark} printed by the peer")
            return lines.index(mark) - before

        def local_reaches_b() -> bool:
            try:
                socket.create_connection((b.addr, 7000), timeout=0.5).close()
            except OSError:
                return False
            return True

        assert tcp() is not None and local_reaches_b() and datagrams(5) == 5
        with net.partition("a", "b"):
            assert tcp() is None and datagrams(5) == 0
            assert local_reaches_b()  # only a and b are cut apart
        assert tcp() is not None
        with net.one_way("a", "b"):  # b deaf to a
            assert datagrams(5) == 0
        with net.one_way("b", "a"):  # a deaf to b: what a sends still arrives
            assert datagrams(5) == 5 and tcp() is None  # (b's answers to a's SYN do not)
        with net.loss("b", 50, peers=["a"]):
            assert 50 <= datagrams(200) <= 150
        assert datagrams(20) == 20
        with net.link_down("b"):
            assert tcp() is None and not local_reaches_b()
        assert tcp() is not None and local_reaches_b()
        with net.bandwidth("a", "1mbit", burst="8kb"):
            slow = tcp(128 * 1024)  # at 1 Mbit: a second
        unlimited = tcp(1024 * 1024)  # at 1 Mbit it would take eight
        assert slow is not None and unlimited is not None and slow >= 0.8 and unlimited < 4, (slow, unlimited)
    finally:
        peer.kill()
        peer.wait()
