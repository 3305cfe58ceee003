"""Black-box fuzz of the live name server and broker: raw multipart frames from a zmq DEALER.

One mesh (a name server and a broker, real processes) serves every example of the module. Each example
is a message of random frames or a request of any code (every code the server has registered, unknown
ones, wrong types) with hostile ext fields and bodies. Checked throughout:

* the process is alive, and logged no handler traceback (a handler must answer bad input itself);
* every request that is owed a reply gets one that decodes, has the response flag, echoes the
  opaque, carries a known response code, and says what was wrong when it is an error;
* a well-behaved client is served: a watcher thread asks both servers every 100 ms (the stall
  bound), and a real Producer sends a witness message every few examples;
* at the end, with the broker stopped, every witness message is in the store, intact (body CRC),
  and every consume queue entry agrees with the commitlog.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import zmq
from fuzzkit import Tally, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from procs import TEST_STORE_CONFIG, BrokerProcess, NamesrvProcess
from rocketmesh import Message, Producer
from rocketmesh.model.codec import decode_message_id, decode_record, encode_batch
from rocketmesh.namesrv.processor import NamesrvProcessor
from rocketmesh.remoting import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    ProtocolError,
    RemotingClient,
    RemotingError,
    decode,
    pack_frame,
    request,
)
from rocketmesh.remoting.protocol import headers as request_headers
from rocketmesh.remoting.protocol.codes import RequestCode, ResponseCode
from rocketmesh.remoting.transport.options import DEFAULT_MAX_MESSAGE_SIZE
from rocketmesh.runtime.config import camel_case
from storekit import check_queues_agree_with_commitlog, open_store

WITNESS_TOPIC = "FuzzWitness"
WITNESS_GROUP = "fuzz-witness"
#: A reply owed to a prompt request must come within this many seconds.
REPLY_BOUND_S = 5.0
#: A normal request to either server must be answered within this many seconds while the fuzzer runs.
STALL_BOUND_S = 3.0
#: A witness message is sent every this many examples.
WITNESS_EVERY = 10
#: Lines in a service's log that mean a request met a code path that did not expect it.
FAILURE_MARKS = ("request_handler_failed", "remoting I/O loop crashed", "Traceback")
RESPONSE_CODES = {int(c) for c in ResponseCode}
#: Codes whose error answers must say what went wrong (a remark).
ERROR_CODES_WITH_REMARK = {ResponseCode.SYSTEM_ERROR, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                           ResponseCode.MESSAGE_ILLEGAL, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                           ResponseCode.NO_PERMISSION, ResponseCode.TOPIC_NOT_EXIST}

# --- the mesh ------------------------------------------------------------------------------------------


@dataclass
class Watcher:
    """Asks both servers a normal question every 100 ms; remembers the slowest answer and any failure."""

    namesrv: str
    broker: str
    slowest_s: float = 0.0
    asked: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Watcher:
        self._thread = threading.Thread(target=self._run, name="fuzz-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        questions = [(self.namesrv, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": WITNESS_TOPIC})),
                     (self.broker, request(RequestCode.GET_BROKER_RUNTIME_INFO))]
        with RemotingClient(name="fuzz-watcher") as client:
            while not self._stop.wait(0.1):
                for addr, req in questions:
                    began = time.monotonic()
                    try:
                        resp = client.invoke_sync(addr, request(req.code, dict(req.ext)), int(STALL_BOUND_S * 1000))
                    except RemotingError as exc:
                        self.failures.append(f"{addr} code {req.code}: {exc}")
                        continue
                    self.slowest_s = max(self.slowest_s, time.monotonic() - began)
                    self.asked += 1
                    if resp.code != ResponseCode.SUCCESS:
                        self.failures.append(f"{addr} code {req.code}: answered {resp.code} {resp.remark}")


@dataclass
class Mesh:
    namesrv: NamesrvProcess
    broker: BrokerProcess
    producer: Producer
    watcher: Watcher
    #: (offset message id, body) of every witness message acknowledged SEND_OK.
    witnesses: list[tuple[str, bytes]] = field(default_factory=list)
    _seq: Iterator[int] = field(default_factory=itertools.count)

    def send_witness(self) -> None:
        """A normal send must succeed whatever the fuzzer did before it."""
        body = b"witness-%06d" % next(self._seq)
        result = self.producer.send(Message(WITNESS_TOPIC, body, tags="w", keys=body.decode()))
        assert result.ok, f"witness send refused: {result}"
        self.witnesses.append((result.offset_msg_id, body))


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    root = tmp_path_factory.mktemp("fuzz-mesh")
    namesrv = NamesrvProcess(root / "namesrv").start()
    broker = BrokerProcess(root / "broker", namesrv.addr)
    broker.start(timeout_s=30)
    broker.wait_registered()
    producer = Producer(WITNESS_GROUP, namesrv.addr)
    producer.start()
    watcher = Watcher(namesrv.addr, broker.addr).start()
    m = Mesh(namesrv, broker, producer, watcher)
    try:
        m.send_witness()  # creates the topic before the fuzzer may touch anything
        yield m
    finally:
        watcher.stop()
        producer.shutdown()
        broker.stop()
        namesrv.stop()


# --- a raw DEALER that checks every reply ----------------------------------------------------------


class RawPeer:
    """A DEALER that sends any frames and checks the replies it is owed (by opaque)."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.sock = self._connect()
        #: opaque -> (deadline or None when the reply may be held indefinitely, what was sent)
        self.owed: dict[int, tuple[float | None, str]] = {}
        self.replies: dict[int, int] = {}  # opaque -> response code, for the probe
        self.bad: list[str] = []

    def _connect(self) -> zmq.Socket:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.connect(f"tcp://{self.addr}")
        return sock

    def close(self) -> None:
        self.sock.close(0)

    def send(self, frames: list[bytes], hold_s: float | None = 0.0) -> int | None:
        """Send ``frames``; returns the opaque a reply is owed for (None if none is), which must come
        within ``REPLY_BOUND_S`` + ``hold_s`` (``hold_s`` None: it may be held past any bound we wait)."""
        if any(len(f) > DEFAULT_MAX_MESSAGE_SIZE for f in frames):
            # ZeroMQ drops a connection that sends a frame past ZMQ_MAXMSGSIZE (by design: SocketOptions), and with
            # it the replies still on their way: collect those first, then send it on a connection of its own.
            self.settle()
            self.sock.send_multipart(frames, copy=True)
            time.sleep(0.05)
            self.sock.close(0)
            self.sock = self._connect()
            return None
        owed = owed_opaque(frames)
        self.sock.send_multipart(frames, copy=True)
        if owed is not None and owed not in self.owed:
            deadline = None if hold_s is None else time.monotonic() + REPLY_BOUND_S + hold_s
            self.owed[owed] = (deadline, repr(frames)[:300])
            return owed
        return None

    def pump(self, until_opaque: int | None = None) -> None:
        """Read replies; with ``until_opaque``, until that one came or its deadline passed."""
        while True:
            timeout = 0
            if until_opaque is not None and until_opaque in self.owed:
                deadline = self.owed[until_opaque][0]
                if deadline is None:
                    timeout = 0
                else:
                    timeout = max(0, int((deadline - time.monotonic()) * 1000))
                    if timeout == 0:
                        self._overdue(time.monotonic())
                        return
            if not self.sock.poll(timeout):
                self._overdue(time.monotonic())
                return
            self._check(self.sock.recv_multipart())

    def settle(self) -> None:
        """Wait for every owed reply that has a deadline; then report the ones that never came."""
        while any(d is not None for d, _ in self.owed.values()):
            soonest = min(d for d, _ in self.owed.values() if d is not None)
            if not self.sock.poll(max(0, int((soonest - time.monotonic()) * 1000))):
                self._overdue(time.monotonic())
                continue
            self._check(self.sock.recv_multipart())

    def _overdue(self, now: float) -> None:
        for opaque, (deadline, sent) in list(self.owed.items()):
            if deadline is not None and deadline <= now:
                del self.owed[opaque]
                self.bad.append(f"no reply within the bound to {sent}")

    def _check(self, frames: list[bytes]) -> None:
        try:
            cmd = decode(frames)
        except ProtocolError as exc:
            self.bad.append(f"undecodable reply {frames!r:.200}: {exc}")
            return
        if not cmd.flag & RESPONSE_FLAG:
            return  # a push (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE) to the client we posed as
        entry = self.owed.pop(cmd.opaque, None)
        self.replies[cmd.opaque] = cmd.code
        if entry is None:
            self.bad.append(f"reply nobody asked for: opaque {cmd.opaque} code {cmd.code} {cmd.remark!r}")
            return
        if cmd.code not in RESPONSE_CODES:
            self.bad.append(f"unknown response code {cmd.code} to {entry[1]}")
        elif cmd.code in ERROR_CODES_WITH_REMARK and not cmd.remark:
            self.bad.append(f"{ResponseCode(cmd.code).name} without a remark to {entry[1]}")


