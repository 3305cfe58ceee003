"""Black-box fuzz of the live name server and broker at both their doors: raw multipart frames from a zmq DEALER
at the ZeroMQ door, raw RocketMQ frames from a TCP socket at the RocketMQ TCP door (remotingListenPort).

One mesh (a name server and a broker, real processes, both doors open) serves every example of the module. Each
example is a message of random frames or a request of any code (every code the server has registered, unknown
ones, wrong types) with hostile ext fields and bodies; at the TCP door also bytes that are not a frame (negative
and huge lengths, header lengths past the frame, unknown serialize types, headers that do not decode, frames cut
short by a close). Checked throughout:

* the process is alive, and logged no handler traceback (a handler must answer bad input itself);
* every request that is owed a reply gets one that decodes, has the response flag, echoes the
  opaque, carries a known response code, and says what was wrong when it is an error; at the TCP door in
  the request's serialize type; oneway requests get none;
* bytes that are not a frame close their TCP connection, and only it, and the service logs one line naming
  the peer;
* a well-behaved client is served: a watcher thread asks both servers at both doors every 100 ms (the stall
  bound; at the broker's TCP door it sends a message), and a real Producer sends a witness message every few
  examples;
* at the end, with the broker stopped, every witness message (the Producer's and the watcher's) is in the
  store, intact (body CRC), and every consume queue entry agrees with the commitlog.
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import zmq
from doorpeer import (
    DOOR_FRAME_LIMIT,
    DoorPeer,
    Malformed,
    Request,
    door_requests,
    framed,
    is_malformed,
    malformed_inputs,
)
from fuzzkit import Tally, fuzz_settings
from hypothesis import given, strategies as st
from livefuzz import (
    REPLY_BOUND_S,
    WITNESS_GROUP,
    WITNESS_TOPIC,
    ReplyBook,
    big_ints,
    bodies,
    hold_of,
    hostile_ext,
    json_ints,
    registered_codes,
)

from procs import TEST_STORE_CONFIG, BrokerProcess, NamesrvProcess, free_port, wait_for
from rocketmesh import Message, Producer
from rocketmesh.model.codec import decode_message_id, decode_record
from rocketmesh.model.fields import encode_properties
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
from rocketmesh.remoting.protocol.codes import RequestCode, ResponseCode
from rocketmesh.remoting.protocol.rocketmq_wire import MAX_FRAME_SIZE, SerializeType
from rocketmesh.remoting.transport.options import DEFAULT_MAX_MESSAGE_SIZE
from storekit import check_queues_agree_with_commitlog, open_store
from tcpkit import RawClient, cmd

#: A normal request to either server must be answered within this many seconds while the fuzzer runs.
STALL_BOUND_S = 3.0
#: A witness message is sent every this many examples.
WITNESS_EVERY = 10
#: Lines in a service's log that mean a request met a code path that did not expect it.
FAILURE_MARKS = ("request_handler_failed", "remoting I/O loop crashed", "tcp_door_loop_crashed", "Traceback")

# --- the mesh ------------------------------------------------------------------------------------------


@dataclass
class Watcher:
    """Asks both servers a normal question every 100 ms at both doors (at the broker's TCP door: a send, whose
    message joins the witnesses); remembers the slowest answer and any failure."""

    namesrv: str
    broker: str
    namesrv_door: str
    broker_door: str
    slowest_s: float = 0.0
    asked: int = 0
    failures: list[str] = field(default_factory=list)
    #: (offset message id, body) of every message sent at the broker's TCP door and answered SEND_OK.
    door_witnesses: list[tuple[str, bytes]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _opaques: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _doors: dict[str, RawClient] = field(default_factory=dict)

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
            try:
                while not self._stop.wait(0.1):
                    for addr, req in questions:
                        self._ask(f"{addr} code {req.code}", client.invoke_sync, addr, request(req.code, dict(req.ext)),
                                  int(STALL_BOUND_S * 1000))
                    self._ask(f"{self.namesrv_door} route", self._route_at_door)
                    self._ask(f"{self.broker_door} send", self._send_at_door)
            finally:
                for door in self._doors.values():
                    door.close()

    def _ask(self, what: str, ask: Callable[..., Any], *args: Any) -> None:
        began = time.monotonic()
        try:
            resp = ask(*args)
        except (RemotingError, OSError, AssertionError) as exc:  # tcpkit: AssertionError when no answer came
            self.failures.append(f"{what}: {exc!r}")
            for door in self._doors.values():
                door.close()
            self._doors.clear()
            return
        self.slowest_s = max(self.slowest_s, time.monotonic() - began)
        self.asked += 1
        if resp.code != ResponseCode.SUCCESS:
            self.failures.append(f"{what}: answered {resp.code} {resp.remark}")

    def _door(self, addr: str) -> RawClient:
        if addr not in self._doors:
            self._doors[addr] = RawClient(addr)
        return self._doors[addr]

    def _route_at_door(self) -> Any:
        resp, _ = self._door(self.namesrv_door).call(
            cmd(RequestCode.GET_ROUTEINFO_BY_TOPIC, next(self._opaques), {"topic": WITNESS_TOPIC}))
        return resp

    def _send_at_door(self) -> Any:
        """A SEND_MESSAGE_V2 as RocketMQ's clients write it (one-letter keys, every value a string)."""
        n = next(self._opaques)
        body = b"door-witness-%06d" % n
        props = encode_properties({"KEYS": body.decode(), "TAGS": "door"}).decode()
        ext = {"a": WITNESS_GROUP, "b": WITNESS_TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false", "m": "false"}
        resp, _ = self._door(self.broker_door).call(cmd(RequestCode.SEND_MESSAGE_V2, n, ext, body))
        if resp.code == ResponseCode.SUCCESS and "msgId" in resp.ext:
            self.door_witnesses.append((resp.ext["msgId"], body))
        return resp


@dataclass
class Mesh:
    namesrv: NamesrvProcess
    broker: BrokerProcess
    #: The RocketMQ TCP doors (remotingListenPort) of the name server and the broker.
    namesrv_door: str
    broker_door: str
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
    ns_port, broker_port = free_port(), free_port()
    ns_door, broker_door = f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}"
    namesrv = NamesrvProcess(root / "namesrv", remotingListenPort=ns_port)
    namesrv.start()
    broker = BrokerProcess(root / "broker", namesrv.addr, remotingListenPort=broker_port)
    broker.start(timeout_s=30)
    broker.wait_registered()
    producer = Producer(WITNESS_GROUP, namesrv.addr)
    producer.start()
    m = Mesh(namesrv, broker, ns_door, broker_door, producer, Watcher(namesrv.addr, broker.addr, ns_door, broker_door))
    try:
        m.send_witness()  # creates the topic before the fuzzer (or the watcher's sends at the door) may touch anything
        m.watcher.start()
        yield m
    finally:
        m.watcher.stop()
        producer.shutdown()
        broker.stop()
        namesrv.stop()


