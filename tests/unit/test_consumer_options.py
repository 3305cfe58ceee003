"""Consumer settings are declared once (ConsumerOptions and its push/pull kinds) and checked when made:
as keywords or as an options object, each bad value named, unknown ones refused."""

from __future__ import annotations

import pytest

from rocketmesh import ConsumeFromWhere, MessageModel, MQClientError, PullConsumer, PushConsumer
from rocketmesh.client.consumer.allocate import AllocateAveragely
from rocketmesh.client.consumer.options import ConsumerOptions, PullConsumerOptions, PushConsumerOptions


def test_keywords_and_an_options_object_are_the_same_settings() -> None:
    by_keywords = PushConsumer("opts-group", "127.0.0.1:1", consume_thread_nums=4,
                               consume_from="CONSUME_FROM_FIRST_OFFSET")
    by_object = PushConsumer("opts-group", "127.0.0.1:1",
                             options=PushConsumerOptions(consume_thread_nums=4, consume_timestamp=0,
                                                         consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET))
    for consumer in (by_keywords, by_object):
        assert consumer.options.consume_thread_nums == 4
        assert consumer.options.consume_from is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        assert consumer.options.message_model is MessageModel.CLUSTERING
        assert isinstance(consumer.options.allocate, AllocateAveragely)
    assert PullConsumer("opts-group", "127.0.0.1:1").options.pull_batch_size == 10  # the lite pull consumer's default
    assert PushConsumer("opts-group", "127.0.0.1:1").options.pull_batch_size == 32


@pytest.mark.parametrize("cls, setting, value, named", [
    (PushConsumerOptions, "consume_thread_nums", 0, "consume_thread_nums must be within 1..1000"),
    (PushConsumerOptions, "consume_message_batch_max_size", 2000, "consume_message_batch_max_size"),
    (PushConsumerOptions, "pull_threshold_size_for_queue", 0, "(MiB)"),
    (PushConsumerOptions, "message_model", "BOTH", "message_model: 'BOTH' is not one of"),
    (PullConsumerOptions, "pull_batch_size", 0, "pull_batch_size must be within 1..1024"),
    (PullConsumerOptions, "auto_commit_interval_ms", 10, "auto_commit_interval_ms must be at least 1000"),
    (ConsumerOptions, "consume_from", "CONSUME_FROM_NOWHERE", "consume_from"),
])
def test_a_bad_value_is_named(cls: type, setting: str, value: object, named: str) -> None:
    with pytest.raises(MQClientError) as err:
        cls(**{setting: value})
    assert named in str(err.value)


def test_suspend_time_must_be_below_the_client_timeout() -> None:
    with pytest.raises(MQClientError, match="broker_suspend_max_time_ms must be less"):
        ConsumerOptions(broker_suspend_max_time_ms=30_000, consumer_timeout_ms_when_suspend=30_000)


def test_unknown_settings_and_mixed_forms_are_refused() -> None:
    with pytest.raises(MQClientError, match="unknown setting.*consume_thread_num\\b.*PushConsumerOptions has"):
        PushConsumer("opts-group", "127.0.0.1:1", consume_thread_num=4)
    with pytest.raises(MQClientError, match="unknown setting.*consume_thread_nums"):
        PullConsumer("opts-group", "127.0.0.1:1", consume_thread_nums=4)  # a push setting
    with pytest.raises(MQClientError, match="either options= or settings"):
        PushConsumer("opts-group", "127.0.0.1:1", options=PushConsumerOptions(), consume_thread_nums=4)
    with pytest.raises(MQClientError, match="must be a PushConsumerOptions"):
        PushConsumer("opts-group", "127.0.0.1:1", options=PullConsumerOptions())
