"""The broker's topic table file: what survives a restart and what follows the settings."""

import threading
from concurrent.futures import ThreadPoolExecutor

import orjson

from rocketmesh.broker.metadata.topic_config import TopicConfigManager
from rocketmesh.model.topics import SCHEDULE_TOPIC, TIMER_TOPIC


def manager(path, levels: int, timer_queues: int = 4) -> TopicConfigManager:
    m = TopicConfigManager(str(path), "c1", "broker-a", True, 8, levels, timer_queues)
    m.load()
    return m


def test_parked_topics_follow_the_settings_and_user_topics_survive(tmp_path) -> None:
    path = tmp_path / "topics.json"
    first = manager(path, levels=3, timer_queues=2)
    first.create_in_send("UserT", "TBW102", 4)
    first.persist()
    again = manager(path, levels=18, timer_queues=8)
    assert again.get(SCHEDULE_TOPIC).read_queue_nums == 18 and again.get(SCHEDULE_TOPIC).write_queue_nums == 18
    assert again.get(TIMER_TOPIC).read_queue_nums == 8
    assert again.get("UserT").write_queue_nums == 4


def test_a_topic_created_for_a_request_is_saved_by_the_executor_not_the_caller(tmp_path) -> None:
    # The caller is the remoting I/O thread: a disk stall in its fsync would hold up every other request.
    path = tmp_path / "topics.json"
    held = threading.Event()
    with ThreadPoolExecutor(1) as executor:
        executor.submit(held.wait, 30)  # the executor is busy until released
        m = TopicConfigManager(str(path), "c1", "broker-a", True, 8, 18, persist_in=executor)
        changed: list[bool] = []
        m.on_change = lambda: changed.append(True)
        assert m.create_in_send("UserT", "TBW102", 4) is not None
        assert m.create_system_topic("%RETRY%G", 1, 6) is not None
        assert changed == [True, True] and not path.exists()  # the caller did not wait for the disk
        held.set()
    saved = orjson.loads(path.read_bytes())["topicConfigTable"]
    assert saved["UserT"]["writeQueueNums"] == 4 and "%RETRY%G" in saved