# --- a raw DEALER that checks every reply ----------------------------------------------------------


class RawPeer(ReplyBook):
    """A DEALER that sends any frames and checks the replies it is owed (by opaque)."""

    def __init__(self, addr: str) -> None:
        super().__init__()
        self.addr = addr
        self.sock = self._connect()

    def _connect(self) -> zmq.Socket:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.connect(f"tcp://{self.addr}")
        return sock

    def close(self) -> None:
        self.sock.close(0)

    def ask(self, code: int, opaque: int) -> None:
        self.send(orjson_frames({"code": code, "opaque": opaque, "flag": 0, "ext": {}}, b""))

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
        return None if owed is None else self.owe(owed, hold_s, repr(frames))

    def _wait(self, timeout_s: float) -> bool:
        if not self.sock.poll(int(timeout_s * 1000)):
            return False
        frames = self.sock.recv_multipart()
        try:
            reply = decode(frames)
        except ProtocolError as exc:
            self.bad.append(f"undecodable reply {frames!r:.200}: {exc}")
            return True
        if reply.flag & RESPONSE_FLAG:  # else a push (NOTIFY_CONSUMER_IDS_CHANGED ...) to the client we posed as
            self.answered(reply.opaque, reply.code, reply.remark)
        return True


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


def orjson_frames(header: dict[str, Any], body: bytes, framing: str = "whole") -> list[bytes]:
    """The request ``header`` + ``body`` as the wire frames it (``whole``), or mis-framed: header and body in two
    frames without the length field (``split``), or a stray frame after the request (``extra``)."""
    if framing == "split":
        return [orjson.dumps(header), body]
    frames = [pack_frame(orjson.dumps(header), body)]
    return frames + [b"extra"] if framing == "extra" else frames


# --- hostile inputs (the rest: livefuzz.py) --------------------------------------------------------------

flags = st.sampled_from([0] * 12 + [ONEWAY_FLAG, RESPONSE_FLAG, 4, -1, 2**40])


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


def _run_fuzz(mesh: Mesh, peer: Any, proc: Any, target: Callable[..., Any], examples: int) -> tuple[int, set[int]]:
    """Probe the codes registered at ``peer``'s door, run ``target`` (fuzz_target, door_fuzz_target) on them, and
    check the service; returns the inputs sent and the codes."""
    tally = Tally()
    try:
        codes = registered_codes(peer, itertools.count(2_000_000_000))
        target(peer, mesh, tally, sorted(codes), examples)()
        peer.settle()
        assert not peer.bad, peer.bad
    finally:
        peer.close()
    check_service(proc, mesh.watcher)
    return tally.inputs, codes


