"""Pause: a broker SIGSTOPped for longer than the client timeouts, then SIGCONTinued.

Two broker groups (broker-a, broker-b) serve one topic. Producers with latency fault tolerance send to both;
broker-a is frozen for FREEZE_S (the send timeout is 1 s): the producers must move to broker-b and keep
getting SEND_OK, while nothing piles up without bound - the producers' requests in flight and this
process's memory stay flat, and the frozen broker's backlog is worked off after SIGCONT (it answers at once
and its memory is what it was). After SIGCONT broker-a rejoins: sends reach it again. At the end a new
consumer group finds every SEND_OK message.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from faultload import SendLoad, consume_all

from procs import BrokerProcess, NamesrvProcess, freeze, remoting_probe, thaw, wait_for
from reliability import ReliabilityRecorder
from rocketmesh import Admin
from rocketmesh.remoting import RequestCode

TOPIC = "PauseTopic"
FREEZE_S = 6.0
SEND_TIMEOUT_MS = 3000
#: A send slower than this went to the frozen broker first: its first attempt there waits out its share of
#: the timeout (a third, with two retries), while a send straight to broker-b stays far below even when the
#: machine is busy.
SLOW_S = 0.5


def rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` (kB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_a_frozen_broker_is_avoided_nothing_piles_up_and_it_rejoins(
        namesrv: NamesrvProcess, start_broker: Callable[..., BrokerProcess],
        reliability: ReliabilityRecorder) -> None:
    a = start_broker(namesrv.addr, "broker-a", registerNameServerPeriod=1000)
    start_broker(namesrv.addr, "broker-b", registerNameServerPeriod=1000)
    with Admin(namesrv.addr) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        # wait_topic_route: the first broker's registration of the topic may not have reached the name server
        wait_for(lambda: {bd.broker_name for bd in admin.wait_topic_route(TOPIC).broker_datas}
                 == {"broker-a", "broker-b"}, 15, what="both brokers in the topic's route")
    load = SendLoad(namesrv.addr, TOPIC, producers=3, prefix="pause", pause_s=0.005,
                    send_msg_timeout_ms=SEND_TIMEOUT_MS, send_latency_fault_enable=True)

    def in_flight() -> int:
        """Requests the producers' clients hold unanswered (heartbeats, route look-ups; a sync send is one per
        thread on the thread's own socket, so it cannot pile up)."""
        return sum(len(p._instance.remoting._pending) for p in load.producers)

    with load:
        wait_for(lambda: load.ledger.first_ack_after(0, "broker-a") and load.ledger.first_ack_after(0, "broker-b"),
                 15, what="SEND_OKs from both brokers before the freeze")
        time.sleep(0.5)
        a_rss, own_rss = rss_kb(a.pid), rss_kb(os.getpid())
        frozen_at = time.monotonic()
        freeze(a.pid)
        peak_in_flight = 0
        while time.monotonic() - frozen_at < FREEZE_S:
            peak_in_flight = max(peak_in_flight, in_flight())
            time.sleep(0.05)
        during = [x for x in load.ledger.acks_since(frozen_at) if x.began > frozen_at]
        failed_during = load.ledger.failed
        own_rss_frozen = rss_kb(os.getpid())
        thawed_at = time.monotonic()
        thaw(a.pid)
        # The backlog the frozen broker got (sends that timed out, heartbeats) is worked off: it answers a new
        # request promptly.
        wait_for(lambda: remoting_probe(a.addr, RequestCode.GET_BROKER_RUNTIME_INFO)(a), 10,
                 what="broker-a answering after SIGCONT")
        drained_s = time.monotonic() - thawed_at
        rejoined = wait_for(lambda: load.ledger.first_ack_after(thawed_at, "broker-a"), 45,
                            what="a SEND_OK from broker-a after SIGCONT")
        a_rss_after = rss_kb(a.pid)
    # Moved: a send begun in the second half of the freeze went to broker-b and did not wait out a timeout.
    late = [x for x in during if x.began > frozen_at + FREEZE_S / 2]
    moved = [x for x in during if x.broker == "broker-a"]
    slow = [x for x in during if x.at - x.began > SLOW_S]
    moved_s = max((x.at for x in slow), default=frozen_at) - frozen_at
    acked = [x.body for x in load.ledger.snapshot()]
    got = consume_all(namesrv.addr, "pause-check", TOPIC, acked)
    lost = len(got.missing(acked))
    reliability.fault(
        f"SIGSTOP broker-a {FREEZE_S:.0f} s (send timeout {SEND_TIMEOUT_MS} ms), two broker groups", cycles=1,
        sent=load.ledger.sent, acknowledged=len(acked), lost=lost, duplicated=got.duplicated(),
        recovery_s=[moved_s, rejoined - thawed_at],
        note=f"recovery: {moved_s:.2f} s from the freeze to the last send slowed by it ({len(slow)} sends slowed, "
             f"{failed_during} failed), {rejoined - thawed_at:.2f} s from SIGCONT to a SEND_OK from broker-a; "
             f"{len(during)} SEND_OKs during the freeze, all from broker-b; producer requests pending at most "
             f"{peak_in_flight} (plus one sync send a thread); this process's RSS {own_rss // 1024} -> "
             f"{own_rss_frozen // 1024} MB, broker-a's "
             f"{a_rss // 1024} -> {a_rss_after // 1024} MB; broker-a answered {drained_s:.2f} s after SIGCONT")
    assert lost == 0, f"{lost} acknowledged messages lost: {got.missing(acked)[:10]}"
    assert not moved, "SEND_OK from the frozen broker"
    assert late and all(x.at - x.began <= SLOW_S for x in late), "producers still waiting on the frozen broker"
    assert peak_in_flight <= 3 * len(load.producers) + 10, f"{peak_in_flight} requests in flight"
    assert own_rss_frozen - own_rss < 64 * 1024 and a_rss_after - a_rss < 64 * 1024
