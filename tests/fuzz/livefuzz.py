"""What the live fuzz targets share, whichever door of a service they knock on: hostile request fields and
bodies, how long a request may be held before its answer, and the book of answers owed (:class:`ReplyBook`).

The same inputs go to the ZeroMQ door (test_fuzz_services.py's RawPeer) and to the RocketMQ TCP door
(doorpeer.py's DoorPeer): the handlers behind both doors are the same, so are the inputs and the rules for
their answers.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import orjson
from hypothesis import strategies as st

from rocketmesh import Message
from rocketmesh.model.codec import encode_batch
from rocketmesh.remoting.protocol import headers as request_headers
from rocketmesh.remoting.protocol.codes import RequestCode, ResponseCode
from rocketmesh.remoting.protocol.headers import SEND_V2_KEYS
from rocketmesh.runtime.config import camel_case

#: The topic and group of the witness messages: hostile inputs never name them, so a normal client is served.
WITNESS_TOPIC = "FuzzWitness"
WITNESS_GROUP = "fuzz-witness"
#: A reply owed to a prompt request must come within this many seconds.
REPLY_BOUND_S = 5.0
RESPONSE_CODES = {int(c) for c in ResponseCode}
#: Codes whose error answers must say what went wrong (a remark).
ERROR_CODES_WITH_REMARK = {ResponseCode.SYSTEM_ERROR, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                           ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                           ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST}

#: Integers JSON can carry (orjson: 64 bits).
json_ints = st.integers(-(2**63), 2**64 - 1)
big_ints = st.sampled_from([-1, 0, 1, 2**31 - 1, 2**31, -(2**31), 2**63 - 1, -(2**63), 2**64 - 1])
invalid_names = st.sampled_from([
    "", " ", "a" * 128, "a" * 256, "a" * 300, "bad topic", "bad/topic", "../../etc/passwd", "a\x00b", "é中",
    "%RETRY%", "%RETRY%fuzz", "%DLQ%fuzz", "TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
    "rmq_sys_TRACE_DATA", "DefaultCluster", "a|b", "a,b", "a\x01b\x02", "*", "||",
]) | st.text(max_size=12)
sql92 = st.sampled_from([
    "a >", "a = 1 AND", "(" * 3000 + "a = 1" + ")" * 3000, "NOT " * 3000 + "TRUE", "'unterminated", "a IN ()",
    "a BETWEEN 1", "TAGS = 'w'", "1 = 1", "a = 1E999", "/*", "a = 'x' OR b IS NOT NULL", "TRUE",
]) | st.text(max_size=20)
hostile_properties = st.lists(
    st.sampled_from(["DELAY\x013\x02", "DELAY\x0199\x02", "TIMER_DELIVER_MS\x01-5\x02", "TIMER_DELAY_MS\x01abc\x02",
                     "TRAN_MSG\x01true\x02", "PGROUP\x01g\x02", "\x01\x02", "\x02\x02", "k\x01v\x01w\x02",
                     "UNIQ_KEY\x01\x02", "KEYS\x01" + "k " * 50 + "\x02", "a" * 70000, "é\x01中\x02", "x"]),
    max_size=4).map("".join)
ext_values = (st.none() | st.booleans() | big_ints | json_ints | st.floats(allow_nan=False)
              | invalid_names | sql92 | hostile_properties
              | st.lists(json_ints, max_size=3) | st.dictionaries(st.text(max_size=4), json_ints, max_size=2))

#: Every ext field name a handler reads: the request header classes', the name server's, and SEND_MESSAGE_V2's
#: one-letter keys (what RocketMQ's own clients send).
EXT_KEYS = sorted({camel_case(f) for cls in vars(request_headers).values()
                   if isinstance(cls, type) and getattr(cls, "__dataclass_fields__", None)
                   for f in cls.__dataclass_fields__}
                  | {"clusterName", "brokerName", "brokerId", "brokerAddr", "haServerAddr", "namespace", "key",
                     "value", "cluster", "expressionType", "subVersion"}
                  | set(SEND_V2_KEYS))
#: A field a handler reads is usually there (so the handler gets past its first check), with a value of
#: the right type most of the time.
SANE = {"topic": "FuzzTopic", "producerGroup": "fuzz-pg", "consumerGroup": "fuzz-cg", "group": "fuzz-cg",
        "queueId": 0, "bornTimestamp": 0, "queueOffset": 0, "offset": 0, "commitLogOffset": 0,
        "tranStateTableOffset": 0, "commitOrRollback": 8, "clientId": "fuzz-client", "key": "k",
        "namespace": "ns", "value": "v", "brokerName": "fuzz-broker", "clusterName": "fuzz-cluster",
        "brokerAddr": "127.0.0.1:1", "brokerId": 0, "groupName": "fuzz-cg", "timestamp": 0, "slaveAddr": "x:1",
        "fileSize": 1024, "expressionType": "SQL92", "subscription": "a > 1", "properties": "a\x01b\x02"}


def _safe(value: Any) -> bool:
    """Never aim at what the witness uses: it must be served however hostile the rest is."""
    return not (isinstance(value, str) and (WITNESS_TOPIC in value or WITNESS_GROUP in value))


@st.composite
def hostile_ext(draw: st.DrawFn) -> dict[str, Any]:
    """An ext object: sane fields of the right type most of the time, and a few of any field with any value."""
    ext = {k: v for k, v in SANE.items() if draw(st.integers(0, 3))}
    for key in draw(st.lists(st.sampled_from(EXT_KEYS), max_size=6)):
        ext[key] = draw(ext_values)
    return {k: v for k, v in ext.items() if _safe(v)}


def _batch_body(n: int, cut: int) -> bytes:
    body = encode_batch([Message("FuzzTopic", b"b%d" % i, properties={"k": "v\x01w"}) for i in range(n)])
    return body[:cut] if cut else body


bodies = (st.just(b"") | st.binary(max_size=256)
          | st.builds(orjson.dumps, st.dictionaries(st.sampled_from(["consumerDataSet", "producerDataSet", "clientID",
                                                                     "topicConfigTable", "dataVersion", "mqSet",
                                                                     "subscriptionData", "offsetTable", "offsets"]),
                                                    ext_values, max_size=3))
          | st.builds(orjson.dumps, st.lists(ext_values, max_size=3))
          | st.builds(_batch_body, st.integers(1, 5), st.integers(0, 200))
          # Past maxMessageSize; not UTF-8 (built when drawn: a strategy's repr holds its constants).
          | st.sampled_from([(b"x", 5 * 1024 * 1024), (b"\xff", 70000)]).map(lambda c: c[0] * c[1]))


def _int_field(ext: dict[str, Any], key: str, default: int) -> int | None:
    """``ext[key]`` as a handler's typed header reads it (an int, or a string ``int()`` takes); None when it
    would not read as an integer."""
    v = ext.get(key, default)
    if type(v) is int:
        return v
    if type(v) is str:
        try:
            return int(v)
        except ValueError:
            return None
    return None


def hold_of(code: Any, ext: dict[str, Any]) -> float | None:
    """How long a well-formed request of ``code`` may be held before its answer (None: unbounded here)."""
    if code == RequestCode.PULL_MESSAGE:
        sys_flag = _int_field(ext, "sysFlag", 0)
        if sys_flag is None or not sys_flag & request_headers.PullSysFlag.SUSPEND:
            return 0.0
        timeout = _int_field(ext, "suspendTimeoutMillis", 15_000)
        return timeout / 1000 if timeout is not None and 0 <= timeout <= 5_000 else None
    if code == RequestCode.HA_TRANSFER:
        held = _int_field(ext, "suspendMillis", 0)
        return min(max(held, 0), 30_000) / 1000 if held is not None else 0.0
    return 0.0


def reply_fault(code: int, remark: str | None, sent: str) -> str | None:
    """What is wrong with an answer of ``code`` and ``remark`` to the request described by ``sent`` (None:
    nothing): an answer carries a known response code, and an error answer says what went wrong."""
    if code not in RESPONSE_CODES:
        return f"unknown response code {code} to {sent}"
    if code in ERROR_CODES_WITH_REMARK and not remark:
        return f"{ResponseCode(code).name} without a remark to {sent}"
    return None


class ReplyBook(ABC):
    """A raw peer's book of the answers it is owed, by opaque: each must come within its deadline, once, with a
    known response code and, for an error, a remark. Subclasses send and read; ``bad`` collects what was wrong."""

    def __init__(self) -> None:
        #: opaque -> (deadline or None when the answer may be held past any bound we wait, what was sent, what
        #: else the subclass checks the answer against)
        self.owed: dict[int, tuple[float | None, str, Any]] = {}
        self.replies: dict[int, int] = {}  # opaque -> response code, for the probe
        self.bad: list[str] = []

    @abstractmethod
    def _wait(self, timeout_s: float) -> bool:
        """Read what came within ``timeout_s`` and check it (``answered``); False when nothing came."""

    @abstractmethod
    def ask(self, code: int, opaque: int) -> None:
        """Send a request of ``code`` with an empty ext and body, owed an answer."""

    def owe(self, opaque: int, hold_s: float | None, sent: str, expect: Any = None) -> int | None:
        """Book an answer to ``opaque``, due within ``REPLY_BOUND_S`` + ``hold_s`` (``hold_s`` None: it may be
        held past any bound we wait); returns ``opaque``, or None when an answer to it was already owed."""
        if opaque in self.owed:
            return None
        deadline = None if hold_s is None else time.monotonic() + REPLY_BOUND_S + hold_s
        self.owed[opaque] = (deadline, sent[:300], expect)
        return opaque

    def answered(self, opaque: int, code: int, remark: str | None) -> tuple[str, Any] | None:
        """Take an answer off the book; returns what was sent and the subclass's expectation, or None (noted in
        ``bad``) when no answer was owed."""
        entry = self.owed.pop(opaque, None)
        self.replies[opaque] = code
        if entry is None:
            self.bad.append(f"reply nobody asked for: opaque {opaque} code {code} {remark!r}")
            return None
        fault = reply_fault(code, remark, entry[1])
        if fault is not None:
            self.bad.append(fault)
        return entry[1], entry[2]

    def pump(self, until_opaque: int | None = None) -> None:
        """Read answers; with ``until_opaque``, until that one came or its deadline passed."""
        while True:
            timeout = 0.0
            if until_opaque is not None and until_opaque in self.owed:
                deadline = self.owed[until_opaque][0]
                if deadline is not None:
                    timeout = max(0.0, deadline - time.monotonic())
                    if timeout == 0.0:
                        self._overdue(time.monotonic())
                        return
            if not self._wait(timeout):
                self._overdue(time.monotonic())
                return

    def settle(self) -> None:
        """Wait for every owed answer that has a deadline; then report the ones that never came."""
        while any(d is not None for d, _, _ in self.owed.values()):
            soonest = min(d for d, _, _ in self.owed.values() if d is not None)
            if not self._wait(max(0.0, soonest - time.monotonic())):
                self._overdue(time.monotonic())

    def _overdue(self, now: float) -> None:
        for opaque, (deadline, sent, _) in list(self.owed.items()):
            if deadline is not None and deadline <= now:
                del self.owed[opaque]
                self.bad.append(f"no reply within the bound to {sent}")


def registered_codes(peer: ReplyBook, opaques: Iterator[int]) -> set[int]:
    """The request codes a live server has a handler for at ``peer``'s door: every RequestCode asked with an
    empty ext; the ones not answered REQUEST_CODE_NOT_SUPPORTED are registered."""
    asked: dict[int, int] = {}
    for code in sorted({int(c) for c in RequestCode}):
        opaque = next(opaques)
        asked[opaque] = code
        peer.ask(code, opaque)
    peer.settle()
    assert not peer.bad, peer.bad
    return {code for opaque, code in asked.items()
            if peer.replies.get(opaque) != ResponseCode.REQUEST_CODE_NOT_SUPPORTED}
