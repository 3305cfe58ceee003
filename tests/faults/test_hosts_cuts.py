"""Many hosts: what clients keep when the network cuts them off from a broker group or a name server.

Two name servers and two broker groups (broker-a and broker-b, each a SYNC_MASTER and its slave with its
ha service) on six hosts (hostkit.py); the test process is the client host. Each case cuts one thing off,
keeps producing through the cut, heals it, and counts: sent, acknowledged, lost (an acknowledged message
never consumed: must be 0), duplicated, and the time to recover.

- A broker group cut off from the clients (broker-a's master unreachable from the client host, while it
  still reaches its slave and the name servers, so the routes keep naming it): sends move to broker-b
  within the send timeout and a heartbeat; the backlog left on broker-a is read from its slave; after the
  heal sends come back to broker-a and every acknowledged message is consumed.
- A name server cut off (its host's cable pulled): clients keep working on the other one, a topic created
  meanwhile is routed by it and found by a client started during the cut; after the heal the brokers'
  registrations bring the first name server's routes to the same within a few registration periods.
- One-way (broker-a's master hears the client host, the client host does not hear it): the client's
  requests to it time out and its sends move to broker-b; the broker drops the silent client at its channel
  expiry (channelExpiredTimeout, shortened here), while broker-b keeps it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from faultload import consume_all
from hostkit import Mesh, start_mesh
from netkit import Host, Net

from clientkit import FAST_CLIENT
from procs import FAST_BROKER, ServiceProcess, wait_for
from reliability import ReliabilityRecorder
from rocketmesh import Admin, Message, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.client.results import SendStatus
from rocketmesh.model.message import MessageExt
from rocketmesh.remoting import RemotingClient, RequestCode, request

TOPIC = "HostsTopic"
#: Name servers on hosts of their own, so cutting a broker's host off cuts no name server with it.
TWO_GROUPS = {"namesrv": ("ns1", "ns2"),
              "groups": {"broker-a": ("a", "a-slave"), "broker-b": ("b", "b-slave")}}
#: The producer's send timeout (sendMsgTimeout, RocketMQ's default).
SEND_TIMEOUT_MS = 3000
#: Long polls held at most this long by the broker, and given up by the client after the second figure: a pull
#: in flight to a host that was cut off ends within it (RocketMQ's 15 s / 30 s defaults, shortened here).
SUSPEND_MS, PULL_TIMEOUT_MS = 2000, 4000
#: What a bound may take beyond its settings on a busy two-core machine.
SLACK_S = 2.0
#: A client heartbeats every broker together and waits out the slowest (3 s, RocketMQ's client API timeout), so
#: while one broker is silent the others hear it every 1 s + 3 s: their channel expiry must outlast that, as
#: RocketMQ's 120 s outlasts its 30 s heartbeats. Scanned every 500 ms.
ONE_WAY_BROKER = dict(FAST_BROKER, channelExpiredTimeout=6000)


@dataclass
class Sender:
    """Sends ``TOPIC`` messages one at a time on a thread until stopped, noting each outcome and when."""

    producer: Producer
    prefix: str
    interval_s: float = 0.02
    acked: list[str] = field(default_factory=list)
    #: (monotonic time the send began, seconds it took, broker name it went to or None, SendStatus or the
    #: error's text).
    outcomes: list[tuple[float, float, str | None, object]] = field(default_factory=list)
    slowest_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sender:
        self._thread = threading.Thread(target=self._run, name=f"sender-{self.prefix}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            body = f"{self.prefix}{i}"
            i += 1
            began = time.monotonic()
            try:
                r = self.producer.send(Message(TOPIC, body, keys=body))
            except Exception as exc:  # noqa: BLE001 - a failed send is an outcome to count
                self.outcomes.append((began, time.monotonic() - began, None, f"{type(exc).__name__}: {exc}"))
            else:
                self.outcomes.append((began, time.monotonic() - began, r.message_queue.broker_name, r.send_status))
                if r.send_status is SendStatus.SEND_OK:
                    self.acked.append(body)
            self.slowest_s = max(self.slowest_s, time.monotonic() - began)
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=SEND_TIMEOUT_MS / 1000 * 3 + 5)
            assert not self._thread.is_alive(), "a send never returned"

    @property
    def sent(self) -> int:
        return len(self.outcomes)

    def first_to(self, broker: str, since: float) -> float | None:
        """When the first acknowledged send to ``broker`` began at or after ``since``."""
        return next((t for t, _, b, s in self.outcomes if t >= since and b == broker and s is SendStatus.SEND_OK),
                    None)

    def since(self, fault_at: float, until: float) -> Moved:
        """How the sends that began between ``fault_at`` and ``until`` went."""
        during = [o for o in self.outcomes if fault_at <= o[0] < until]
        failed = [o for o in during if o[3] is not SendStatus.SEND_OK]
        return Moved(len(during), failed, max((o[1] for o in during), default=0.0),
                     max((o[0] + o[1] - fault_at for o in failed), default=0.0),
                     [o for o in during if o[2] == "broker-a" and o[3] is SendStatus.SEND_OK])


@dataclass
class Moved:
    """Sends during a fault: how many, which failed, the slowest, when the last failure ended (s after the
    fault), and those broker-a acknowledged."""

    sends: int
    failed: list[tuple[float, float, str | None, object]]
    slowest_s: float
    last_failure_s: float
    acked_by_a: list[tuple[float, float, str | None, object]]

    def describe(self) -> str:
        return (f"{len(self.failed)} of {self.sends} sends during it failed (the last ended "
                f"{self.last_failure_s:.2f} s after the fault), the slowest took {self.slowest_s:.2f} s (an "
                f"attempt at broker-a timing out, then the retry at broker-b; sendMsgTimeout {SEND_TIMEOUT_MS} ms)")


class Collector:
    """A push consumer's listener: every body it got (with repeats), and when each first came."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.got: dict[str, int] = {}
        self.first: dict[str, float] = {}

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        for m in msgs:
            body = m.body.decode()
            with self.lock:
                self.got[body] = self.got.get(body, 0) + 1
                self.first.setdefault(body, time.monotonic())
            if self.delay_s:
                time.sleep(self.delay_s)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def has(self, bodies: list[str]) -> bool:
        with self.lock:
            return all(b in self.got for b in bodies)


