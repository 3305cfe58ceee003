"""A client of a topic that does not exist says so, naming the topic and what to do, instead of
waiting silently."""

from __future__ import annotations

import subprocess
import sys

import pytest

from procs import run_cli
from rocketmesh import Message, Producer, PullConsumer
from rocketmesh.client import ClientErrorCode, MQClientError

#: A broker that creates no topic by itself (as in production).
BROKER_ARGS = dict(autoCreateTopicEnable="false")
SUBSCRIBES_TO_NOTHING = """
import sys, time
from rocketmesh import ConsumeConcurrentlyStatus, PullConsumer, PushConsumer
push = PushConsumer("ghost-group", sys.argv[1])
push.subscribe("GhostTopic", "*")
push.register_listener(lambda msgs: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
with push, PullConsumer("ghost-pull-group", sys.argv[1]) as pull:
    pull.subscribe("GhostPullTopic")
    time.sleep(1)
"""


def test_consume_of_a_missing_topic_exits_non_zero_naming_it(namesrv, broker) -> None:
    run = run_cli("consume", "-n", namesrv.addr, "-t", "GhostTopic", "-c", "1", timeout=30)
    assert run.returncode == 1
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("consume: topic GhostTopic does not exist") and "update-topic -t GhostTopic" in line


def test_consumers_of_a_missing_topic_warn_naming_it(namesrv, broker) -> None:
    run = subprocess.run([sys.executable, "-c", SUBSCRIBES_TO_NOTHING, namesrv.addr], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if " WARNING rocketmesh.client: " in line]
    assert any("topic GhostTopic does not exist" in w for w in warnings), run.stderr
    assert any("topic GhostPullTopic does not exist" in w for w in warnings), run.stderr


def test_a_send_to_a_missing_topic_fails_at_once_naming_it(namesrv, broker) -> None:
    with Producer("ghost-producer", namesrv.addr) as producer:
        with pytest.raises(MQClientError, match="no route info of topic 'GhostTopic'"):
            producer.send(Message("GhostTopic", "lost?"))
    run = run_cli("produce", "-n", namesrv.addr, "-t", "GhostTopic", "-c", "1", timeout=30)
    assert run.returncode == 1 and "GhostTopic" in run.stderr and "autoCreateTopicEnable" in run.stderr, run.stderr


def test_the_queues_of_a_missing_topic_are_refused_naming_it(namesrv, broker) -> None:
    # RocketMQ's fetchMessageQueues: an error, not an empty list that would leave an assign()ed consumer idle.
    with PullConsumer("ghost-assign-group", namesrv.addr) as consumer:
        with pytest.raises(MQClientError, match="no name server routes topic 'GhostAssignTopic'") as ei:
            consumer.fetch_message_queues("GhostAssignTopic")
    assert ei.value.response_code == ClientErrorCode.NOT_FOUND_TOPIC_EXCEPTION