def owed_opaque(frames: list[bytes]) -> int | None:
    """The opaque the server owes a reply for, by the server's own rules (server._drain_socket / _on_malformed)."""
    if len(frames) == 1 and not frames[0]:
        return None  # a connection probe
    try:
        cmd = decode(frames)
    except ProtocolError as exc:
        if exc.opaque is None or (exc.flag or 0) & (RESPONSE_FLAG | ONEWAY_FLAG):
            return None
        return exc.opaque
    return None if cmd.flag & (RESPONSE_FLAG | ONEWAY_FLAG) else cmd.opaque


def registered_codes(peer: RawPeer, opaques: Iterator[int]) -> set[int]:
    """The request codes a live server has a handler for: every RequestCode asked with an empty ext; the
    ones not answered REQUEST_CODE_NOT_SUPPORTED are registered."""
    asked: dict[int, int] = {}
    for code in sorted({int(c) for c in RequestCode}):
        opaque = next(opaques)
        asked[opaque] = code
        peer.send(orjson_frames({"code": code, "opaque": opaque, "flag": 0, "ext": {}}, b""))
    peer.settle()
    assert not peer.bad, peer.bad
    return {code for opaque, code in asked.items()
            if peer.replies.get(opaque) != ResponseCode.REQUEST_CODE_NOT_SUPPORTED}