def _run_server_fuzz(mesh: Mesh, addr: str, proc: Any, examples: int) -> tuple[int, set[int]]:
    return _run_fuzz(mesh, RawPeer(addr), proc, fuzz_target, examples)


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


# --- the RocketMQ TCP doors ------------------------------------------------------------------------------

#: Bodies at the TCP door: the hostile ones, and one past maxMessageSize that still fits the door's frame limit.
door_bodies = bodies | st.just(4 * 1024 * 1024 + 1).map(lambda n: b"y" * n)


def door_fuzz_target(peer: DoorPeer, mesh: Mesh, tally: Tally, codes: list[int], examples: int):
    """The hypothesis test body shared by both TCP doors: one request (answered in kind, or not at all when it is
    oneway) or bytes that are not a frame (their connection closed), the mesh still serving."""
    opaques = itertools.count(1)
    requests = door_requests(codes, door_bodies)

    # Three requests to one malformed input (one_of would flatten the branches of both and weigh them as one).
    inputs = st.sampled_from([requests, requests, requests, malformed_inputs]).flatmap(lambda s: s)

    @fuzz_settings(examples)
    @given(inputs, st.booleans())
    @tally.counted
    def run(shape: Request | Malformed, negative_opaque: bool) -> None:
        if isinstance(shape, Request):
            opaque = next(opaques) * (-1 if negative_opaque else 1)
            frame = shape.frame(opaque)
            if len(frame) > DOOR_FRAME_LIMIT:
                shape = Malformed("a request over the door's frame limit", frame)
            else:
                hold = hold_of(shape.code, shape.ext)
                owed = peer.request(shape, opaque, hold)
                peer.pump(owed if hold == 0.0 else None)
        if isinstance(shape, Malformed):
            assert is_malformed(shape.data, shape.then_close), f"not malformed after all: {shape!r}"
            peer.malformed(shape)
        if tally.inputs % WITNESS_EVERY == 0:
            mesh.send_witness()
        assert not peer.bad, peer.bad

    return run


def bad_frame_lines(proc: Any, peer: str) -> list[str]:
    """The lines of ``proc``'s log that report bad input from the TCP peer ``peer`` (``ip:port``)."""
    return [line for line in proc.stderr_text().splitlines()
            if '"tcp_bad_frame"' in line and f'"peer": "{peer}"' in line]


def _run_door_fuzz(mesh: Mesh, door: str, proc: Any, zmq_addr: str, examples: int) -> tuple[int, set[int], int]:
    """Fuzz ``door``; returns the inputs sent, the codes registered there, and the connections closed for bad
    input (each logged once, naming its peer)."""
    with_zmq = RawPeer(zmq_addr)
    try:
        zmq_codes = registered_codes(with_zmq, itertools.count(2_000_000_000))
    finally:
        with_zmq.close()
    peer = DoorPeer(door)
    inputs, codes = _run_fuzz(mesh, peer, proc, door_fuzz_target, examples)
    # One dispatcher behind both doors: the same handlers answer.
    assert codes == zmq_codes, f"the doors disagree: {sorted(codes ^ zmq_codes)}"
    closed = peer.closed_for_bad_input
    assert len(closed) >= examples // 10, f"only {len(closed)} connections closed for bad input: the framing untried"
    wait_for(lambda: all(bad_frame_lines(proc, p) for p in closed), 5, "a log line for every connection closed")
    for p in set(closed):
        assert len(bad_frame_lines(proc, p)) == closed.count(p), f"not one line per bad connection of {p}"
    return inputs, codes, len(closed)


def test_namesrv_tcp_door_survives_hostile_frames(mesh: Mesh, reliability) -> None:
    inputs, codes, closed = _run_door_fuzz(mesh, mesh.namesrv_door, mesh.namesrv, mesh.namesrv.addr, 300)
    reliability.fuzz("name server: live TCP door", inputs=inputs,
                     note=f"RocketMQ frames of unknown codes and all {len(codes)} registered codes in JSON (ext values "
                          "of any JSON type) and ROCKETMQ headers, hostile ext and bodies; negative and huge lengths, "
                          f"bad header lengths, serialize types and headers, cut frames ({closed} connections): each "
                          "closed alone and logged naming its peer; owed answers in kind, none to oneway; clients "
                          "of both doors served throughout")