def client_ids_at(client: RemotingClient, addr: str, group: str) -> list[str]:
    """The client ids ``addr`` holds for consumer ``group`` (its GET_CONSUMER_CONNECTION_LIST; [] when none)."""
    resp = client.invoke_sync(addr, request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}),
                              3000)
    if resp.code != 0:
        return []
    return [c["clientId"] for c in orjson.loads(resp.body).get("connectionSet", [])]


#: Run in a host: print the client ids broker ARGV[1] holds for consumer group ARGV[2], as JSON.
CLIENT_IDS = """
import sys, orjson
from rocketmesh.remoting import RemotingClient, RequestCode, request
with RemotingClient(name="probe") as client:
    resp = client.invoke_sync(sys.argv[1], request(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                                   {"consumerGroup": sys.argv[2]}), 3000)
ids = [c["clientId"] for c in orjson.loads(resp.body).get("connectionSet", [])] if resp.code == 0 else []
print(orjson.dumps(ids).decode())
"""


def client_ids_from(host: Host, addr: str, group: str) -> list[str]:
    """:func:`client_ids_at`, asked from ``host``: for a broker this process cannot hear."""
    return orjson.loads(host.run(sys.executable, "-c", CLIENT_IDS, addr, group, timeout_s=15))


def two_groups(make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess], **broker_config: object) \
        -> tuple[Net, Mesh]:
    net = make_net("ns1", "ns2", "a", "a-slave", "b", "b-slave")
    return net, start_mesh(net, start_on, TWO_GROUPS, **broker_config)


