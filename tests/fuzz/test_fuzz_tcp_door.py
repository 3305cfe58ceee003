"""Black-box fuzz of the live RocketMQ TCP door: streams of RocketMQ frames (JSON and ROCKETMQ headers, any code,
flag and ext) mixed with junk bytes, cut into random pieces, each example on a connection of its own.

One RemotingServer with its TcpDoor (in this process, real loopback sockets) serves every example. Checked:

* a stream of well-formed frames keeps its connection, and every request owed an answer (neither oneway nor
  itself a response) gets exactly one, in its own serialize type, with its opaque, the response flag, and
  the code its handler gives (unknown codes: REQUEST_CODE_NOT_SUPPORTED);
* a stream with junk in it gets only well-formed responses back, and the connection ends;
* throughout, a witness connection of the door and a ZeroMQ client of the server are served within a bound,
  the door's I/O thread lives, and nothing logs a handler failure or a crash of the loop.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from fuzzkit import Tally, fuzz_settings
from hypothesis import example, given, strategies as st

from rocketmesh.remoting import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestContext,
    ResponseCode,
    request,
    response_to,
)
from rocketmesh.remoting.protocol.rocketmq_wire import SerializeType, encode
from rocketmesh.remoting.transport.tcp_door import TcpDoor
from tcpkit import RawClient, cmd

ECHO = 1001
ECHO_POOL = 1002
#: Codes the fuzzer sends: the two handlers, and codes nobody registered (0 and negatives included).
CODES = [ECHO, ECHO_POOL, 4242, 0, -7, 32767]
#: A request owed an answer must get it within this many seconds; so must the witnesses.
REPLY_BOUND_S = 5.0
#: Lines that mean the door or a handler met input it did not expect.
FAILURE_MARKS = ("request_handler_failed", "tcp_door_loop_crashed", "Traceback")


@dataclass
class Door:
    server: RemotingServer
    door: TcpDoor
    witness: RawClient
    zmq: RemotingClient


class FailureLog(logging.Handler):
    """Keeps the records of the remoting loggers that mark a failure."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.failures: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info or any(mark in text for mark in FAILURE_MARKS):
            self.failures.append(text)


