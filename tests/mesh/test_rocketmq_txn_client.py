"""Transactions of RocketMQ's own client: the Apache wrapper ``rocketmq-client-python`` 2.0.0 on the C++
client 2.1.0 library (tests/rmqclients.py has where each comes from), its TransactionMQProducer against a
real name server, broker and txn-checker through their TCP doors. A transaction committed is consumed, one
rolled back never is, and one its local transaction leaves UNKNOW is settled by the check-back the
txn-checker asks over the producer's own connection: committed and consumed, or rolled back and not.
rocketmesh's SDK consumes the topic on the ZeroMQ door."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clientkit import FAST_CLIENT, make_topic
from procs import FAST_CHECKER, BrokerProcess, NamesrvProcess, TxnCheckerProcess, wait_for
from rmqclients import CPP_200, ClientRuns, InstalledClient, require
from rocketmesh import Admin
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer
from rocketmesh.model.message import MessageExt

#: Real clients and real services, seconds each: scheduled first (tests/conftest.py).
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def client() -> InstalledClient:
    return require(CPP_200)


@pytest.fixture
def door_mesh(client: InstalledClient, start_namesrv: Callable[..., NamesrvProcess],
              start_broker: Callable[..., BrokerProcess],
              start_txn_checker: Callable[..., TxnCheckerProcess]) -> tuple[NamesrvProcess, BrokerProcess]:
    """A name server and a broker with TCP doors, and a txn-checker that checks a half message 1 s old (the
    client first: without it, nothing is started)."""
    namesrv = start_namesrv(door=True)
    broker = start_broker(namesrv.addr, door=True)
    start_txn_checker(namesrv.addr, **FAST_CHECKER)
    return namesrv, broker


@pytest.fixture
def cpp(door_mesh: tuple[NamesrvProcess, BrokerProcess], client: InstalledClient,
        tmp_path: Path) -> Iterator[ClientRuns]:
    namesrv, broker = door_mesh
    assert namesrv.door_addr is not None
    runs = ClientRuns(client, tmp_path, namesrv.door_addr, [broker])
    yield runs
    runs.stop_all()


class Bodies:
    """An SDK listener keeping every body it got."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[MessageExt] = []

    def __call__(self, msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        with self.lock:
            self.got += msgs
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def keys(self) -> list[str]:
        with self.lock:
            return sorted(m.keys or "" for m in self.got)


def test_commit_rollback_and_check_back_of_a_cpp_transaction_producer(door_mesh, cpp):
    namesrv, _ = door_mesh
    topic = "CppTxn"
    with Admin(namesrv.addr) as admin:
        make_topic(admin, topic)
    got = Bodies()
    consumer = PushConsumer("sdk-txn-consumer", namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            **FAST_CLIENT)
    consumer.subscribe(topic, "*")
    consumer.register_listener(got)
    consumer.start()
    try:
        keys = ["committed", "rolled-back", "checked-commit", "checked-rollback"]
        run = cpp.start(
            "transaction", group="cpp-txn-producer",
            messages=[{"topic": topic, "body": f"txn-{k}", "keys": k, "tags": "TagT"} for k in keys],
            local={"committed": "commit", "rolled-back": "rollback"},
            check={"checked-commit": "commit", "checked-rollback": "rollback"})
        sent = run.sent()
        assert [e["keys"] for e in sent] == keys
        assert [e["keys"] for e in run.of("executed")] == keys
        run.wait(lambda r: {e["keys"] for e in r.of("checked")} >= {"checked-commit", "checked-rollback"}, 20,
                 "the check-back of both UNKNOW transactions")
        wait_for(lambda: got.keys() == ["checked-commit", "committed"], 15, "the committed transactions consumed")
        time.sleep(1.5)  # nothing else comes
        assert got.keys() == ["checked-commit", "committed"]
        ids = {e["keys"]: e["msg_id"] for e in sent}
        with got.lock:
            assert {m.keys: m.unique_key for m in got.got} == {k: ids[k] for k in ("committed", "checked-commit")}
        assert {e["keys"] for e in run.of("checked")} == {"checked-commit", "checked-rollback"}, (
            "only undecided transactions are checked")
        checked = {e["keys"]: e["id"] for e in run.of("checked")}
        assert checked["checked-commit"] == ids["checked-commit"], "the check names the transaction's message"
    finally:
        consumer.shutdown()
