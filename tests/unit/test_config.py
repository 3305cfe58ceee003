"""The config loader: RocketMQ key names from a file, then environment, then flags."""

import pytest

from rocketmesh.broker.config import BrokerConfig
from rocketmesh.broker.store import FlushDiskType, MessageStoreConfig, parse_delay_levels
from rocketmesh.runtime.config import ConfigError, load_config, to_properties


def test_file_then_env_then_overrides(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# comment\nflushDiskType=SYNC_FLUSH\nfileReservedTime = 48\n"
                    "mappedFileSizeCommitLog=1048576\nunknownKey=ignored\n")
    cfg = load_config(MessageStoreConfig, conf, environ={"ROCKETMESH_FILE_RESERVED_TIME": "24"},
                      overrides={"deleteWhen": "02;14"})
    assert cfg.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert cfg.file_reserved_time == 24  # the environment beats the file
    assert cfg.mapped_file_size_commit_log == 1048576
    assert cfg.delete_when == "02;14"
    assert to_properties(cfg)["flushDiskType"] == "SYNC_FLUSH"


def test_env_by_rocketmq_key_names(tmp_path):
    """A container's environment sets keys by their RocketMQ names; ROCKETMESH_<KEY> wins over them."""
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskType=SYNC_FLUSH\nfileReservedTime=48\n")
    env = {"flushDiskType": "ASYNC_FLUSH", "fileReservedTime": "12", "ROCKETMESH_FILE_RESERVED_TIME": "24",
           "deleteWhen": "03", "brokerName": "broker-b"}
    cfg = load_config(MessageStoreConfig, conf, environ=env, overrides={"deleteWhen": "02;14"})
    assert cfg.flush_disk_type is FlushDiskType.ASYNC_FLUSH  # the environment beats the file
    assert cfg.file_reserved_time == 24  # ROCKETMESH_ beats the RocketMQ name
    assert cfg.delete_when == "02;14"  # flags beat the environment
    broker = load_config(BrokerConfig, environ=env)
    assert broker.broker_name == "broker-b"  # each config takes its own keys from one environment
    with pytest.raises(ConfigError, match="flushDiskType"):
        load_config(MessageStoreConfig, environ={"flushDiskType": "SOMETIMES"})
    # Snake-case spellings and one-word names are not read from the environment.
    assert load_config(MessageStoreConfig, environ={"file_reserved_time": "1"}).file_reserved_time != 1


def test_bad_values_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="flushDiskType"):
        load_config(MessageStoreConfig, overrides={"flushDiskType": "SOMETIMES"}, environ={})
    with pytest.raises(ConfigError, match="maxMessageSize"):
        load_config(MessageStoreConfig, overrides={"maxMessageSize": "big"}, environ={})
    with pytest.raises(ConfigError, match="unknown config key"):
        load_config(MessageStoreConfig, overrides={"noSuchKey": 1}, environ={})
    for spin in ("-1", "10001"):
        with pytest.raises(ConfigError, match="serverBusyPollUs must be within 0..10000"):
            load_config(BrokerConfig, overrides={"serverBusyPollUs": spin}, environ={})


def test_delay_levels():
    assert parse_delay_levels("1s 5s 2m 1h 1d") == [1000, 5000, 120_000, 3_600_000, 86_400_000]
    assert len(parse_delay_levels(MessageStoreConfig().message_delay_level)) == 18
    with pytest.raises(ValueError, match="3x"):
        parse_delay_levels("1s 3x")
