"""Consumer offset table: commits and queries, consumerOffset.json round trip, .bak fallback, dirty tracking."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from rocketmesh.broker.metadata.consumer_offsets import (
    ConsumerOffsetManager,
    OffsetFileError,
    OffsetPersister,
)


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "config" / "consumerOffset.json")


def test_commit_and_query(path: str) -> None:
    m = ConsumerOffsetManager(path)
    assert m.query_offset("G", "T", 0) == -1
    m.commit_offset("10.0.0.1:5555", "G", "T", 0, 12)
    m.commit_offset("10.0.0.1:5555", "G", "T", 3, 40)
    m.commit_offset("10.0.0.1:5555", "G", "T", 0, 15)
    assert m.query_offset("G", "T", 0) == 15
    assert m.query_offset("G", "T", 1) == -1
    assert m.query_offset("G2", "T", 0) == -1
    assert m.offsets("G", "T") == {0: 15, 3: 40}
    assert m.offsets("G", "other") == {}
    assert m.table_snapshot() == {"T@G": {0: 15, 3: 40}}


def test_a_lower_commit_is_accepted(path: str) -> None:
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 100)
    m.commit_offset("h", "G", "T", 0, 20)
    assert m.query_offset("G", "T", 0) == 20


def test_copies_do_not_alias_the_table(path: str) -> None:
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 1)
    m.offsets("G", "T")[0] = 99
    m.table_snapshot()["T@G"][0] = 99
    assert m.query_offset("G", "T", 0) == 1


def test_groups_of_topic_and_topics_of_group(path: str) -> None:
    m = ConsumerOffsetManager(path)
    for group, topic in [("G1", "T1"), ("G1", "T2"), ("G2", "T1"), ("G3", "T3")]:
        m.commit_offset("h", group, topic, 0, 1)
    assert m.groups_of_topic("T1") == {"G1", "G2"}
    assert m.groups_of_topic("nope") == set()
    assert m.topics_of_group("G1") == {"T1", "T2"}
    assert m.topics_of_group("G3") == {"T3"}


def test_remove_group_and_topic(path: str) -> None:
    m = ConsumerOffsetManager(path)
    for group, topic in [("G1", "T1"), ("G1", "T2"), ("G2", "T1"), ("G12", "T2")]:
        m.commit_offset("h", group, topic, 0, 1)
    m.remove_group("G1")
    assert set(m.table_snapshot()) == {"T1@G2", "T2@G12"}
    assert m.last_commit_ms("G1", "T1", 0) is None
    m.remove_topic("T1")
    assert set(m.table_snapshot()) == {"T2@G12"}
    assert m.last_commit_ms("G2", "T1", 0) is None


def test_reset_sets_only_the_given_queues(path: str) -> None:
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 50)
    m.commit_offset("h", "G", "T", 1, 60)
    m.reset("G", "T", {1: 5, 2: 7})
    assert m.offsets("G", "T") == {0: 50, 1: 5, 2: 7}
    m.reset("G", "NEW", {0: 0})
    assert m.offsets("G", "NEW") == {0: 0}


@pytest.mark.parametrize(("group", "topic"), [("G@x", "T"), ("G", "T@x"), ("@", "T")])
def test_names_with_at_sign_are_rejected(path: str, group: str, topic: str) -> None:
    m = ConsumerOffsetManager(path)
    with pytest.raises(ValueError, match="'@'"):
        m.commit_offset("h", group, topic, 0, 1)
    with pytest.raises(ValueError, match="'@'"):
        m.reset(group, topic, {0: 1})
    with pytest.raises(ValueError, match="'@'"):
        m.query_offset(group, topic, 0)
    assert m.table_snapshot() == {}


def test_remove_rejects_at_sign(path: str) -> None:
    m = ConsumerOffsetManager(path)
    with pytest.raises(ValueError):
        m.remove_group("a@b")
    with pytest.raises(ValueError):
        m.remove_topic("a@b")


def test_last_commit_ms_is_the_wall_time_of_the_last_commit(path: str) -> None:
    m = ConsumerOffsetManager(path)
    assert m.last_commit_ms("G", "T", 0) is None
    before = int(time.time() * 1000)
    m.commit_offset("h", "G", "T", 0, 1)
    after = int(time.time() * 1000)
    stamp = m.last_commit_ms("G", "T", 0)
    assert stamp is not None and before <= stamp <= after
    m.reset("G", "T", {1: 4})
    assert m.last_commit_ms("G", "T", 1) is None


# -- the file --------------------------------------------------------------------------------------

def test_persist_writes_rocketmq_format_and_load_reads_it_back(path: str) -> None:
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 12)
    m.commit_offset("h", "G", "T", 10, 7)
    m.commit_offset("h", "G2", "%RETRY%G2", 0, 3)
    m.persist()
    with open(path) as f:
        doc = json.load(f)
    assert doc == {"offsetTable": {"T@G": {"0": 12, "10": 7}, "%RETRY%G2@G2": {"0": 3}}}

    again = ConsumerOffsetManager(path)
    again.load()
    assert again.table_snapshot() == m.table_snapshot()
    assert not again.dirty


def test_load_accepts_a_rocketmq_file(path: str) -> None:
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump({"offsetTable": {"TopicTest@please_rename_unique_group_name_4": {"0": 250, "1": 251},
                                   "%RETRY%please_rename_unique_group_name_4@please_rename_unique_group_name_4":
                                       {"0": 0}},
                   "dataVersion": {"counter": 1, "timestamp": 1}}, f)
    m = ConsumerOffsetManager(path)
    m.load()
    assert m.offsets("please_rename_unique_group_name_4", "TopicTest") == {0: 250, 1: 251}
    assert m.groups_of_topic("TopicTest") == {"please_rename_unique_group_name_4"}


def test_load_without_any_file_gives_an_empty_table(path: str) -> None:
    m = ConsumerOffsetManager(path)
    m.load()
    assert m.table_snapshot() == {}


def test_persist_keeps_the_previous_file_as_bak(path: str) -> None:
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 1)
    m.persist()
    assert not os.path.exists(path + ".bak")
    m.commit_offset("h", "G", "T", 0, 2)
    m.persist()
    with open(path + ".bak") as f:
        assert json.load(f) == {"offsetTable": {"T@G": {"0": 1}}}
    with open(path) as f:
        assert json.load(f) == {"offsetTable": {"T@G": {"0": 2}}}


def test_corrupt_main_file_falls_back_to_bak(path: str) -> None:
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 1)
    m.persist()
    m.commit_offset("h", "G", "T", 0, 2)
    m.persist()
    with open(path, "w") as f:
        f.write('{"offsetTable": {"T@G": {"0": 3')  # torn write

    again = ConsumerOffsetManager(path)
    again.load()
    assert again.offsets("G", "T") == {0: 1}
    # The corrupt file is moved aside, so the next persist does not back it up over the good copy.
    assert os.path.exists(path + ".corrupt")
    again.persist()
    with open(path + ".bak") as f:
        assert json.load(f) == {"offsetTable": {"T@G": {"0": 1}}}


@pytest.mark.parametrize("content", ["", "not json", '{"offsetTable": []}', '{"offsetTable": {"T@G": {"x": 1}}}',
                                     '{"offsetTable": {"T@G": {"0": "many"}}}', "[1, 2]"])
def test_corrupt_main_file_without_bak_is_a_clear_error(path: str, content: str) -> None:
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write(content)
    with pytest.raises(OffsetFileError, match="consumerOffset.json"):
        ConsumerOffsetManager(path).load()


def test_corrupt_main_and_bak_is_a_clear_error(path: str) -> None:
    os.makedirs(os.path.dirname(path))
    for p in (path, path + ".bak"):
        with open(p, "w") as f:
            f.write("{")
    with pytest.raises(OffsetFileError, match="backup"):
        ConsumerOffsetManager(path).load()


def test_missing_main_file_loads_the_bak(path: str) -> None:
    # A crash between moving the main file aside and writing the new one leaves only the .bak.
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 5)
    m.persist()
    os.replace(path, path + ".bak")
    again = ConsumerOffsetManager(path)
    again.load()
    assert again.offsets("G", "T") == {0: 5}


def test_a_failed_write_leaves_the_old_file_whole(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 1)
    m.persist()
    m.commit_offset("h", "G", "T", 0, 2)

    def crash(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)  # the new file never becomes durable
    with pytest.raises(OSError, match="disk full"):
        m.persist_if_dirty()
    monkeypatch.undo()
    with open(path) as f:
        assert json.load(f) == {"offsetTable": {"T@G": {"0": 1}}}
    assert [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".tmp")] == []
    assert m.dirty  # still to be written
    assert m.persist_if_dirty()
    with open(path) as f:
        assert json.load(f) == {"offsetTable": {"T@G": {"0": 2}}}


def test_without_hard_links_the_old_file_is_moved_to_bak(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m = ConsumerOffsetManager(path)
    m.commit_offset("h", "G", "T", 0, 1)
    m.persist()
    m.commit_offset("h", "G", "T", 0, 2)

    def no_links(src: str, dst: str) -> None:
        raise OSError("hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    m.persist()
    with open(path + ".bak") as f:
        assert json.load(f) == {"offsetTable": {"T@G": {"0": 1}}}
    with open(path) as f:
        assert json.load(f) == {"offsetTable": {"T@G": {"0": 2}}}


def test_dirty_tracking(path: str) -> None:
    m = ConsumerOffsetManager(path)
    assert not m.dirty
    assert not m.persist_if_dirty()
    assert not os.path.exists(path)
    m.commit_offset("h", "G", "T", 0, 1)
    assert m.dirty
    assert m.persist_if_dirty()
    assert not m.dirty
    assert not m.persist_if_dirty()
    m.reset("G", "T", {0: 0})
    assert m.persist_if_dirty()
    m.remove_group("nobody")
    assert not m.dirty
    m.remove_group("G")
    assert m.persist_if_dirty()
    with open(path) as f:
        assert json.load(f) == {"offsetTable": {}}


def test_concurrent_commits_and_persists(path: str) -> None:
    m = ConsumerOffsetManager(path)

    def commit(q: int) -> None:
        for off in range(300):
            m.commit_offset("h", "G", "T", q, off)

    def flush() -> None:
        for _ in range(20):
            m.persist_if_dirty()

    threads = [threading.Thread(target=commit, args=(q,)) for q in range(4)] + [threading.Thread(target=flush)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m.persist_if_dirty()
    again = ConsumerOffsetManager(path)
    again.load()
    assert again.offsets("G", "T") == {q: 299 for q in range(4)}


def test_offset_persister_flushes_on_its_interval_and_on_stop(path: str) -> None:
    m = ConsumerOffsetManager(path)
    persister = OffsetPersister(m, flush_consumer_offset_interval=20)
    assert persister.interval_s == pytest.approx(0.02)
    persister.start()
    try:
        m.commit_offset("h", "G", "T", 0, 7)
        deadline = time.monotonic() + 5
        while m.dirty and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not m.dirty
        m.commit_offset("h", "G", "T", 0, 8)
    finally:
        persister.stop()
    with open(path) as f:
        assert json.load(f) == {"offsetTable": {"T@G": {"0": 8}}}


def test_offset_persister_default_interval_is_rocketmq_s(path: str) -> None:
    assert OffsetPersister(ConsumerOffsetManager(path)).interval_s == 5.0