def test_a_broker_group_cut_off_from_its_clients_hands_sends_to_the_other_and_reads_to_its_slave(
        make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess],
        reliability: ReliabilityRecorder) -> None:
    net, mesh = two_groups(make_net, start_on)
    producer = Producer("cut-producer", mesh.namesrv, send_msg_timeout_ms=SEND_TIMEOUT_MS, **FAST_CLIENT)
    # A slow consumer, so a backlog is left on broker-a when it is cut off: one thread, a few ms a message,
    # and a small buffer per queue, so most of the backlog is still on the brokers at the cut.
    collector = Collector(delay_s=0.005)
    consumer = PushConsumer("cut-group", mesh.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            consume_thread_nums=1, pull_batch_size=8, pull_threshold_for_queue=16,
                            broker_suspend_max_time_ms=SUSPEND_MS, consumer_timeout_ms_when_suspend=PULL_TIMEOUT_MS,
                            **FAST_CLIENT)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(collector)
    with producer:
        backlog: dict[str, str] = {}
        for i in range(600):
            r = producer.send(Message(TOPIC, f"backlog{i}", keys=f"backlog{i}"))
            assert r.send_status is SendStatus.SEND_OK
            backlog[f"backlog{i}"] = r.message_queue.broker_name
        on_a = [b for b, name in backlog.items() if name == "broker-a"]
        assert 100 <= len(on_a) <= 500, f"{len(on_a)} of 600 on broker-a"
        sender = Sender(producer, "live").start()
        with consumer:
            wait_for(lambda: collector.got, 30, what="the consumer's first message")
            cut = net.cut_off("a", ["local"])
            cut_at = time.monotonic()
            left_on_a = len([b for b in on_a if b not in collector.got])
            # The rest of broker-a's backlog comes from its slave, while the master is still cut off.
            wait_for(lambda: collector.has(on_a), 60, what="broker-a's backlog consumed from its slave")
            backlog_s = time.monotonic() - cut_at
            # Sends have moved to broker-b by now: give them a few seconds there.
            wait_for(lambda: time.monotonic() - cut_at > SEND_TIMEOUT_MS / 1000 + 3, 30)
            cut.heal()
            moved = sender.since(cut_at, time.monotonic())
            healed = time.monotonic()
            wait_for(lambda: sender.first_to("broker-a", healed) is not None, 30,
                     what="an acknowledged send to broker-a after the heal")
            back_s = (sender.first_to("broker-a", healed) or healed) - healed
            sender.stop()
            acked = list(backlog) + sender.acked
            wait_for(lambda: collector.has(acked), 60, what="every acknowledged message consumed")
    got = consume_all(mesh.namesrv, "cut-check", TOPIC, acked, timeout_s=30, quiet_s=0.5)
    lost = len(got.missing(acked))
    duplicated = sum(n - 1 for n in collector.got.values())
    moved_bound = SEND_TIMEOUT_MS / 1000 + FAST_CLIENT["heartbeat_broker_interval_ms"] / 1000 + SLACK_S
    reliability.fault(
        "Hosts: a broker group cut off from its clients", cycles=1, sent=len(backlog) + sender.sent,
        acknowledged=len(acked), lost=lost, duplicated=duplicated, recovery_s=[back_s],
        note=f"broker-a's master cut off from the client host (it still reaches its slave and the name "
             f"servers); {moved.describe()}; {left_on_a} messages "
             f"left on broker-a at the cut consumed from its slave within {backlog_s:.1f} s; sends back on "
             f"broker-a {back_s:.2f} s after the heal (recovery); the consumer counted {duplicated} repeats, "
             f"a second group read every acknowledged message")
    assert lost == 0, got.missing(acked)[:10]
    assert moved.last_failure_s <= moved_bound, f"sends still failing {moved.last_failure_s:.2f} s after the cut"
    assert sender.slowest_s <= SEND_TIMEOUT_MS / 1000 + SLACK_S, f"a send took {sender.slowest_s:.2f} s"
    assert not moved.acked_by_a, "a send acknowledged by broker-a while the client host was cut off from it"
    assert left_on_a > 0, "nothing of broker-a's backlog was left at the cut: the case proved nothing"


