"""Losses noticed at once: a peer SIGKILLed is known dead when its connection closes, not after the 120 s
silence expiry (which every process here keeps at its default, so only a closed connection can explain
what is seen within the issue's bounds)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from procs import run_cli, wait_for
from rocketmesh import Admin, Message, MQError, Producer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, PushConsumer
from rocketmesh.model.message import MessageExt, MessageQueue

#: The issue's bounds: a killed consumer's queues taken over (rebalance included), a killed broker out of
#: the routes and the cluster table.
CONSUMER_TAKEOVER_S = 30
BROKER_GONE_S = 15


#: The other member of the group, in a process of its own: prints each body it consumes, and "started".
VICTIM = """
import sys, time
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus, PushConsumer
namesrv, group, topic, orderly = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "orderly"
c = PushConsumer(group, namesrv, instance_name="victim", consume_from="CONSUME_FROM_FIRST_OFFSET")
c.subscribe(topic, "*")
def listener(msgs):
    for m in msgs:
        print(m.body.decode(), flush=True)
    return ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeConcurrentlyStatus.CONSUME_SUCCESS
c.register_listener(listener, orderly=orderly)
c.start()
print("started", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
def test_a_killed_consumers_queues_go_to_the_survivor(namesrv, broker, admin: Admin, producer: Producer,
                                                       tmp_path: Path, orderly: bool) -> None:
    """Orderly, each member holds a broker lock on each of its queues (renewed every 20 s, expiring 60 s
    after the last renewal): the killed one's locks go with its connection, so the survivor locks its
    queues within the takeover bound, well before they would have expired."""
    topic, group = f"Liveness{orderly}Topic", f"liveness-{orderly}-group"
    admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    admin.wait_topic_route(topic)
    lock = threading.Lock()
    got: list[str] = []
    success = ConsumeOrderlyStatus.SUCCESS if orderly else ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def listener(msgs: list[MessageExt]) -> object:
        with lock:
            got.extend(m.body.decode() for m in msgs)
        return success

    survivor = PushConsumer(group, namesrv.addr, instance_name="survivor", consume_from="CONSUME_FROM_FIRST_OFFSET")
    survivor.subscribe(topic, "*")
    survivor.register_listener(listener, orderly=orderly)
    out, err = tmp_path / "victim.stdout", tmp_path / "victim.stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        victim = subprocess.Popen(
            [sys.executable, "-c", VICTIM, namesrv.addr, group, topic, "orderly" if orderly else "concurrently"],
            stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        survivor.start()
        wait_for(lambda: "started" in out.read_text() or victim.poll() is not None, 30,
                 what="the victim consumer starting")
        assert victim.poll() is None, err.read_text()
        wait_for(lambda: len(survivor.assigned_queues()) == 2, 15, what="the two consumers splitting four queues")
        theirs = sorted(set(range(4)) - {mq.queue_id for mq in survivor.assigned_queues()})
        for q in theirs:
            producer.send(Message(topic, f"before-{q}"), queue=MessageQueue(topic, broker.broker_name, q))
        wait_for(lambda: all(f"before-{q}" in out.read_text() for q in theirs), 15,
                 what="the victim consuming its own queues")

        victim.kill()  # SIGKILL: no unregistering, no goodbye; the kernel closes its connections
        victim.wait(5)
        after = [f"after-{q}-{i}" for q in range(4) for i in range(5)]
        for body in after:
            q = int(body.split("-")[1])
            producer.send(Message(topic, body), queue=MessageQueue(topic, broker.broker_name, q))
        wait_for(lambda: set(after) <= set(got), CONSUMER_TAKEOVER_S,
                 what="the survivor consuming what was sent to every queue after the kill")
        assert len(survivor.assigned_queues()) == 4
        assert [c.client_id for c in admin.consumer_connection(group).connections] == [survivor.client_id]
        if orderly:  # and queue by queue in the order sent
            for q in range(4):
                assert [b for b in got if b.startswith(f"after-{q}-")] == [f"after-{q}-{i}" for i in range(5)]
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(5)
        survivor.shutdown()


def route_addrs(admin: Admin, topic: str) -> set[str]:
    """The broker addresses of ``topic``'s route as the name server gives it now (empty when it has none)."""
    try:
        route = admin.topic_route(topic)
    except MQError:
        return set()
    return {addr for bd in route.broker_datas for addr in bd.broker_addrs.values()}


def test_a_killed_broker_leaves_the_routes_and_the_cluster_list(start_namesrv, start_broker) -> None:
    ns = start_namesrv()
    a = start_broker(ns.addr, "broker-a")
    b = start_broker(ns.addr, "broker-b")
    with Admin(ns.addr) as admin:
        admin.create_topic("Everywhere", read_queue_nums=2, write_queue_nums=2)
        wait_for(lambda: route_addrs(admin, "Everywhere") == {a.addr, b.addr}, 15, what="both brokers in the route")
        b.kill()  # SIGKILL: it never unregisters
        wait_for(lambda: route_addrs(admin, "Everywhere") == {a.addr}
                 and [x.addr for x in admin.cluster_list()] == [a.addr],
                 BROKER_GONE_S, what="the killed broker out of the route and the cluster table")
    listed = run_cli("admin", "cluster-list", "-n", ns.addr)
    assert listed.returncode == 0, listed.stderr
    assert a.addr in listed.stdout and b.addr not in listed.stdout and "broker-b" not in listed.stdout
