"""Subscription groups: RocketMQ's defaults and JSON, auto-creation, system groups, persistence."""

from __future__ import annotations

import dataclasses
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rocketmesh.broker.metadata.subscription_group import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    validate_group_name,
)
from rocketmesh.model.topics import SYSTEM_GROUPS


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "config" / "subscriptionGroup.json")


def read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def test_config_defaults_are_rocketmq_s() -> None:
    cfg = SubscriptionGroupConfig("G")
    assert cfg.to_json() == {
        "groupName": "G",
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True,
        "retryQueueNums": 1,
        "retryMaxTimes": 16,
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
    }


def test_config_json_round_trip() -> None:
    cfg = SubscriptionGroupConfig("G", consume_enable=False, retry_queue_nums=2, retry_max_times=3, broker_id=1,
                                  which_broker_when_consume_slowly=2, notify_consumer_ids_changed_enable=False)
    assert SubscriptionGroupConfig.from_json(cfg.to_json()) == cfg


def test_from_json_fills_defaults_and_ignores_unknown_keys() -> None:
    cfg = SubscriptionGroupConfig.from_json({"groupName": "G", "retryMaxTimes": 5, "consumeMessageOrderly": True,
                                             "groupSysFlag": 0})
    assert cfg == SubscriptionGroupConfig("G", retry_max_times=5)


@pytest.mark.parametrize(("doc", "key"), [
    ({}, "groupName"),
    ({"groupName": 3}, "groupName"),
    ({"groupName": "G", "consumeEnable": "yes"}, "consumeEnable"),
    ({"groupName": "G", "consumeEnable": 1}, "consumeEnable"),
    ({"groupName": "G", "retryQueueNums": True}, "retryQueueNums"),
    ({"groupName": "G", "retryMaxTimes": 1.5}, "retryMaxTimes"),
    ({"groupName": "G", "brokerId": "0"}, "brokerId"),
])
def test_from_json_names_the_bad_key(doc: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        SubscriptionGroupConfig.from_json(doc)


def test_from_json_rejects_a_non_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        SubscriptionGroupConfig.from_json(["G"])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["G", "please_rename_unique_group_name_4", "CID_ONS-HTTP-PROXY", "%RETRY%G", "a|b",
                                  "x" * 255])
def test_legal_group_names(name: str) -> None:
    assert validate_group_name(name) is None


@pytest.mark.parametrize(("name", "why"), [("", "blank"), ("   ", "blank"), ("x" * 256, "longer than 255"),
                                           ("a b", "characters"), ("a@b", "characters"), ("grüppe", "characters"),
                                           ("a.b", "characters")])
def test_illegal_group_names(name: str, why: str) -> None:
    assert why in (validate_group_name(name) or "")


