"""Queue selectors: a stable, Java-compatible hash and a random pick."""

from __future__ import annotations

import collections
import os
import subprocess
import sys

from rocketmesh.client.producer.selector import (
    MessageQueueSelector,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
    stable_hash,
)
from rocketmesh.model.message import Message, MessageQueue

MQS = [MessageQueue("T", "b", i) for i in range(8)]
MSG = Message("T", b"x")


def test_stable_hash_is_javas_hashcode() -> None:
    assert stable_hash("hello") == 99162322  # "hello".hashCode()
    assert stable_hash("") == 0
    assert stable_hash("abc") == 96354
    assert stable_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE, abs() must still work
    assert stable_hash(42) == 42
    assert stable_hash(-7) == -7
    assert stable_hash(2**40) == 256  # Long.hashCode: (v ^ v >>> 32)
    assert stable_hash(True) == 1231 and stable_hash(False) == 1237


def test_hash_selector_is_abs_mod() -> None:
    sel = SelectMessageQueueByHash()
    assert sel.select(MQS, MSG, 42) == MQS[42 % 8]
    assert sel.select(MQS, MSG, -13) == MQS[13 % 8]
    assert sel.select(MQS, MSG, "hello") == MQS[99162322 % 8]
    assert sel.select(MQS, MSG, "polygenelubricants") == MQS[0]
    for order_id in range(100):
        assert sel.select(MQS, MSG, order_id) == sel.select(list(MQS), Message("T", b"other"), order_id)


def test_hash_is_stable_across_processes() -> None:
    code = ("from rocketmesh.client.producer.selector import stable_hash; "
            "print(stable_hash('order-42'), stable_hash(b'k'))")
    outs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True, timeout=60).stdout)
    assert len(outs) == 1
    assert outs.pop().split()[0] == str(stable_hash("order-42"))


def test_hash_spreads_keys() -> None:
    sel = SelectMessageQueueByHash()
    counts = collections.Counter(sel.select(MQS, MSG, f"order-{i}").queue_id for i in range(8000))
    assert set(counts) == set(range(8))
    assert min(counts.values()) > 600


def test_random_selector_covers_queues() -> None:
    import random

    sel = SelectMessageQueueByRandom(random.Random(7))
    assert {sel.select(MQS, MSG, None).queue_id for _ in range(400)} == set(range(8))


def test_selectors_satisfy_protocol() -> None:
    assert isinstance(SelectMessageQueueByHash(), MessageQueueSelector)
    assert isinstance(SelectMessageQueueByRandom(), MessageQueueSelector)
