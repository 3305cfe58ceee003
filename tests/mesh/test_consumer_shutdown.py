"""A consumer that stops keeps its place: offsets persisted at shutdown (RocketMQ's
persistConsumerOffset), at interpreter exit too, and the next run goes on where it stopped. On the
session's shared mesh (conftest.py's ``mesh_admin``)."""

from __future__ import annotations

import subprocess
import sys
import threading

from procs import run_cli
from rocketmesh import Admin, ConsumeConcurrentlyStatus, Message, Producer, PullConsumer, PushConsumer
from rocketmesh.client import MQClientError

#: Long enough that only shutdown (not the periodic commit) can have persisted anything.
NEVER_MS = 3_600_000


def send(namesrv: str, topic: str, n: int) -> set[str]:
    with Producer("shutdown-producer", namesrv) as producer:
        return {producer.send(Message(topic, f"m{i}")).msg_id for i in range(n)}


def offline(admin: Admin, group: str) -> bool:
    try:
        admin.consumer_connection(group)
    except MQClientError as exc:
        return "not online" in str(exc)
    return False


def test_consume_with_count_goes_on_where_the_last_run_stopped(rocketmesh_namesrv: str) -> None:
    send(rocketmesh_namesrv, "CountTopic", 30)
    seen: list[str] = []
    for _ in range(3):
        run = run_cli("consume", "-n", rocketmesh_namesrv, "-t", "CountTopic", "-g", "count-group", "-c", "10",
                      "--timeout", "30")
        assert run.returncode == 0, run.stderr
        bodies = [line.split()[-1] for line in run.stdout.splitlines() if line.startswith("Receive New Messages")]
        assert len(bodies) == 10, run.stdout
        seen += bodies
    assert sorted(seen) == sorted(f"m{i}" for i in range(30)), "a run printed a message an earlier run printed"
    last = run_cli("consume", "-n", rocketmesh_namesrv, "-t", "CountTopic", "-g", "count-group", "-c", "10",
                   "--timeout", "2")
    assert "Receive New Messages" not in last.stdout


def test_push_consumer_shutdown_persists_its_offsets_and_leaves_the_group(rocketmesh_namesrv: str,
        mesh_admin: Admin) -> None:
    send(rocketmesh_namesrv, "PushStop", 20)
    got = []
    done = threading.Event()

    def listener(msgs):
        got.extend(msgs)
        if len(got) >= 20:
            done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("push-stop", rocketmesh_namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            persist_consumer_offset_interval_ms=NEVER_MS)
    consumer.subscribe("PushStop", "*")
    consumer.register_listener(listener)
    with consumer:
        assert done.wait(30)
    assert mesh_admin.consume_stats("push-stop", "PushStop").total_diff() == 0
    assert offline(mesh_admin, "push-stop")


def test_pull_consumer_shutdown_commits_what_polls_returned(rocketmesh_namesrv: str, mesh_admin: Admin) -> None:
    send(rocketmesh_namesrv, "PullStop", 12)
    polled = []
    with PullConsumer("pull-stop", rocketmesh_namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                      auto_commit_interval_ms=NEVER_MS) as consumer:
        consumer.subscribe("PullStop")
        while len(polled) < 12:
            batch = consumer.poll(timeout_ms=10_000)
            assert batch, f"only {len(polled)} of 12 polled"
            polled += batch
    assert mesh_admin.consume_stats("pull-stop", "PullStop").total_diff() == 0
    with PullConsumer("pull-stop", rocketmesh_namesrv) as again:
        again.subscribe("PullStop")
        assert again.poll(timeout_ms=2000) == []


EXITS_WITHOUT_SHUTDOWN = """
import sys, threading
from rocketmesh import ConsumeConcurrentlyStatus, PushConsumer
got = []
done = threading.Event()
def listener(msgs):
    got.extend(msgs)
    if len(got) >= 8:
        done.set()
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS
consumer = PushConsumer("exit-group", sys.argv[1], consume_from="CONSUME_FROM_FIRST_OFFSET",
                        persist_consumer_offset_interval_ms=3_600_000)
consumer.subscribe("ExitTopic", "*")
consumer.register_listener(listener)
consumer.start()
assert done.wait(30), "not consumed"
# the program ends here: no shutdown()
"""


def test_a_program_that_ends_without_shutdown_still_persists_and_leaves(rocketmesh_namesrv: str,
        mesh_admin: Admin) -> None:
    send(rocketmesh_namesrv, "ExitTopic", 8)
    run = subprocess.run([sys.executable, "-c", EXITS_WITHOUT_SHUTDOWN, rocketmesh_namesrv], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert mesh_admin.consume_stats("exit-group", "ExitTopic").total_diff() == 0
    assert offline(mesh_admin, "exit-group")