def test_broker_tcp_door_survives_hostile_frames(mesh: Mesh, reliability) -> None:
    inputs, codes, closed = _run_door_fuzz(mesh, mesh.broker_door, mesh.broker, mesh.broker.addr, 500)
    reliability.fuzz("broker: live TCP door", inputs=inputs,
                     note=f"RocketMQ frames of unknown codes and all {len(codes)} registered codes in JSON (ext values "
                          "of any JSON type) and ROCKETMQ headers, hostile ext and bodies (over maxMessageSize too); "
                          "negative and huge lengths, bad header lengths, serialize types and headers, cut frames "
                          f"({closed} connections): each closed alone and logged naming its peer; owed answers in "
                          "kind, none to oneway; sends at both doors all stored intact")


#: One of each kind of bytes that is not a frame (and a frame cut short by the peer's close).
MALFORMED = [
    Malformed("negative total length", struct.pack(">iI", -1, 10)),
    Malformed("total length over 16 MiB", struct.pack(">iI", MAX_FRAME_SIZE, 10)),
    Malformed("total length over maxMessageSize plus headers", struct.pack(">iI", DOOR_FRAME_LIMIT, 10)),
    Malformed("header length past the frame", framed(b'{"code":105}', header_size=13)),
    Malformed("unknown serialize type", framed(b'{"code":105}', kind=2)),
    Malformed("header not JSON", framed(b"{code: 105}")),
    Malformed("header not ROCKETMQ", framed(b"\x00\x69\x00\x00\x00", kind=SerializeType.ROCKETMQ)),
    Malformed("truncated frame, then close", framed(b'{"code":105,"opaque":1}', b"body")[:20], then_close=True),
]


@pytest.mark.parametrize("door", ["namesrv", "broker"])
def test_a_malformed_frame_closes_its_connection_only_and_is_logged(mesh: Mesh, door: str) -> None:
    proc, addr = (mesh.namesrv, mesh.namesrv_door) if door == "namesrv" else (mesh.broker, mesh.broker_door)
    question = (cmd(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": WITNESS_TOPIC}) if door == "namesrv"
                else cmd(RequestCode.GET_BROKER_RUNTIME_INFO, 0))
    bystander = RawClient(addr)
    try:
        for n, bad in enumerate(MALFORMED, start=1):
            assert is_malformed(bad.data, bad.then_close), bad
            client = RawClient(addr)
            peer = client.identity.decode().removeprefix("tcp:")
            # An earlier connection of the fuzz may have had the same port, and its own line.
            earlier = len(bad_frame_lines(proc, peer))
            try:
                client.sock.sendall(bad.data)
                if bad.then_close:
                    client.sock.shutdown(socket.SHUT_WR)
                assert client.closed_within(REPLY_BOUND_S), f"{bad.what}: the connection stayed open"
            finally:
                client.close()
            wait_for(lambda: len(bad_frame_lines(proc, peer)) > earlier, 5,  # noqa: B023
                     f"{bad.what}: a log line naming {peer}")
            assert len(bad_frame_lines(proc, peer)) == earlier + 1, bad_frame_lines(proc, peer)
            # The connection opened before it is still open, and served.
            question.opaque = n
            resp, _ = bystander.call(question)
            assert (resp.opaque, resp.code) == (n, ResponseCode.SUCCESS), f"{bad.what}: {resp}"
    finally:
        bystander.close()
    check_service(proc, mesh.watcher)


def test_store_undamaged_after_fuzz(mesh: Mesh) -> None:
    """Every witness message is in the store, intact, and the consume queues agree with the commitlog."""
    mesh.send_witness()
    mesh.watcher.stop()  # its last send at the broker's door is in the witnesses before the store is read
    assert mesh.watcher.door_witnesses, "the watcher sent nothing at the broker's door"
    witnesses = mesh.witnesses + mesh.watcher.door_witnesses
    mesh.broker.stop()
    store = open_store(mesh.broker.store_dir, mapped_file_size_commit_log=TEST_STORE_CONFIG["mappedFileSizeCommitLog"],
                       mapped_file_size_consume_queue=TEST_STORE_CONFIG["mappedFileSizeConsumeQueue"],
                       max_hash_slot_num=TEST_STORE_CONFIG["maxHashSlotNum"],
                       max_index_num=TEST_STORE_CONFIG["maxIndexNum"])
    try:
        for msg_id, body in witnesses:
            _, _, phys = decode_message_id(msg_id)
            m = store.look_message_by_offset(phys)
            assert m is not None and m.body == body and m.topic == WITNESS_TOPIC, f"witness {body!r} damaged"
        assert check_queues_agree_with_commitlog(store) >= len(witnesses)
        stored = sorted(decode_record(store.commitlog.read(*cq.get(off)[:2]), check_crc=True).body
                        for cq in store.consume_queues() if cq.topic == WITNESS_TOPIC
                        for off in range(cq.min_offset, cq.max_offset))
        assert stored == sorted(body for _, body in witnesses)
    finally:
        store.shutdown()
