"""One write path: every stored record is dispatched into its consume queue and the index, on the putting
thread, and is readable once its put returned, whichever thread put it; recovery rebuilds from the
checkpoint with the same dispatch; a slave dispatches its master's records with the queue offsets they
carry."""

from __future__ import annotations

import shutil
import threading

from rocketmesh.broker.store import BrokerRole, GetMessageStatus
from rocketmesh.broker.store.index.consume_queue import BLANK_SIZE
from rocketmesh.model.codec import decode_record, tags_hash_code
from rocketmesh.model.topics import SCHEDULE_TOPIC
from storekit import check_queues_agree_with_commitlog, msg, open_store


def test_a_message_is_readable_and_found_by_key_as_soon_as_its_put_returned_from_any_thread(tmp_path):
    store = open_store(tmp_path)
    failures: list[str] = []

    def putter(t: int) -> None:
        for i in range(150):
            key = f"t{t}-{i}"
            r = store.put_message(msg(body=key.encode(), queue_id=t % 2, keys=key))
            got = store.get_message("g", "TopicTest", t % 2, r.first.queue_offset, 1)
            if got.status is not GetMessageStatus.FOUND or decode_record(got.records[0]).body != key.encode():
                failures.append(f"{key} not readable at queue offset {r.first.queue_offset}")
            if len(store.query_message("TopicTest", key).records) != 1:
                failures.append(f"{key} not found by key")

    threads = [threading.Thread(target=putter, args=(t,)) for t in range(4)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert failures == []
        assert [store.get_max_offset_in_queue("TopicTest", q) for q in (0, 1)] == [300, 300]
        assert check_queues_agree_with_commitlog(store) == 600
        assert store.runtime_info()["dispatchBehindBytes"] == 0
    finally:
        store.shutdown()


def test_a_put_finished_later_is_readable_at_once_and_held_pulls_hear_of_it_when_the_caller_finishes_it(
        tmp_path):
    """``finish_later`` (the broker's I/O thread, which answers first and calls flush_pending after each round):
    the arriving listeners hear of a round's puts together, at flush_pending, and a read before that call
    still sees every message put."""
    store = open_store(tmp_path)
    heard: list[list[tuple[str, int, int]]] = []
    store.register_arriving_listener(heard.append)
    try:
        for i in range(3):
            store.put_messages([msg(body=b"m%d" % i, keys=f"k{i}")], wait_flush=False, finish_later=True)
        assert heard == []
        store.flush_pending()
        assert heard == [[("TopicTest", 0, 3)]]

        store.put_messages([msg(body=b"m3", keys="k3")], wait_flush=False, finish_later=True)
        got = store.get_message("g", "TopicTest", 0, 3, 8)
        assert got.status is GetMessageStatus.FOUND and [decode_record(r).body for r in got.records] == [b"m3"]
        assert len(store.query_message("TopicTest", "k3").records) == 1
        assert heard[-1] == [("TopicTest", 0, 4)]  # the read finished the put, and told the listeners
        store.flush_pending()  # nothing left
        assert len(heard) == 2 and store.runtime_info()["dispatchBehindBytes"] == 0
    finally:
        store.shutdown()


def test_a_tagged_message_s_entry_holds_its_tag_hash_from_the_put_on(tmp_path):
    store = open_store(tmp_path)
    try:
        store.put_message(msg(tags="TagA"))
        store.put_message(msg())
        cq = store.find_consume_queue("TopicTest", 0)
        assert [cq.get(i)[2] for i in range(2)] == [tags_hash_code("TagA"), 0]
    finally:
        store.shutdown()


def test_queue_offsets_go_on_after_a_restart_and_after_a_crash_that_lost_queue_writes_past_the_checkpoint(
        tmp_path):
    store = open_store(tmp_path)
    for i in range(60):
        store.put_message(msg(body=b"a%d" % i, queue_id=i % 2, keys=f"a{i}"))
    store.shutdown()
    # What a power loss can leave: the consume queues, index and checkpoint as of the last clean flush,
    # the commitlog (flushed on its own) with more records past it.
    saved = tmp_path.parent / "saved"
    for part in ("consumequeue", "index"):
        shutil.copytree(tmp_path / part, saved / part)
    shutil.copy(tmp_path / "checkpoint", saved / "checkpoint")

    store = open_store(tmp_path)
    try:
        assert store.put_message(msg(body=b"b0", queue_id=0, keys="b0")).first.queue_offset == 30
        for i in range(1, 40):
            store.put_message(msg(body=b"b%d" % i, queue_id=i % 2, keys=f"b{i}"))
    finally:
        store.shutdown()
    for part in ("consumequeue", "index"):
        shutil.rmtree(tmp_path / part)
        shutil.copytree(saved / part, tmp_path / part)
    shutil.copy(saved / "checkpoint", tmp_path / "checkpoint")
    (tmp_path / "abort").touch()

    store = open_store(tmp_path)
    try:
        assert not store.last_exit_ok
        assert [store.get_max_offset_in_queue("TopicTest", q) for q in (0, 1)] == [50, 50]
        got = store.get_message("g", "TopicTest", 0, 0, 64)
        assert [decode_record(r).body for r in got.records] == \
            [b"a%d" % i for i in range(0, 60, 2)] + [b"b%d" % i for i in range(0, 40, 2)]
        assert len(store.query_message("TopicTest", "b39").records) == 1
        assert check_queues_agree_with_commitlog(store) == 100
        assert store.put_message(msg(queue_id=1)).first.queue_offset == 50
    finally:
        store.shutdown()


def test_a_slave_fed_its_master_s_commitlog_in_odd_chunks_has_the_same_queues_and_index(tmp_path):
    master = open_store(tmp_path / "master")
    slave = open_store(tmp_path / "slave", broker_role=BrokerRole.SLAVE)
    grown: list[tuple[str, int, int]] = []
    slave.register_arriving_listener(grown.extend)
    try:
        for i in range(120):
            master.put_message(msg(f"T{i % 3}", b"x" * (i * 7 % 300 + 1), queue_id=i % 2, tags=f"tag{i % 5}",
                                   keys=f"k{i}"))
        later = master.put_message(msg(SCHEDULE_TOPIC, body=b"later", queue_id=2, DELAY="3"))
        offset = 0
        while offset < master.max_physical_offset:
            chunk = master.read_commitlog(offset, 777)  # ends inside records: the next chunk completes them
            offset = slave.append_replica(offset, chunk)
        assert slave.max_physical_offset == master.max_physical_offset
        assert slave.runtime_info()["dispatchBehindBytes"] == 0

        def entries(store):
            out = {}
            for cq in store.consume_queues():
                out[(cq.topic, cq.queue_id)] = [cq.get(i) for i in range(cq.min_offset, cq.max_offset)]
            return out

        want = entries(master)
        assert entries(slave) == want
        assert all(size != BLANK_SIZE for queue in want.values() for _, size, _ in queue)
        assert {(t, q): n for t, q, n in grown} == {key: len(queue) for key, queue in want.items()}
        assert [decode_record(r).body for r in slave.query_message("T1", "k4").records] == [b"x" * 29]
        # A delay level's entry holds its due time: the store time plus the level's delay (level 3: 10 s).
        assert want[(SCHEDULE_TOPIC, 2)][0][2] == later.first.store_timestamp + 10_000
    finally:
        master.shutdown()
        slave.shutdown()
