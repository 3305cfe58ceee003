"""Client-side unique ids (UNIQ_KEY), laid out as RocketMQ's MessageClientIDSetter lays them out."""

from __future__ import annotations

import os
import threading
import time

from rocketmesh.client.unique_id import (
    UniqueIdGenerator,
    create_unique_id,
    ip_of_unique_id,
    looks_like_message_id,
    nearly_time_of_unique_id,
    set_unique_id,
    set_unique_ids,
)
from rocketmesh.model.message import Message, MessageConst


def test_shape() -> None:
    uid = create_unique_id()
    assert len(uid) == 32 and uid == uid.upper() and looks_like_message_id(uid)
    assert not looks_like_message_id("XYZ" + uid[3:])
    assert not looks_like_message_id(uid[:-1])


def test_fields() -> None:
    gen = UniqueIdGenerator(ip="10.1.2.3", pid=0x12345)
    uid = gen.create()
    assert ip_of_unique_id(uid) == "10.1.2.3"
    assert uid[8:12] == "2345"  # low 16 bits of the pid
    now = int(time.time() * 1000)
    assert abs(nearly_time_of_unique_id(uid, now + 5) - now) < 2000


def test_unique_across_threads() -> None:
    gen = UniqueIdGenerator()
    out: list[list[str]] = []

    def make() -> None:
        out.append([gen.create() for _ in range(20000)])

    def make_batches() -> None:
        out.append([u for _ in range(625) for u in gen.create_many(32)])

    threads = [threading.Thread(target=make) for _ in range(2)] + [threading.Thread(target=make_batches)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    ids = [u for chunk in out for u in chunk]
    assert len(ids) == 60000 and len(set(ids)) == 60000


def test_prefix_differs_between_generators() -> None:
    assert UniqueIdGenerator(ip="1.2.3.4", pid=1).create()[:20] != UniqueIdGenerator(ip="1.2.3.4", pid=1).create()[:20]


def test_set_unique_id_keeps_an_existing_one() -> None:
    msg = Message("T", b"x")
    uid = set_unique_id(msg)
    assert msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] == uid
    assert set_unique_id(msg) == uid
    assert os.getpid() & 0xFFFF == int(uid[8:12], 16)


def test_set_unique_ids_gives_new_ids_and_keeps_existing_ones() -> None:
    msgs = [Message("T", b"x") for _ in range(5)]
    kept = set_unique_id(msgs[2])
    ids = set_unique_ids(msgs)
    assert ids[2] == kept and len(set(ids)) == 5
    assert [m.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in msgs] == ids
    assert all(looks_like_message_id(u) and u[:20] == kept[:20] for u in ids)
    assert set_unique_ids(msgs) == ids
