"""ProcessQueue: the committed offset is the smallest still held, also when held by offset alone."""

from rocketmesh.client.consumer.process_queue import ProcessQueue
from rocketmesh.model.message import MessageExt


def ext(offset: int, body: bytes = b"x" * 100) -> MessageExt:
    return MessageExt("T", body, {}, 0, 0, offset, 1000 + offset, 0, 0, 0, "127.0.0.1:1", 0, "127.0.0.1:2", 0, 0, 0,
                      f"id{offset}")


def test_held_by_offset_alone_commits_like_messages() -> None:
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(10, 15)]
    pq.put_messages(msgs)
    assert pq.msg_size == 500
    held = pq.keep_offsets_only(msgs)
    assert [h.queue_offset for h in held] == [10, 11, 12, 13, 14]
    assert pq.msg_count == 5 and pq.msg_size == 0
    assert pq.remove_messages([held[1], held[2]]) == 10  # 10 is still held
    assert pq.remove_messages([held[0]]) == 13
    assert pq.remove_messages(held[3:]) == 15 and pq.msg_count == 0


def test_only_messages_still_held_are_reduced() -> None:
    pq = ProcessQueue()
    msgs = [ext(i) for i in range(3)]
    pq.put_messages(msgs)
    pq.remove_messages(msgs[:1])
    assert [h.queue_offset for h in pq.keep_offsets_only(msgs)] == [1, 2]