def test_a_name_server_cut_off_leaves_the_clients_on_the_other_and_routes_converge_after_the_heal(
        make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess],
        reliability: ReliabilityRecorder) -> None:
    net, mesh = two_groups(make_net, start_on)
    ns1, ns2 = mesh.namesrvs
    collector = Collector()
    consumer = PushConsumer("ns-cut-group", mesh.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(collector)
    producer = Producer("ns-cut-producer", mesh.namesrv, send_msg_timeout_ms=SEND_TIMEOUT_MS, **FAST_CLIENT)
    with consumer, producer:
        sender = Sender(producer, "ns").start()
        wait_for(lambda: len(sender.acked) >= 20, 30, what="sends before the cut")
        down = net.link_down("ns1")
        cut_at = time.monotonic()
        # A topic made during the cut: the brokers register it with ns2 only.
        with Admin(ns2.addr) as admin:
            admin.create_topic("HostsNewTopic", read_queue_nums=2, write_queue_nums=2)
            admin.wait_topic_route("HostsNewTopic", timeout_s=15)
        # A client started during the cut, given both name servers, ns1 first.
        late_began = time.monotonic()
        with Producer("ns-cut-late", f"{ns1.addr};{ns2.addr}", send_msg_timeout_ms=SEND_TIMEOUT_MS,
                      **FAST_CLIENT) as late:
            r = late.send(Message("HostsNewTopic", "new"))
            late_s = time.monotonic() - late_began
        assert r.send_status is SendStatus.SEND_OK
        wait_for(lambda: time.monotonic() - cut_at > 5, 10)
        moved = sender.since(cut_at, time.monotonic())
        down.heal()
        healed = time.monotonic()

        def ns1_routes_the_new_topic() -> bool:
            try:
                with Admin(ns1.addr) as admin:
                    route = admin.topic_route("HostsNewTopic")
            except Exception:  # noqa: BLE001 - not routed there yet
                return False
            return sorted(bd.broker_name for bd in route.broker_datas) == ["broker-a", "broker-b"]
        wait_for(ns1_routes_the_new_topic, 30, what="ns1 routing the topic made during the cut")
        converged_s = time.monotonic() - healed
        with Admin(ns1.addr) as a1, Admin(ns2.addr) as a2:
            for topic in (TOPIC, "HostsNewTopic"):
                r1, r2 = a1.topic_route(topic), a2.topic_route(topic)
                assert [(b.broker_name, b.broker_addrs) for b in r1.broker_datas] == \
                    [(b.broker_name, b.broker_addrs) for b in r2.broker_datas], topic
                assert sorted((q.broker_name, q.read_queue_nums) for q in r1.queue_datas) == \
                    sorted((q.broker_name, q.read_queue_nums) for q in r2.queue_datas), topic
        sender.stop()
        wait_for(lambda: collector.has(sender.acked), 30, what="every acknowledged message consumed")
    lost = len([b for b in sender.acked if b not in collector.got])
    duplicated = sum(n - 1 for n in collector.got.values())
    reliability.fault(
        "Hosts: a name server cut off", cycles=1, sent=sender.sent, acknowledged=len(sender.acked), lost=lost,
        duplicated=duplicated, recovery_s=[converged_s],
        note=f"ns1's host cable pulled for {healed - cut_at:.1f} s: {moved.sends - len(moved.failed)} of "
             f"{moved.sends} sends during it acknowledged, the slowest in {moved.slowest_s:.2f} s; a producer "
             f"started during the cut, ns1 first in its list, started and sent to a "
             f"topic made meanwhile in {late_s:.2f} s; ns1 routed that topic as ns2 does {converged_s:.2f} s after "
             f"the heal (recovery; registerNameServerPeriod 1 s)")
    assert not moved.failed, moved.failed[:5]
    assert lost == 0
    assert late_s <= SEND_TIMEOUT_MS / 1000 + SLACK_S


def test_a_client_that_cannot_hear_a_broker_moves_on_and_the_broker_lets_it_go_at_channel_expiry(
        make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess], remoting_client: RemotingClient,
        reliability: ReliabilityRecorder) -> None:
    expiry_ms, scan_ms = ONE_WAY_BROKER["channelExpiredTimeout"], ONE_WAY_BROKER["clientScanInterval"]
    net, mesh = two_groups(make_net, start_on, **ONE_WAY_BROKER)
    a, b = mesh.groups["broker-a"].master, mesh.groups["broker-b"].master
    collector = Collector()
    consumer = PushConsumer("one-way-group", mesh.namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            broker_suspend_max_time_ms=SUSPEND_MS, consumer_timeout_ms_when_suspend=PULL_TIMEOUT_MS,
                            **FAST_CLIENT)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(collector)
    producer = Producer("one-way-producer", mesh.namesrv, send_msg_timeout_ms=SEND_TIMEOUT_MS, **FAST_CLIENT)
    with consumer, producer:
        cid = consumer.client_id
        wait_for(lambda: cid in client_ids_at(remoting_client, a.addr, "one-way-group")
                 and cid in client_ids_at(remoting_client, b.addr, "one-way-group"), 15,
                 what="the consumer known to both masters")
        sender = Sender(producer, "oneway").start()
        wait_for(lambda: len(sender.acked) >= 20, 30, what="sends before the fault")
        # What broker-a's master sends to the client host is lost; what the client sends still arrives.
        mute = net.mute("a", ["local"])
        cut_at = time.monotonic()
        # Asked from a name server's host: the client host no longer hears broker-a.
        wait_for(lambda: cid not in client_ids_from(net["ns1"], a.addr, "one-way-group"),
                 (expiry_ms + scan_ms) / 1000 + 15, what="broker-a letting the silent client go")
        let_go_s = time.monotonic() - cut_at
        assert cid in client_ids_at(remoting_client, b.addr, "one-way-group")
        wait_for(lambda: time.monotonic() - cut_at > SEND_TIMEOUT_MS / 1000 + 3, 15)
        mute.heal()
        moved = sender.since(cut_at, time.monotonic())
        healed = time.monotonic()
        wait_for(lambda: cid in client_ids_at(remoting_client, a.addr, "one-way-group"), 15,
                 what="the client back at broker-a after the heal")
        back_s = time.monotonic() - healed
        sender.stop()
        wait_for(lambda: collector.has(sender.acked), 30, what="every acknowledged message consumed")
    lost = len([x for x in sender.acked if x not in collector.got])
    duplicated = sum(n - 1 for n in collector.got.values())
    moved_bound = SEND_TIMEOUT_MS / 1000 + FAST_CLIENT["heartbeat_broker_interval_ms"] / 1000 + SLACK_S
    reliability.fault(
        "Hosts: one-way partition (a broker heard, not hearing back)", cycles=1, sent=sender.sent,
        acknowledged=len(sender.acked), lost=lost, duplicated=duplicated, recovery_s=[back_s],
        note=f"the client host deaf to broker-a's master: {moved.describe()}; "
             f"broker-a dropped the silent consumer {let_go_s:.1f} s after the fault (channelExpiredTimeout "
             f"{expiry_ms} ms, scanned every {scan_ms} ms), broker-b kept it; back at broker-a {back_s:.2f} s "
             f"after the heal (recovery)")
    assert lost == 0
    assert moved.last_failure_s <= moved_bound, f"sends still failing {moved.last_failure_s:.2f} s after the fault"
    assert not moved.acked_by_a, "a send acknowledged by broker-a while the client host could not hear it"
    assert sender.slowest_s <= SEND_TIMEOUT_MS / 1000 + SLACK_S, f"a send took {sender.slowest_s:.2f} s"
    assert let_go_s <= (expiry_ms + scan_ms) / 1000 + SLACK_S + SEND_TIMEOUT_MS / 1000, let_go_s
