"""A client host whose clock is minutes off, under ACL: its signed requests are refused saying so, and once its
clock is stepped right (as NTP would) they pass again, nothing lost.

The name server and the broker run with aclEnable on a host of their own (netkit.py), on the real clock. The
client, a producer signed with a PUB account, runs on a second host under libfaketime (Debian's faketime): a
network namespace has no clock of its own, so the client process is given one, read from a file the test
rewrites while it runs. Only the wall clock moves, as an NTP step moves it; the monotonic clock is left alone.

- Fast at start: the client's clock 5 minutes ahead when its producer starts. Every send is refused with
  NO_PERMISSION by the name server (its route lookup is signed), and the remark the client's MQBrokerError
  carries names the client host's address and the account and says the Timestamp is 300 s ahead of the
  server's clock, outside the ±60 s replay window. Stepped to the right time, its sends succeed again.
- Slow while running: the clock stepped 5 minutes back under the running producer (its route cached). Every
  send is refused by the broker, the remark saying the Timestamp is 300 s behind; stepped right, sends succeed.
- Every send answered SEND_OK is consumed once by a signed consumer on a third host (this process), none of
  the refused ones is stored, and the refusals are in the servers' logs, where an operator looks.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from faultload import Deliveries, start_consumer
from netkit import Net

from aptkit import apt_install, can_install, unavailable
from procs import BrokerProcess, NamesrvProcess, ServiceProcess, wait_for
from reliability import ReliabilityRecorder
from rocketmesh import Admin
from rocketmesh.acl import SessionCredentials
from rocketmesh.remoting import ResponseCode

TOPIC, GROUP = "ClockTopic", "clock-group"
ADMIN = SessionCredentials("clockadmin", "adminsecret")
PUB = SessionCredentials("clockpub1", "pubsecret")
SUB = SessionCredentials("clocksub1", "subsecret")
ACL_YAML = f"""\
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {PUB.access_key}
    secretKey: {PUB.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=PUB
  - accessKey: {SUB.access_key}
    secretKey: {SUB.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {TOPIC}=SUB
    groupPerms:
      - {GROUP}=SUB
"""
#: How far off the client's clock is stepped: minutes, five times the replay window.
SKEW_S = 300
#: Refusals seen in each skewed phase before the clock is stepped right, and sends answered SEND_OK after.
REFUSALS_EACH, OKS_EACH = 5, 10
#: Bound on each wait for the client (it starts in a second or two; a send takes milliseconds).
WAIT_S = 20
#: Bound on the time from a clock stepped right to the client's first SEND_OK.
RECOVER_S = 5.0

#: The client host's producer: sends numbered bodies until its stdin closes, one JSON line per send with its
#: wall clock (faked) and monotonic clock (real) before and after, and its answer or the error's code and
#: remark. It waits with Event.wait: Python 3.11's time.sleep fails with EINVAL under libfaketime 0.9.10 when
#: the monotonic clock is not faked (wolfcw/libfaketime#426).
CLIENT = """
import json, sys, threading, time
from rocketmesh import Message, Producer
from rocketmesh.client.errors import MQBrokerError, MQError
namesrv, topic, access_key, secret_key = sys.argv[1:5]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
producer = Producer("clock-producer", namesrv, access_key=access_key, secret_key=secret_key,
                    send_msg_timeout_ms=3000, heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000)
producer.start()
i = 0
while not stop.is_set():
    line = {"body": f"clock{i}", "clock": time.time(), "mono": time.monotonic()}
    try:
        r = producer.send(Message(topic, line["body"].encode()))
        line.update(result="ok", status=r.send_status.name, msg_id=r.msg_id)
    except MQBrokerError as exc:
        line.update(result="refused", code=int(exc.response_code), remark=exc.remark)
    except MQError as exc:
        line.update(result="error", error=f"{type(exc).__name__}: {exc}")
    line.update(clock_after=time.time(), mono_after=time.monotonic())
    print(json.dumps(line), flush=True)
    i += 1
    stop.wait(0.1)
producer.shutdown()
"""

_REMARK = re.compile(r"Timestamp is (\d+\.\d) s (ahead of|behind) this server's clock, outside the replay "
                     r"window of ±60 s")


def libfaketime() -> str:
    """The path of libfaketime's multi-threaded library, installed from Debian's faketime when missing and this
    process may; without it the test fails saying so."""
    def find() -> list[str]:
        return glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") + glob.glob("/usr/lib/faketime/libfaketimeMT.so.1")

    if not find() and can_install():
        apt_install("faketime")
    if not find():
        unavailable("libfaketime unavailable: Debian's faketime is not installed, and no root with apt-get to "
                    "install it")
    return find()[0]


class SkewedClient:
    """The CLIENT script run by ``host_argv`` (a host's ``exec_argv``) under ``faketime_lib``, its wall clock
    ``clock_file``'s offset (see :meth:`step`); its lines read from its stdout's file."""

    def __init__(self, host_argv: Callable[..., list[str]], faketime_lib: str, tmp: Path, namesrv: str) -> None:
        self.clock_file = tmp / "client-clock"
        self.out, self.err = tmp / "client.out", tmp / "client.err"
        self.proc: subprocess.Popen | None = None
        self._argv = host_argv(
            "env", f"LD_PRELOAD={faketime_lib}", f"FAKETIME_TIMESTAMP_FILE={self.clock_file}",
            # Read at each clock read, so a step takes effect at once; the monotonic clock stays real, as NTP
            # leaves it (the client's timeouts and this test's timings go by it).
            "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1",
            sys.executable, "-I", "-c", CLIENT, namesrv, TOPIC, PUB.access_key, PUB.secret_key)

    def step(self, offset_s: int) -> float:
        """Set the client's wall clock to the real one plus ``offset_s``; returns when (monotonic)."""
        # Replaced whole: libfaketime never reads a half-written file.
        tmp = self.clock_file.with_suffix(".new")
        tmp.write_text(f"{offset_s:+d}\n")
        os.replace(tmp, self.clock_file)
        return time.monotonic()

    def start(self) -> None:
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=out, stderr=err)

    def lines(self) -> list[dict]:
        """The client's lines so far (a line still being written left out); AssertionError when it died."""
        assert self.proc is not None and self.proc.poll() is None, \
            f"the client exited with {self.proc.returncode if self.proc else None}:\n{self.err.read_text()[-3000:]}"
        return [json.loads(line) for line in self.out.read_text().splitlines(keepends=True) if line.endswith("\n")]

    def stop(self) -> None:
        """Close its stdin (it ends its send and shuts its producer down); killed if it is not gone in 15 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def test_a_client_host_minutes_off_is_refused_saying_so_and_works_once_its_clock_is_stepped_right(
        make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess], tmp_path: Path,
        reliability: ReliabilityRecorder) -> None:
    faketime_lib = libfaketime()  # fails before anything is started where it cannot be had
    net = make_net("server", "client")
    server, client_host = net["server"], net["client"]
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_YAML)
    acl = dict(aclEnable="true", aclFile=str(acl_file))
    namesrv = start_on(server, NamesrvProcess, name="namesrv", **acl)
    broker = start_on(server, BrokerProcess, namesrv.addr, name="broker-a", credentials=ADMIN, **acl)
    broker.wait_registered(15)
    with Admin(namesrv.addr, access_key=ADMIN.access_key, secret_key=ADMIN.secret_key) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        admin.wait_topic_route(TOPIC)
    deliveries = Deliveries()
    consumer = start_consumer(namesrv.addr, GROUP, TOPIC, deliveries, access_key=SUB.access_key,
                              secret_key=SUB.secret_key)
    client = SkewedClient(client_host.exec_argv, faketime_lib, tmp_path, namesrv.addr)
    # This process's wall clock less its monotonic one (both real): what the client's wall clock should read
    # at one of its monotonic instants (the monotonic clock is the machine's, in every namespace).
    real_minus_mono = time.time() - time.monotonic()
    try:
        client.step(+SKEW_S)
        client.start()
        cycles = []
        for skew in (+SKEW_S, -SKEW_S):
            if skew < 0:
                client.step(skew)  # under the running producer, its route cached
            began = len(client.lines())
            refused = wait_for(lambda b=began: len(r := [x for x in client.lines()[b:] if x["result"] != "ok"])
                               >= REFUSALS_EACH and r, WAIT_S, what=f"{REFUSALS_EACH} sends refused at {skew:+d} s")
            stepped_at = client.step(0)
            at = len(client.lines())
            oks = wait_for(lambda a=at: len(o := [x for x in client.lines()[a:] if x["result"] == "ok"])
                           >= OKS_EACH and o, WAIT_S, what=f"{OKS_EACH} SEND_OK after the clock was stepped right")
            cycles.append((skew, refused, stepped_at, oks[0]["mono_after"] - stepped_at))
        client.stop()
        lines = [json.loads(line) for line in client.out.read_text().splitlines()]
        acked = [x["body"] for x in lines if x["result"] == "ok"]
        wait_for(lambda: not deliveries.missing(acked), WAIT_S, what="every SEND_OK message consumed")
        time.sleep(1.0)  # late duplicates
    finally:
        client.stop()
        consumer.shutdown()

    def skew_s(clock: float, mono: float) -> float:
        """How far the client's wall clock was off the real one when it read ``clock`` at ``mono``."""
        return clock - (mono + real_minus_mono)

    errors = [x for x in lines if x["result"] == "error"]
    assert not errors, f"sends that failed otherwise than refused: {errors[:3]}"
    for skew, refused, _, _ in cycles:
        way, server_tag = ("ahead of", "[namesrv]") if skew > 0 else ("behind", "[broker broker-a]")
        for x in refused:
            # The clock libfaketime gave the client is the one stepped to (read after its answer: a send begun
            # just before a step is signed after it).
            assert abs(skew_s(x["clock_after"], x["mono_after"]) - skew) < 2, (skew, x)
            assert x["result"] == "refused" and x["code"] == ResponseCode.NO_PERMISSION, x
            m = _REMARK.search(x["remark"])
            assert m and m.group(2) == way and abs(float(m.group(1)) - SKEW_S) < 2, x["remark"]
            # Who refused, from which host, which account: what an operator needs to find the clock to set.
            assert x["remark"].startswith(server_tag), x["remark"]
            assert f"from {client_host.addr} " in x["remark"] and f"accessKey={PUB.access_key}" in x["remark"], \
                x["remark"]
    for x in lines:
        before, after = skew_s(x["clock"], x["mono"]), skew_s(x["clock_after"], x["mono_after"])
        if abs(before) < 2 and abs(after) < 2:  # signed with the right clock, whatever its retries
            assert x["result"] == "ok" and x["status"] == "SEND_OK", x
        elif abs(before) > 60 and abs(after) > 60:  # signed with a clock minutes off
            assert x["result"] == "refused", x
    recovery = [r for _, _, _, r in cycles]
    assert all(0 < r <= RECOVER_S for r in recovery), recovery

    refused_bodies = {x["body"] for x in lines if x["result"] == "refused"}
    assert not refused_bodies & set(deliveries.count), "a refused send was stored"
    lost = deliveries.missing(acked)
    # Where an operator looks: each server's log names the refusal and the way the clock is off.
    assert "ahead of this server's clock" in namesrv.stderr_text()
    assert "behind this server's clock" in broker.stderr_text()
    reliability.fault(
        "Hosts: a client host's clock 5 min off under ACL, then stepped right (as NTP would)", cycles=2,
        sent=len(lines), acknowledged=len(acked), lost=len(lost), duplicated=deliveries.duplicated(),
        recovery_s=recovery,
        note=f"libfaketime on the client's host: {SKEW_S} s fast when its producer started (every send refused "
             f"NO_PERMISSION by the name server's route check, {len(cycles[0][1])} before the step), then "
             f"{SKEW_S} s slow under the running producer (refused by the broker, {len(cycles[1][1])} before the "
             f"step); the remarks say 'Timestamp is 300.0 s ahead of' / 'behind this server's clock' and name the "
             f"client's host and account; {len(refused_bodies)} refused in all, none stored; first SEND_OK "
             f"{recovery[0]:.2f} s / {recovery[1]:.2f} s after each step (recovery)")
    assert not lost, lost[:10]
