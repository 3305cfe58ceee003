"""serverBusyPollUs: the broker's remoting thread spins briefly between close requests, never when idle."""

from __future__ import annotations

import time
from collections.abc import Callable

from procs import BrokerProcess, NamesrvProcess, cpu_seconds
from rocketmesh import Message, Producer
from rocketmesh.client import SendStatus

TOPIC = "BusyPollTopic"


def test_a_broker_left_idle_after_a_sync_send_loop_stops_spinning(
        namesrv: NamesrvProcess, start_broker: Callable[..., BrokerProcess]) -> None:
    """A sync loop keeps requests close together, so a broker with serverBusyPollUs=100 spins between
    them; once the loop stops, a second of idleness costs it little CPU, where a thread that kept
    spinning would use the whole second."""
    broker = start_broker(namesrv.addr, name="broker-spin", serverBusyPollUs=100)
    with Producer("busy-poll-test", namesrv.addr) as producer:
        for i in range(2000):
            assert producer.send(Message(TOPIC, f"m{i}".encode())).send_status is SendStatus.SEND_OK
        time.sleep(0.2)  # the last spin, and the last poll timeout after it, are over
        before = cpu_seconds(broker.pid)
        time.sleep(1.0)
        idle_cpu = cpu_seconds(broker.pid) - before
    assert idle_cpu < 0.3, f"the idle broker used {idle_cpu:.2f} s of CPU in 1 s"