@pytest.fixture(scope="module")
def live() -> Iterator[Door]:
    pool = ThreadPoolExecutor(2, thread_name_prefix="fuzz-handler")
    server = RemotingServer("127.0.0.1:0", "tcp-door-fuzz")

    def echo(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return response_to(cmd, ResponseCode.SUCCESS, None, dict(cmd.ext), cmd.body)

    server.register(ECHO, echo)
    server.register(ECHO_POOL, echo, pool)
    server.start()
    door = TcpDoor(server, "127.0.0.1:0", max_frame_size=64 * 1024).start()
    witness = RawClient(door.address)
    zmq = RemotingClient(name="tcp-door-fuzz-witness")
    try:
        yield Door(server, door, witness, zmq)
    finally:
        zmq.close()
        witness.close()
        door.stop(grace_s=0.5)
        server.stop(grace_s=0.5)
        pool.shutdown(wait=False, cancel_futures=True)


ext_values = st.text(max_size=6) | st.integers(-(2**40), 2**40).map(str) | st.sampled_from(["true", "false", ""])
frames = st.builds(
    lambda code, flag, ext, body, serialize_type: (code, flag, ext, body, serialize_type),
    st.sampled_from(CODES),
    st.sampled_from([0, ONEWAY_FLAG, RESPONSE_FLAG, 4, ONEWAY_FLAG | 4, RESPONSE_FLAG | ONEWAY_FLAG]),
    st.dictionaries(st.text(min_size=1, max_size=6), ext_values, max_size=3),
    st.binary(max_size=32),
    st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
)
#: A stream: frames and junk, in order; then the sizes the bytes are cut into (cycled).
streams = st.tuples(st.lists(frames.map(lambda f: ("frame", f)) | st.binary(min_size=1, max_size=24).map(
    lambda b: ("junk", b)), min_size=1, max_size=8), st.lists(st.integers(1, 64), min_size=1, max_size=4))


def witnesses_served(live: Door, n: int) -> None:
    resp, _ = live.witness.call(cmd(ECHO, n, body=b"witness"))
    assert (resp.opaque, resp.body) == (n, b"witness")
    reply = live.zmq.invoke_sync(live.server.address, request(ECHO, body=b"zmq"), int(REPLY_BOUND_S * 1000))
    assert reply.body == b"zmq"
    assert any(t.name == "tcp-door-fuzz-tcp-io" for t in threading.enumerate())


def test_the_live_door_survives_hostile_streams(live: Door, reliability) -> None:
    tally = Tally()
    failures = FailureLog()
    logging.getLogger("rocketmesh.remoting").addHandler(failures)

    @fuzz_settings(150)
    @example(([("junk", b"\xff\xff\xff\xff")], [64]))
    @example(([("frame", (ECHO, 0, {"a": "1"}, b"x", SerializeType.ROCKETMQ)), ("junk", b"\x00\x00\x00\x01")], [1]))
    @example(([("frame", (4242, ONEWAY_FLAG, {}, b"", SerializeType.JSON))] * 3, [5, 3]))
    @given(streams)
    @tally.counted
    def run(stream: tuple[list[tuple[str, object]], list[int]]) -> None:
        items, cuts = stream
        owed: dict[int, tuple[int, bytes, SerializeType]] = {}
        parts = []
        for opaque, (kind, what) in enumerate(items, start=1):
            if kind == "junk":
                assert isinstance(what, bytes)
                parts.append(what)
                continue
            assert isinstance(what, tuple)
            code, flag, ext, body, serialize_type = what
            parts.append(encode(RemotingCommand(code, opaque, flag, None, ext, body), serialize_type))
            if not flag & (RESPONSE_FLAG | ONEWAY_FLAG):
                owed[opaque] = (code, body, serialize_type)
        blob = b"".join(parts)
        clean = all(kind == "frame" for kind, _ in items)
        client = RawClient(live.door.address)
        try:
            pos = i = 0
            try:
                while pos < len(blob):
                    size = cuts[i % len(cuts)]
                    client.sock.sendall(blob[pos:pos + size])
                    pos += size
                    i += 1
            except ConnectionError:
                assert not clean, "the door closed a connection that sent only well-formed frames"
                return
            if clean:
                answered: dict[int, int] = {}
                for _ in range(len(owed)):
                    resp, wire = client.recv(REPLY_BOUND_S)
                    assert resp.opaque in owed and resp.opaque not in answered
                    code, body, serialize_type = owed[resp.opaque]
                    answered[resp.opaque] = resp.code
                    assert resp.flag & RESPONSE_FLAG and wire.serialize_type == serialize_type
                    if code in (ECHO, ECHO_POOL):
                        assert (resp.code, resp.body) == (ResponseCode.SUCCESS, body)
                    else:
                        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and str(code) in (resp.remark or "")
                assert client.nothing_within(0.05)  # nothing more: oneway requests and responses get no answer
            else:
                try:
                    client.sock.shutdown(socket.SHUT_WR)  # the door sees the stream end, whatever it made of it
                except OSError:
                    pass  # the door already closed (and reset) the connection
                while True:
                    try:
                        resp, _ = client.recv(REPLY_BOUND_S)
                    except ConnectionError:
                        break  # the door closed the connection
                    assert resp.flag & RESPONSE_FLAG
        finally:
            client.close()
        witnesses_served(live, tally.inputs)

    try:
        run()
    finally:
        logging.getLogger("rocketmesh.remoting").removeHandler(failures)
    assert not failures.failures, failures.failures[:3]
    reliability.fuzz("RocketMQ TCP door: live hostile streams", inputs=tally.inputs,
                     note="frames of any code, flag and ext in JSON and ROCKETMQ, junk, random cuts: owed "
                          "answers exactly once in kind, junk ends only its connection, other clients served")
