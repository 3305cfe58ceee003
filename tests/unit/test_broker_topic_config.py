"""The broker's topic table file: what survives a restart and what follows the settings."""

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
