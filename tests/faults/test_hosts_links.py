"""Slow and lossy links between hosts: the relay (or netem) that delays them, and clients and brokers across one.

- The delay itself: with 50 ms +/- 20 ms on one host's cable, a UDP ping-pong from another host takes 60
  to 140 ms a round trip (the cable crossed twice) and spreads across that band; a burst of datagrams comes
  back out of order; 1 MiB over TCP arrives whole; after the heal round trips are back to a few ms. The
  relay ends with its net, and when the process that made the net dies.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from netkit import Net, NetkitUnavailable

from aptkit import apt_install, can_install
from procs import wait_for


def _unavailable(why: str) -> None:
    """Skip with one line; fail under CI=true, where the hosts must be there (as tests/faults/conftest.py)."""
    line = f"simulated hosts (network namespaces) unavailable: {why}"
    if os.environ.get("CI") == "true":
        pytest.fail(line, pytrace=False)
    pytest.skip(line)


@pytest.fixture
def make_net() -> Iterator[Callable[..., Net]]:
    """tests/faults/conftest.py's ``make_net`` with ``relayed=``: ``make_net("ns1", "client",
    relayed=["client"])`` makes hosts of which those named may be delayed (netkit.Net). ``start_on`` uses this
    one in this module, so its services stop before these hosts go."""
    nets: list[Net] = []

    def make(*hosts: str, relayed: tuple[str, ...] | list[str] = ()) -> Net:
        if shutil.which("nft") is None and can_install():
            apt_install("nftables")
        if shutil.which("nft") is None:
            _unavailable("no nft (Debian's nftables) for the faults, and no root with apt-get to install it")
        try:
            net = Net(hosts, relayed=relayed).open()
        except NetkitUnavailable as exc:
            _unavailable(str(exc))
        nets.append(net)
        return net

    yield make
    for net in nets:
        net.close()


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
            while s.recv(100) != f"p{i}".encode():  # a late answer to an earlier ping
                pass
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


def _send_tcp(addr: str, size: int) -> tuple[float, str]:
    """Seconds to send ``size`` bytes to the echo at ``addr`` over TCP and hear its answer; the answer."""
    data = os.urandom(size)
    t = time.monotonic()
    with socket.create_connection((addr, 7000), timeout=20) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        answer = s.recv(200).decode()
    assert answer == f"{size} {hashlib.sha256(data).hexdigest()}", answer
    return time.monotonic() - t, answer


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
            transfer_s, _ = _send_tcp(a.addr, 1 << 20)
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
    print(f"round trips {min(slow) * 1000:.0f}-{max(slow) * 1000:.0f} ms (median "
          f"{statistics.median(slow) * 1000:.0f} ms), {overtaken}/200 overtaken, 1 MiB in {transfer_s:.2f} s, "
          f"healed {statistics.median(healed) * 1000:.1f} ms, {'netem' if net.netem else 'relay'}")