def test_system_groups_are_there_from_the_start(path: str) -> None:
    m = SubscriptionGroupManager(path, auto_create=False)
    assert set(SYSTEM_GROUPS) == {"TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                                  "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER"}
    assert [c.group_name for c in m.all()] == sorted(SYSTEM_GROUPS)
    assert m.find("TOOLS_CONSUMER") == SubscriptionGroupConfig("TOOLS_CONSUMER")


def test_find_auto_creates_and_persists(path: str) -> None:
    m = SubscriptionGroupManager(path)
    counter = m.data_version.counter
    cfg = m.find("G")
    assert cfg == SubscriptionGroupConfig("G")
    assert m.data_version.counter == counter + 1
    assert read(path)["subscriptionGroupTable"]["G"] == cfg.to_json()
    assert m.find("G") == cfg
    assert m.data_version.counter == counter + 1


def test_a_group_created_by_find_is_saved_by_the_executor_not_the_caller(path: str) -> None:
    # find() runs on the remoting I/O thread (a heartbeat, a pull): a disk stall in its fsync would hold up
    # every other request.
    held = threading.Event()
    with ThreadPoolExecutor(1) as executor:
        executor.submit(held.wait, 30)  # the executor is busy until released
        m = SubscriptionGroupManager(path, persist_in=executor)
        assert m.find("G") == SubscriptionGroupConfig("G")
        assert not Path(path).exists()  # the caller did not wait for the disk
        held.set()
    assert read(path)["subscriptionGroupTable"]["G"] == SubscriptionGroupConfig("G").to_json()


def test_find_without_auto_create(path: str) -> None:
    m = SubscriptionGroupManager(path, auto_create=False)
    assert m.find("G") is None
    assert "G" not in {c.group_name for c in m.all()}
    # RocketMQ's own system consumer groups are created regardless.
    assert m.find("CID_RMQ_SYS_TRANS") == SubscriptionGroupConfig("CID_RMQ_SYS_TRANS")


def test_find_refuses_to_create_an_illegal_group(path: str) -> None:
    m = SubscriptionGroupManager(path)
    with pytest.raises(ValueError, match="characters"):
        m.find("bad group")
    assert "bad group" not in {c.group_name for c in m.all()}


def test_found_configs_cannot_be_changed_behind_the_managers_back(path: str) -> None:
    m = SubscriptionGroupManager(path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.find("G").consume_enable = False  # type: ignore[union-attr,misc]
    assert m.find("G").consume_enable  # type: ignore[union-attr]


def test_update_and_delete_persist_each_change(path: str) -> None:
    m = SubscriptionGroupManager(path, auto_create=False)
    m.update(SubscriptionGroupConfig("G", retry_max_times=3))
    assert read(path)["subscriptionGroupTable"]["G"]["retryMaxTimes"] == 3
    m.update(SubscriptionGroupConfig("G", retry_max_times=5, consume_enable=False))
    doc = read(path)
    assert doc["subscriptionGroupTable"]["G"]["retryMaxTimes"] == 5
    assert doc["subscriptionGroupTable"]["G"]["consumeEnable"] is False
    assert doc["dataVersion"]["counter"] == m.data_version.counter == 2
    assert m.delete("G")
    assert "G" not in read(path)["subscriptionGroupTable"]
    assert not m.delete("G")
    assert m.find("G") is None
    assert m.data_version.counter == 3


def test_update_rejects_illegal_names(path: str) -> None:
    m = SubscriptionGroupManager(path)
    with pytest.raises(ValueError, match="blank"):
        m.update(SubscriptionGroupConfig(""))


def test_file_has_rocketmq_layout_and_loads_back(path: str) -> None:
    m = SubscriptionGroupManager(path)
    m.update(SubscriptionGroupConfig("G1", retry_queue_nums=2))
    m.find("G2")
    doc = read(path)
    assert set(doc) == {"subscriptionGroupTable", "dataVersion"}
    assert set(doc["dataVersion"]) == {"timestamp", "counter"}
    assert set(doc["subscriptionGroupTable"]) == set(SYSTEM_GROUPS) | {"G1", "G2"}

    again = SubscriptionGroupManager(path, auto_create=False)
    again.load()
    assert again.all() == m.all()
    assert again.data_version == m.data_version
    assert again.find("G1") == SubscriptionGroupConfig("G1", retry_queue_nums=2)


def test_load_accepts_a_rocketmq_file(path: str) -> None:
    Path(path).parent.mkdir(parents=True)
    Path(path).write_text(json.dumps({
        "dataVersion": {"counter": 7, "timestamp": 1700000000000, "stateVersion": 0},
        "forbiddenTable": {},
        "subscriptionGroupTable": {
            "please_rename_unique_group_name_4": {
                "brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
                "consumeFromMinEnable": True, "consumeMessageOrderly": False, "consumeTimeoutMinute": 15,
                "groupName": "please_rename_unique_group_name_4", "groupRetryPolicy": {"type": "CUSTOMIZED"},
                "groupSysFlag": 0, "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16,
                "retryQueueNums": 1, "whichBrokerWhenConsumeSlowly": 1}}}))
    m = SubscriptionGroupManager(path, auto_create=False)
    m.load()
    assert m.find("please_rename_unique_group_name_4") == SubscriptionGroupConfig("please_rename_unique_group_name_4")
    assert m.data_version.counter == 7
    assert m.find("TOOLS_CONSUMER") is not None


def test_load_without_a_file_keeps_the_system_groups(path: str) -> None:
    m = SubscriptionGroupManager(path)
    m.load()
    assert [c.group_name for c in m.all()] == sorted(SYSTEM_GROUPS)


@pytest.mark.parametrize("content", ["{", "[]", '{"subscriptionGroupTable": []}',
                                     '{"subscriptionGroupTable": {"G": {"groupName": "G", "retryMaxTimes": "x"}}}'])
def test_load_of_a_bad_file_raises(path: str, content: str) -> None:
    Path(path).parent.mkdir(parents=True)
    Path(path).write_text(content)
    with pytest.raises(ValueError, match="subscriptionGroup.json"):
        SubscriptionGroupManager(path).load()


def test_a_failed_write_is_logged_and_the_change_stands(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    m = SubscriptionGroupManager(str(blocker / "subscriptionGroup.json"))  # parent is a file: writes fail
    m.update(SubscriptionGroupConfig("G"))
    assert m.find("G") == SubscriptionGroupConfig("G")
