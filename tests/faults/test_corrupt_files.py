"""Fault: torn and corrupted store files under a real broker process.

The broker is killed (SIGKILL, so the next start recovers as after a crash), a file is damaged, and the
broker is started again on the same store: a torn commitlog tail is cut, a record whose body no longer
matches its BODYCRC is reported in the log with its offset and cut, a consume queue entry pointing past
the commitlog is dropped. A consumer never receives a damaged record; the messages before the damage
arrive, and sends after the restart are stored and consumed.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from faultload import Deliveries, consume_all, restart

from procs import TEST_STORE_CONFIG, BrokerProcess, NamesrvProcess
from rocketmesh import Message, Producer
from rocketmesh.model.codec import RECORD_HEADER_SIZE, decode_message_id

COMMITLOG_FILE = TEST_STORE_CONFIG["mappedFileSizeCommitLog"]
CQ_FILE = TEST_STORE_CONFIG["mappedFileSizeConsumeQueue"]
MESSAGES = 60
BROKER_ARGS = dict(defaultTopicQueueNums=2)


def send_numbered(producer: Producer, topic: str, prefix: str, n: int) -> list[tuple[str, int, int, int]]:
    """Send ``n`` messages with bodies ``prefix<i>-`` x 8; (body, commitlog offset, queue id, queue offset)
    of each."""
    out = []
    for i in range(n):
        body = f"{prefix}{i}-" * 8
        r = producer.send(Message(topic, body.encode()))
        out.append((body, decode_message_id(r.offset_msg_id)[2], r.message_queue.queue_id, r.queue_offset))
    return out


def commitlog_at(broker: BrokerProcess, phys: int) -> tuple[Path, int]:
    """The commitlog file holding ``phys`` and the position in it."""
    return broker.store_dir / "commitlog" / f"{phys - phys % COMMITLOG_FILE:020d}", phys % COMMITLOG_FILE


def damage(path: Path, pos: int, data: Callable[[bytes], bytes], size: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        old = f.read(size)
        f.seek(pos)
        f.write(data(old))


def restart_broker(broker: BrokerProcess) -> float:
    """Start the killed broker again on its store; seconds until it listens and is registered."""
    t0 = time.monotonic()
    restart(broker)
    broker.wait_registered(15)
    return time.monotonic() - t0


def consume_after_restart(namesrv: NamesrvProcess, topic: str, group: str, want: list[str],
                          never: list[str]) -> Deliveries:
    """A new group reads ``topic`` from the first offset: all of ``want``, none of ``never`` (a damaged
    record would come with the others or within the quiet second after them)."""
    got = consume_all(namesrv.addr, group, topic, want, timeout_s=30, quiet_s=1.0)
    assert not got.missing(want), f"{len(got.missing(want))} messages not consumed after the restart"
    assert not [b for b in never if b in got.count], f"damaged or cut records delivered: {never}"
    return got


def test_torn_commitlog_tail_is_cut(namesrv: NamesrvProcess, broker: BrokerProcess, reliability) -> None:
    topic = "TornTailTopic"
    with Producer("torn-producer", namesrv.addr) as producer:
        sent = send_numbered(producer, topic, "t", MESSAGES)
    broker.kill()
    last = max(sent, key=lambda s: s[1])
    path, pos = commitlog_at(broker, last[1])
    # The last record's write was torn 10 bytes in: its MAGICCODE and everything after it never landed.
    damage(path, pos + 10, lambda old: bytes(len(old)), 200)
    recovery = restart_broker(broker)
    kept = [s[0] for s in sent if s is not last]
    with Producer("torn-producer", namesrv.addr) as producer:
        after = send_numbered(producer, topic, "a", 10)
    # The cut end is where writing continues.
    assert min(a[1] for a in after) == last[1]
    got = consume_after_restart(namesrv, topic, "torn-readers", kept + [a[0] for a in after], [last[0]])
    reliability.fault("torn commitlog tail (broker SIGKILLed, last record zeroed from byte 10)", cycles=1,
                      sent=MESSAGES + 10, acknowledged=MESSAGES + 10, lost=len(got.missing(kept)),
                      duplicated=got.duplicated(), recovery_s=[recovery],
                      note=f"the torn record (offset {last[1]}) cut by recovery and never delivered (counted "
                           f"in acknowledged, not in lost); the next send was stored at its offset")


@pytest.mark.parametrize("stop", ["SIGKILL", "clean stop"])
def test_flipped_body_byte_is_reported_by_crc_and_never_delivered(namesrv: NamesrvProcess, broker: BrokerProcess,
                                                                  reliability, stop: str) -> None:
    # Bit rot finds a cleanly stopped store as well as a crashed one: RocketMQ checks BODYCRC over the
    # commitlog's last files on both recoveries (checkCRCOnRecover).
    topic = "FlippedByteTopic"
    with Producer("flip-producer", namesrv.addr) as producer:
        sent = send_numbered(producer, topic, "f", MESSAGES)
    if stop == "SIGKILL":
        broker.kill()
    else:
        broker.stop()
    by_offset = sorted(sent, key=lambda s: s[1])
    victim = by_offset[-5]
    path, pos = commitlog_at(broker, victim[1])
    damage(path, pos + RECORD_HEADER_SIZE + 3, lambda old: bytes([old[0] ^ 0xFF]), 1)
    recovery = restart_broker(broker)
    log = broker.stdout_text() + broker.stderr_text()
    assert re.search(rf'"commitlog_crc_mismatch".*"offset": ?{victim[1]}\b|"offset": ?{victim[1]}\b.*'
                     r'"commitlog_crc_mismatch"', log), "no log line reporting the CRC mismatch at its offset"
    before = [s[0] for s in by_offset if s[1] < victim[1]]
    cut = [s[0] for s in by_offset if s[1] > victim[1]]
    with Producer("flip-producer", namesrv.addr) as producer:
        after = send_numbered(producer, topic, "b", 10)
    got = consume_after_restart(namesrv, topic, "flip-readers", before + [a[0] for a in after], [victim[0]] + cut)
    # Every body delivered is one that was sent, byte for byte (the flipped one would not be).
    assert all(re.fullmatch(r"([fb]\d+-)\1{7}", body) for body in got.count), list(got.count)
    reliability.fault(f"flipped byte in a record body (broker {stop})", cycles=1, sent=MESSAGES + 10,
                      acknowledged=MESSAGES + 10, lost=len(got.missing(before)), duplicated=got.duplicated(),
                      recovery_s=[recovery],
                      note=f"BODYCRC mismatch logged at offset {victim[1]}; the record and the {len(cut)} after "
                           "it cut (RocketMQ's recovery truncates at the first bad record) and never delivered")


def test_consume_queue_entry_past_the_log_is_dropped(namesrv: NamesrvProcess, broker: BrokerProcess,
                                                     reliability) -> None:
    topic = "PastTheLogTopic"
    with Producer("past-producer", namesrv.addr) as producer:
        sent = send_numbered(producer, topic, "p", MESSAGES)
    broker.kill()
    # An entry after the last of queue 0 that points far past the commitlog's end (a queue file written
    # ahead of a commitlog that was then lost).
    q0 = [s for s in sent if s[2] == 0]
    end = max(s[1] for s in sent) + 4096
    cq = broker.store_dir / "consumequeue" / topic / "0" / f"{0:020d}"
    n = max(s[3] for s in q0) + 1
    damage(cq, n * 20, lambda old: struct.pack(">qiq", end + 10 * 1024 * 1024, 200, 0), 20)
    recovery = restart_broker(broker)
    with Producer("past-producer", namesrv.addr) as producer:
        after = send_numbered(producer, topic, "c", 10)
    # The bad entry's queue offset is taken by the next message of queue 0, not skipped.
    assert min(a[3] for a in after if a[2] == 0) == n
    want = [s[0] for s in sent] + [a[0] for a in after]
    got = consume_after_restart(namesrv, topic, "past-readers", want, [])
    assert set(got.count) == set(want), "a consumer got something that was not sent"
    assert CQ_FILE > (n + 1) * 20
    reliability.fault("consume queue entry pointing past the commitlog (broker SIGKILLed)", cycles=1,
                      sent=MESSAGES + 10, acknowledged=MESSAGES + 10, lost=len(got.missing(want)),
                      duplicated=got.duplicated(), recovery_s=[recovery],
                      note="the entry dropped at recovery; its queue offset reused by the next send")
