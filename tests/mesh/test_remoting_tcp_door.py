"""The RocketMQ TCP door of a RemotingServer, over real loopback sockets: a client written here speaks RocketMQ's
remoting frames (rocketmq_wire) and meets the same handlers a ZeroMQ client of the same server meets."""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocketmesh.remoting import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingClient,
    RemotingCommand,
    RemotingSendRequestError,
    RemotingServer,
    RemotingTimeoutError,
    RequestContext,
    RequestError,
    ResponseCode,
    request,
    response_to,
)
from rocketmesh.remoting.protocol.headers import HeaderError
from rocketmesh.remoting.protocol.rocketmq_wire import SerializeType, encode
from rocketmesh.remoting.transport.tcp_door import TcpDoor
from tcpkit import RawClient, cmd

ECHO = 1001
ECHO_POOL = 1002
ONEWAY = 1003
BIG = 1004
REFUSE = 1005
BAD_HEADER = 1006
BOOM = 1007
SLOW = 1008
NEVER = 1009

MAX_FRAME = 1024 * 1024
MAX_WRITE_BUFFER = 256 * 1024
BOTH = [SerializeType.JSON, SerializeType.ROCKETMQ]


class Recorder:
    """What the handlers saw, and who the server heard was gone."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.oneways: list[RemotingCommand] = []
        self.gone: list[bytes] = []
        self.release_slow = threading.Event()

    def saw_oneway(self, cmd: RemotingCommand) -> None:
        with self.cond:
            self.oneways.append(cmd)
            self.cond.notify_all()

    def disconnected(self, identity: bytes) -> None:
        with self.cond:
            self.gone.append(identity)
            self.cond.notify_all()

    def wait_gone(self, identity: bytes, timeout_s: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: identity in self.gone, timeout_s)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def server(recorder: Recorder, pool: ThreadPoolExecutor) -> Iterator[RemotingServer]:
    srv = RemotingServer("127.0.0.1:0", "tcp-door-test", disconnect_grace_ms=100)

    def echo(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        # The remark says which thread ran it and who asked.
        return response_to(cmd, ResponseCode.SUCCESS, f"{threading.current_thread().name}|{ctx.identity.decode()}",
                           dict(cmd.ext), cmd.body)

    def oneway(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        recorder.saw_oneway(cmd)
        return response_to(cmd, ResponseCode.SUCCESS)  # must not be sent: the request is oneway

    def big(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return response_to(cmd, ResponseCode.SUCCESS, body=b"x" * int(cmd.ext["size"]))

    def refuse(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise RequestError(ResponseCode.NO_PERMISSION, "not for you")

    def bad_header(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise HeaderError("the custom field <queueId> must be an integer")

    def boom(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise ValueError("the handler broke")

    def slow(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        recorder.release_slow.wait(5)
        return response_to(cmd, ResponseCode.SUCCESS, body=b"slow done")

    srv.register(ECHO, echo)
    srv.register(ECHO_POOL, echo, pool)
    srv.register(ONEWAY, oneway)
    srv.register(BIG, big)
    srv.register(REFUSE, refuse)
    srv.register(BAD_HEADER, bad_header, pool)
    srv.register(BOOM, boom, pool)
    srv.register(SLOW, slow, pool, queue_capacity=1)
    srv.register(NEVER, lambda cmd, ctx: None)
    srv.on_disconnect(recorder.disconnected)
    srv.start()
    yield srv
    recorder.release_slow.set()
    srv.stop(grace_s=0.5)


@pytest.fixture
def door(server: RemotingServer) -> Iterator[TcpDoor]:
    d = TcpDoor(server, "127.0.0.1:0", max_frame_size=MAX_FRAME, max_write_buffer=MAX_WRITE_BUFFER).start()
    yield d
    d.stop(grace_s=0.5)


@pytest.fixture
def client(door: TcpDoor) -> Iterator[RawClient]:
    c = RawClient(door.address)
    yield c
    c.close()


def zmq_still_served(server: RemotingServer, remoting_client: RemotingClient) -> bool:
    resp = remoting_client.invoke_sync(server.address, request(ECHO, body=b"zmq"), 3000)
    return resp.code == ResponseCode.SUCCESS and resp.body == b"zmq"


@pytest.mark.parametrize("serialize_type", BOTH, ids=["json", "rocketmq"])
@pytest.mark.parametrize("code", [ECHO, ECHO_POOL], ids=["inline", "executor"])
def test_a_request_is_answered_in_kind_with_its_opaque(client: RawClient, serialize_type: SerializeType,
                                                       code: int) -> None:
    resp, wire = client.call(cmd(code, 77, {"topic": "T", "queueId": "3"}, b"payload"), serialize_type)
    assert wire.serialize_type == serialize_type
    assert (resp.code, resp.opaque, resp.ext, resp.body) == (ResponseCode.SUCCESS, 77, {"topic": "T", "queueId": "3"},
                                                             b"payload")
    assert resp.flag & RESPONSE_FLAG and not resp.flag & ONEWAY_FLAG
    thread, identity = (resp.remark or "").split("|")
    assert ("test-handler" in thread) == (code == ECHO_POOL)
    assert identity == client.identity.decode()


def test_both_doors_reach_the_same_handlers(server: RemotingServer, client: RawClient,
                                            remoting_client: RemotingClient) -> None:
    over_tcp, _ = client.call(cmd(REFUSE, 1))
    over_zmq = remoting_client.invoke_sync(server.address, request(REFUSE), 3000)
    assert (over_tcp.code, over_tcp.remark) == (over_zmq.code, over_zmq.remark) == (ResponseCode.NO_PERMISSION,
                                                                                    "not for you")


def test_a_frame_arriving_in_pieces_is_answered(client: RawClient) -> None:
    frame = encode(cmd(ECHO, 5, body=b"in pieces"), SerializeType.ROCKETMQ)
    for piece in (frame[:3], frame[3:9], frame[9:]):
        client.sock.sendall(piece)
        time.sleep(0.02)
    resp, _ = client.recv()
    assert (resp.opaque, resp.body) == (5, b"in pieces")


def test_pipelined_requests_on_many_connections_are_each_answered_once(door: TcpDoor) -> None:
    def one_connection(n: int) -> list[tuple[int, bytes]]:
        c = RawClient(door.address)
        try:
            serialize_type = BOTH[n % 2]
            frames = [encode(cmd(ECHO if i % 2 else ECHO_POOL, i, body=b"%d-%d" % (n, i)), serialize_type)
                      for i in range(1, 301)]
            c.sock.sendall(b"".join(frames))  # all at once, before reading any answer
            return sorted((resp.opaque, resp.body) for resp, _ in (c.recv() for _ in range(300)))
        finally:
            c.close()

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(one_connection, range(4)))
    for n, answers in enumerate(results):
        assert answers == [(i, b"%d-%d" % (n, i)) for i in range(1, 301)]


@pytest.mark.parametrize("serialize_type", BOTH, ids=["json", "rocketmq"])
def test_oneway_gets_no_answer(client: RawClient, recorder: Recorder, serialize_type: SerializeType) -> None:
    client.send(cmd(ONEWAY, 5, {"k": "v"}, flag=ONEWAY_FLAG), serialize_type)
    resp, _ = client.call(cmd(ECHO, 6, body=b"after"), serialize_type)
    # Inline handlers answer in order: an answer to the oneway would have come first.
    assert (resp.opaque, resp.body) == (6, b"after")
    assert [(c.opaque, c.ext) for c in recorder.oneways] == [(5, {"k": "v"})]
    assert client.nothing_within(0.2)


@pytest.mark.parametrize("serialize_type", BOTH, ids=["json", "rocketmq"])
def test_an_unknown_code_is_not_supported(client: RawClient, serialize_type: SerializeType) -> None:
    resp, wire = client.call(cmd(4242, 9), serialize_type)
    assert (resp.code, resp.opaque, wire.serialize_type) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 9,
                                                             serialize_type)
    assert "4242" in (resp.remark or "")


def test_handler_failures_are_answered(client: RawClient) -> None:
    resp, _ = client.call(cmd(BAD_HEADER, 1))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "<queueId>" in (resp.remark or "")
    resp, _ = client.call(cmd(BOOM, 2))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "the handler broke" in (resp.remark or "")
    assert client.call(cmd(ECHO, 3, body=b"alive"))[0].body == b"alive"


def test_the_request_hook_and_queue_bound_apply_to_the_door(server: RemotingServer, client: RawClient,
                                                            recorder: Recorder) -> None:
    def hook(cmd: RemotingCommand, ctx: RequestContext) -> None:
        if cmd.ext.get("AccessKey") == "stranger":
            raise RequestError(ResponseCode.NO_PERMISSION, "who are you")

    server.request_hook = hook
    resp, _ = client.call(cmd(ECHO, 1, {"AccessKey": "stranger"}))
    assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "who are you")
    # SLOW's queue holds one: the second waits for nobody, it is told the server is busy.
    client.send(cmd(SLOW, 2))
    busy, _ = client.call(cmd(SLOW, 3))
    assert (busy.opaque, busy.code) == (3, ResponseCode.SYSTEM_BUSY)
    recorder.release_slow.set()
    done, _ = client.recv()
    assert (done.opaque, done.body) == (2, b"slow done")


BAD_INPUT = {
    "garbage": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "negative-length": struct.pack(">i", -5) + b"\x00" * 8,
    "huge-length": struct.pack(">iI", 64 * 1024 * 1024, 10) + b"{}",
    "unknown-serialize-type": struct.pack(">iI", 10, 7 << 24 | 2) + b"{}" + b"\x00" * 4,
    "header-not-json": struct.pack(">iI", 14, 10) + b"not json!!",
    "header-not-rocketmq": struct.pack(">iI", 7, 1 << 24 | 3) + b"\x00\x01\x02",
}


@pytest.mark.parametrize("bad", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_closes_that_connection_only(server: RemotingServer, door: TcpDoor, client: RawClient,
                                               remoting_client: RemotingClient, recorder: Recorder, bad: bytes,
                                               caplog: pytest.LogCaptureFixture) -> None:
    assert client.call(cmd(ECHO, 1, body=b"before"))[0].body == b"before"
    bad_client = RawClient(door.address)
    try:
        peer = bad_client.identity.decode().removeprefix("tcp:")
        with caplog.at_level(logging.WARNING, logger="rocketmesh.remoting"):
            bad_client.sock.sendall(bad)
            assert bad_client.closed_within(3)
            assert recorder.wait_gone(bad_client.identity, 3)
        lines = [r.getMessage() for r in caplog.records if f"peer={peer} " in r.getMessage()]
        assert len(lines) == 1 and "tcp_bad_frame" in lines[0]
    finally:
        bad_client.close()
    assert client.call(cmd(ECHO, 2, body=b"after"))[0].body == b"after"
    assert zmq_still_served(server, remoting_client)
    assert client.identity not in recorder.gone


def test_bad_input_in_the_middle_of_a_stream_is_answered_no_further(door: TcpDoor, client: RawClient) -> None:
    assert client.call(cmd(ECHO, 1))[0].opaque == 1
    client.sock.sendall(encode(cmd(ECHO, 2)) + BAD_INPUT["negative-length"] + encode(cmd(ECHO, 3)))
    assert client.closed_within(3)


def test_a_closed_connection_is_reported_at_once(door: TcpDoor, recorder: Recorder) -> None:
    c = RawClient(door.address)
    resp, _ = c.call(cmd(ECHO, 1))
    identity = c.identity
    assert (resp.remark or "").endswith("|" + identity.decode())
    assert not recorder.wait_gone(identity, 0.3)
    c.close()
    started = time.monotonic()
    assert recorder.wait_gone(identity, 2)
    assert time.monotonic() - started < 1.0
    assert recorder.gone.count(identity) == 1


def test_a_reader_that_falls_behind_is_closed_and_nobody_else_waits(server: RemotingServer, door: TcpDoor,
                                                                   client: RawClient, remoting_client: RemotingClient,
                                                                   recorder: Recorder) -> None:
    slow = RawClient(door.address, rcvbuf=4096)
    try:
        # 16 MiB of answers asked for and never read: far past the kernel's buffers and the door's bound.
        asks = b"".join(encode(cmd(BIG, i, {"size": str(64 * 1024)})) for i in range(1, 257))
        slow.sock.sendall(asks)
        for i in range(1, 20):  # the others are served all along
            assert client.call(cmd(ECHO, i, body=b"%d" % i))[0].body == b"%d" % i
        assert recorder.wait_gone(slow.identity, 5)
    finally:
        slow.close()
    assert client.call(cmd(ECHO, 99, body=b"still"))[0].body == b"still"
    assert zmq_still_served(server, remoting_client)


@pytest.mark.parametrize("serialize_type", BOTH, ids=["json", "rocketmq"])
def test_the_server_calls_a_tcp_client_back(server: RemotingServer, client: RawClient,
                                            serialize_type: SerializeType) -> None:
    # The client's identity as the service sees it (what the broker keeps for its consumers and producers).
    identity = (client.call(cmd(ECHO, 1), serialize_type)[0].remark or "").split("|")[1].encode()
    assert identity == client.identity

    fut = server.invoke_client(identity, request(39, {"tranStateTableOffset": 7, "msgId": "AB"}), 3000)
    asked, wire = client.recv()
    assert wire.serialize_type == serialize_type  # the client's own serialization
    assert asked.code == 39 and not asked.flag & (RESPONSE_FLAG | ONEWAY_FLAG)
    assert asked.ext == {"tranStateTableOffset": "7", "msgId": "AB"}
    client.send(RemotingCommand(ResponseCode.SUCCESS, asked.opaque, RESPONSE_FLAG, "committed", {}, b"state"),
                serialize_type)
    resp = fut.result(5)
    assert (resp.code, resp.remark, resp.body) == (ResponseCode.SUCCESS, "committed", b"state")

    server.push(identity, request(40, {"consumerGroup": "g"}))
    pushed, _ = client.recv()
    assert pushed.code == 40 and pushed.flag & ONEWAY_FLAG and pushed.ext == {"consumerGroup": "g"}
    # The door still serves the connection's own requests between its calls.
    assert client.call(cmd(ECHO, 2, body=b"mine"), serialize_type)[0].body == b"mine"


def test_calls_to_a_tcp_client_fail_in_bounded_time(server: RemotingServer, door: TcpDoor,
                                                   client: RawClient) -> None:
    client.call(cmd(ECHO, 1))
    # Not answered: a timeout, within its bound.
    started = time.monotonic()
    with pytest.raises(RemotingTimeoutError):
        server.invoke_client(client.identity, request(39), 200).result(3)
    assert time.monotonic() - started < 1.5
    assert client.recv()[0].code == 39  # it was asked, all the same
    # Only the peer asked may answer: a forged answer from another connection settles nothing.
    fut = server.invoke_client(client.identity, request(39), 3000)
    asked, _ = client.recv()
    other = RawClient(door.address)
    try:
        other.send(RemotingCommand(ResponseCode.SUCCESS, asked.opaque, RESPONSE_FLAG, None, {}, b"forged"))
        assert other.nothing_within(0.2)
        assert not fut.done()
    finally:
        other.close()
    # The connection closes before its answer: the call fails at once, not at its timeout.
    identity = client.identity
    client.close()
    with pytest.raises(RemotingSendRequestError):
        fut.result(1.5)
    # Gone: a call to it fails at once.
    with pytest.raises(RemotingSendRequestError):
        server.invoke_client(identity, request(39), 3000).result(1)


def test_stop_answers_what_is_owed_closes_everything_and_joins(server: RemotingServer, recorder: Recorder,
                                                               remoting_client: RemotingClient) -> None:
    door = TcpDoor(server, "127.0.0.1:0").start()
    address = door.address
    clients = [RawClient(address) for _ in range(3)]
    try:
        for i, c in enumerate(clients):
            assert c.call(cmd(ECHO, i))[0].opaque == i
        clients[0].send(cmd(SLOW, 7))  # on an executor while the door stops
        time.sleep(0.1)
        threading.Timer(0.2, recorder.release_slow.set).start()
        started = time.monotonic()
        door.stop(grace_s=2.0)
        assert time.monotonic() - started < 2.0
        assert not [t for t in threading.enumerate() if t.name == "tcp-door-test-tcp-io"]
        # The answer owed was written before the connection closed.
        resp, _ = clients[0].recv()
        assert (resp.opaque, resp.body) == (7, b"slow done")
        for c in clients:
            assert c.closed_within(2)
            assert recorder.wait_gone(c.identity, 2)
        with pytest.raises(ConnectionRefusedError):
            RawClient(address)
        door.stop()  # twice is harmless
    finally:
        for c in clients:
            c.close()
    # The server's own door serves on.
    assert zmq_still_served(server, remoting_client)


def test_a_door_that_cannot_bind_says_so(server: RemotingServer, door: TcpDoor) -> None:
    from rocketmesh.remoting import RemotingError

    with pytest.raises(RemotingError, match="cannot bind"):
        TcpDoor(server, door.address).start()