def orjson_frames(header: dict[str, Any], body: bytes, framing: str = "whole") -> list[bytes]:
    """The request ``header`` + ``body`` as the wire frames it (``whole``), or mis-framed: header and body in two
    frames without the length field (``split``), or a stray frame after the request (``extra``)."""
    if framing == "split":
        return [orjson.dumps(header), body]
    frames = [pack_frame(orjson.dumps(header), body)]
    return frames + [b"extra"] if framing == "extra" else frames


# --- hostile inputs ----------------------------------------------------------------------------------

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

#: Every ext field name a handler reads: the request header classes' and the name server's.
EXT_KEYS = sorted({camel_case(f) for cls in vars(request_headers).values()
                   if isinstance(cls, type) and getattr(cls, "__dataclass_fields__", None)
                   for f in cls.__dataclass_fields__}
                  | {"clusterName", "brokerName", "brokerId", "brokerAddr", "haServerAddr", "namespace", "key",
                     "value", "cluster", "expressionType", "subVersion"})
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
          | st.sampled_from([b"x" * (5 * 1024 * 1024), b"\xff" * 70000]))  # past maxMessageSize; not UTF-8
flags = st.sampled_from([0] * 12 + [ONEWAY_FLAG, RESPONSE_FLAG, 4, -1, 2**40])


def hold_of(code: Any, ext: dict[str, Any]) -> float | None:
    """How long a well-formed request of ``code`` may be held before its answer (None: unbounded here)."""
    if code == RequestCode.PULL_MESSAGE and isinstance(ext.get("sysFlag"), int) and ext["sysFlag"] & 0x2:
        timeout = ext.get("suspendTimeoutMillis", 15_000)
        return timeout / 1000 if isinstance(timeout, int) and 0 <= timeout <= 5_000 else None
    if code == RequestCode.HA_TRANSFER:
        held = ext.get("suspendMillis", 0)
        return min(max(held, 0), 30_000) / 1000 if isinstance(held, int) and not isinstance(held, bool) else 0.0
    return 0.0


def fuzz_target(peer: RawPeer, mesh: Mesh, tally: Tally, codes: list[int], examples: int):
    """The hypothesis test body shared by both servers: one message, its reply checked, the mesh still serving."""
    opaques = itertools.count(1_000_000_000)
    known = st.sampled_from(codes)
    code_values = known | known | known | json_ints | big_ints | st.sampled_from(["10", 10.0, None, True, [10]])

    raw_frames = st.lists(st.binary(max_size=64), min_size=1, max_size=4)
    # Mostly well-framed requests, so that most examples reach a handler; the wire decoder's own fuzz
    # (test_fuzz_codecs.py) covers malformed headers in depth.
    structured = st.tuples(code_values, st.sampled_from([None] * 9 + ["x"]), flags,
                           st.none() | st.text(max_size=8) | json_ints, hostile_ext(), bodies,
                           st.sampled_from(["whole"] * 18 + ["split", "extra"]))

    @fuzz_settings(examples)
    @given(st.one_of(raw_frames, structured, structured, structured))
    @tally.counted
    def run(shape: Any) -> None:
        hold: float | None = 0.0
        if isinstance(shape, list):
            frames = shape
        else:
            code, opaque_kind, flag, remark, ext, body, framing = shape
            header: dict[str, Any] = {"code": code, "opaque": next(opaques) if opaque_kind is None else opaque_kind,
                                      "flag": flag, "remark": remark, "ext": ext}
            frames = orjson_frames(header, body, framing)
            hold = hold_of(code, ext)
        owed = peer.send(frames, hold)
        peer.pump(owed if hold is not None and hold == 0.0 else None)
        if tally.inputs % WITNESS_EVERY == 0:
            mesh.send_witness()
        assert not peer.bad, peer.bad

    return run


def check_service(proc: Any, watcher: Watcher) -> None:
    assert proc.alive, f"{proc.name} died\n{proc.output()}"
    marks = [line for line in proc.stdout_text().splitlines() + proc.stderr_text().splitlines()
             if any(m in line for m in FAILURE_MARKS)]
    assert not marks, f"{proc.name} met bad input it did not expect:\n" + "\n".join(marks[:20])
    assert not watcher.failures, watcher.failures[:10]
    assert watcher.slowest_s < STALL_BOUND_S, f"a normal request took {watcher.slowest_s:.2f} s during the fuzz"


# --- the targets ---------------------------------------------------------------------------------------


def _run_server_fuzz(mesh: Mesh, addr: str, proc: Any, examples: int) -> tuple[int, set[int]]:
    peer = RawPeer(addr)
    tally = Tally()
    try:
        codes = registered_codes(peer, itertools.count(2_000_000_000))
        fuzz_target(peer, mesh, tally, sorted(codes), examples)()
        peer.settle()
        assert not peer.bad, peer.bad
    finally:
        peer.close()
    check_service(proc, mesh.watcher)
    return tally.inputs, codes


def test_namesrv_survives_hostile_requests(mesh: Mesh, reliability) -> None:
    inputs, codes = _run_server_fuzz(mesh, mesh.namesrv.addr, mesh.namesrv, 300)

    class Recorder:
        """Stands in for a RemotingServer: the codes NamesrvProcessor registers."""

        def __init__(self) -> None:
            self.codes: set[int] = set()

        def register(self, code: int, *_: Any) -> None:
            self.codes.add(int(code))

    recorder = Recorder()
    # Registration only binds the handlers: an instance without route tables is enough.
    NamesrvProcessor.__new__(NamesrvProcessor).register_with(recorder, ThreadPoolExecutor(1))  # type: ignore[arg-type]
    assert codes == recorder.codes, "the probe and the name server's registration disagree"
    reliability.fuzz("name server: live requests", inputs=inputs,
                     note=f"raw frames, unknown codes and all {len(codes)} registered codes with hostile ext and "
                          "bodies; process alive, every owed reply well-formed, a normal client served throughout")


def test_broker_survives_hostile_requests(mesh: Mesh, reliability) -> None:
    inputs, codes = _run_server_fuzz(mesh, mesh.broker.addr, mesh.broker, 500)
    # The probe found the handlers of every processor, not just some.
    core = {RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE, RequestCode.PULL_MESSAGE,
            RequestCode.HEART_BEAT, RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.END_TRANSACTION,
            RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.QUERY_MESSAGE, RequestCode.HA_TRANSFER,
            RequestCode.HA_APPEND, RequestCode.DELIVER_DUE_MESSAGES, RequestCode.CHECK_HALF_MESSAGE}
    assert core <= codes, f"probe missed registered codes: {sorted(core - codes)}"
    reliability.fuzz("broker: live requests", inputs=inputs,
                     note=f"raw frames, unknown codes and all {len(codes)} registered codes with hostile ext and "
                          "bodies (invalid topics, groups, SQL92, truncated batches, separators in properties); "
                          "witness sends all stored intact")


def test_store_undamaged_after_fuzz(mesh: Mesh) -> None:
    """Every witness message is in the store, intact, and the consume queues agree with the commitlog."""
    mesh.send_witness()
    mesh.broker.stop()
    store = open_store(mesh.broker.store_dir, mapped_file_size_commit_log=TEST_STORE_CONFIG["mappedFileSizeCommitLog"],
                       mapped_file_size_consume_queue=TEST_STORE_CONFIG["mappedFileSizeConsumeQueue"],
                       max_hash_slot_num=TEST_STORE_CONFIG["maxHashSlotNum"],
                       max_index_num=TEST_STORE_CONFIG["maxIndexNum"])
    try:
        for msg_id, body in mesh.witnesses:
            _, _, phys = decode_message_id(msg_id)
            m = store.look_message_by_offset(phys)
            assert m is not None and m.body == body and m.topic == WITNESS_TOPIC, f"witness {body!r} damaged"
        assert check_queues_agree_with_commitlog(store) >= len(mesh.witnesses)
        stored = sorted(decode_record(store.commitlog.read(*cq.get(off)[:2]), check_crc=True).body
                        for cq in store.consume_queues() if cq.topic == WITNESS_TOPIC
                        for off in range(cq.min_offset, cq.max_offset))
        assert stored == sorted(body for _, body in mesh.witnesses)
    finally:
        store.shutdown()
