"""Closed connections noticed at once over real loopback TCP (and real processes killed): the server's
on_disconnect, the client's failing of requests in flight, and the connection bookkeeping behind them."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout

import pytest

from procs import free_port
from rocketmesh.remoting import RemotingClient, RemotingConnectError, RemotingServer, ResponseCode, request, response_to
from rocketmesh.remoting.transport.connections import ClosedRoute, ConnectionTable

ECHO = 1001
#: Short, so that a test waits little to see that nothing more is reported.
GRACE_MS = 100


class Gone:
    """An on_disconnect callback recording the identities it heard of."""

    def __init__(self) -> None:
        self.identities: list[bytes] = []
        self.cond = threading.Condition()

    def __call__(self, identity: bytes) -> None:
        with self.cond:
            self.identities.append(identity)
            self.cond.notify_all()

    def wait_for(self, identity: bytes, timeout_s: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: identity in self.identities, timeout_s)


@contextlib.contextmanager
def script_process(script: str, *args: str, what: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """Run ``script`` in a Python process of its own; yields the process and the first line it prints (within
    30 s, else the test fails naming ``what``), and kills it afterwards if it still runs."""
    proc = subprocess.Popen([sys.executable, "-P", "-c", script, *args], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 30)[0], f"the {what} process said nothing for 30 s"
        yield proc, proc.stdout.readline().strip()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def gone() -> Gone:
    return Gone()


@pytest.fixture
def server(gone: Gone) -> Iterator[RemotingServer]:
    srv = RemotingServer("127.0.0.1:0", "disconnect-test", disconnect_grace_ms=GRACE_MS)
    srv.register(ECHO, lambda cmd, ctx: response_to(cmd, ResponseCode.SUCCESS, body=ctx.identity))

    def broken(identity: bytes) -> None:
        raise RuntimeError("a failing callback must not stop the others")

    srv.on_disconnect(broken)
    srv.on_disconnect(gone)
    srv.start()
    yield srv
    srv.stop(grace_s=0.5)


def test_a_client_is_reported_once_its_last_connection_closed(server: RemotingServer, gone: Gone) -> None:
    client = RemotingClient(identity="leaver")
    # Three connections: this thread's sync socket, another thread's, and the I/O thread's (async calls).
    assert client.invoke_sync(server.address, request(ECHO)).body == b"leaver"
    other = threading.Thread(target=lambda: client.invoke_sync(server.address, request(ECHO)))
    other.start()
    other.join(5)
    gc.collect()  # the ended thread's socket closes with its thread-local table
    assert client.invoke_async(server.address, request(ECHO)).result(3).body == b"leaver"
    # The other thread ended and its socket closed; the client still has connections: not gone.
    assert not gone.wait_for(b"leaver", 1.0)
    client.close()
    assert gone.wait_for(b"leaver", 5)
    assert not gone.wait_for(b"never-connected", 0.5)
    assert gone.identities == [b"leaver"]


def test_a_killed_client_process_is_reported(server: RemotingServer, gone: Gone) -> None:
    script = (
        "import sys, time\n"
        "from rocketmesh.remoting import RemotingClient, request\n"
        "c = RemotingClient(identity='doomed')\n"
        f"c.invoke_sync(sys.argv[1], request({ECHO}))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    with script_process(script, server.address, what="client") as (proc, line):
        assert line == "ready"
        assert not gone.wait_for(b"doomed", 0.5)
        proc.kill()  # SIGKILL: the kernel closes its connections
        proc.wait(5)
        assert gone.wait_for(b"doomed", 5)
    # The server serves on.
    with RemotingClient(identity="after") as c:
        assert c.invoke_sync(server.address, request(ECHO)).body == b"after"


# --- the bookkeeping: descriptors are reused, and monitor events and probes come by different roads ---


def test_a_client_goes_with_its_last_connection() -> None:
    table = ConnectionTable()
    table.accepted(7)
    assert table.opened(b"c", b"c", 7) == []
    table.accepted(8)
    assert table.opened(b"c\x001", b"c", 8) == []
    assert table.disconnected(8) == ClosedRoute(b"c\x001", b"c", last=False)
    assert table.connected(b"c")
    assert table.disconnected(7) == ClosedRoute(b"c", b"c", last=True)
    assert not table.connected(b"c") and len(table) == 0
    assert table.disconnected(7) is None  # already gone
    table.accepted(5)
    assert table.disconnected(5) is None  # never announced (a peer that sends no probe)


def test_a_probe_read_after_its_connection_closed_is_not_tracked() -> None:
    table = ConnectionTable()
    table.accepted(7)
    table.disconnected(7)
    assert table.opened(b"a", b"a", 7) == []
    assert not table.connected(b"a") and len(table) == 0


def test_a_reused_descriptor_belongs_to_its_new_connection() -> None:
    table = ConnectionTable()
    table.accepted(7)
    table.opened(b"a", b"a", 7)
    assert table.disconnected(7) == ClosedRoute(b"a", b"a", last=True)
    table.accepted(7)
    table.opened(b"b", b"b", 7)
    assert table.connected(b"b") and not table.connected(b"a")
    assert table.disconnected(7) == ClosedRoute(b"b", b"b", last=True)


def test_a_route_that_redials_keeps_its_client() -> None:
    table = ConnectionTable()
    table.accepted(7)
    table.opened(b"a", b"a", 7)
    table.accepted(9)
    assert table.opened(b"a", b"a", 9) == []  # the old connection is half-open, its close still to come
    assert table.disconnected(7) is None
    assert table.connected(b"a")
    assert table.disconnected(9) == ClosedRoute(b"a", b"a", last=True)


HOLD = 1002
SLOW = 1003
#: A server in a process of its own (to be killed) that answers ECHO at once, SLOW after half a second, and
#: holds HOLD for two minutes; it prints its address. Its argument: the address to listen on.
HOLDING_SERVER = (
    "import sys, time\n"
    "from rocketmesh.remoting import RemotingServer, ResponseCode, response_to\n"
    "s = RemotingServer(sys.argv[1], 'doomed-server')\n"
    f"s.register({ECHO}, lambda cmd, ctx: response_to(cmd, ResponseCode.SUCCESS))\n"
    f"s.register({SLOW}, lambda cmd, ctx: time.sleep(0.5) or response_to(cmd, ResponseCode.SUCCESS))\n"
    f"s.register({HOLD}, lambda cmd, ctx: time.sleep(120))\n"
    "s.start()\n"
    "print(s.address, flush=True)\n"
    "time.sleep(120)\n"
)


def test_requests_in_flight_to_a_killed_server_fail_at_once_not_at_their_timeout() -> None:
    """A long hold (a pull) waiting on a server whose process dies fails when its connection closes."""
    with script_process(HOLDING_SERVER, "127.0.0.1:0", what="server") as (proc, addr), \
            RemotingClient(name="held") as client:
        assert client.invoke_async(addr, request(ECHO), 5000).result(5).code == ResponseCode.SUCCESS
        held = client.invoke_async(addr, request(HOLD), 60_000)
        with pytest.raises(FutureTimeout):
            held.result(0.5)  # held, as a long-polling pull is
        proc.kill()
        proc.wait(5)
        with pytest.raises(RemotingConnectError, match="closed before the response"):
            held.result(10)


def test_a_sync_call_to_a_killed_server_fails_at_once_not_at_its_timeout() -> None:
    """invoke_sync waits on its thread's own socket, not the I/O thread's: that connection closing fails the
    call too (a producer's sync send then retries another broker at once, not after sendMsgTimeout)."""
    with script_process(HOLDING_SERVER, "127.0.0.1:0", what="server") as (proc, addr), \
            RemotingClient(name="held-sync") as client:
        caller = ThreadPoolExecutor(1)  # one thread: both calls on the same socket
        assert caller.submit(client.invoke_sync, addr, request(ECHO), 5000).result(10).code == ResponseCode.SUCCESS
        held = caller.submit(client.invoke_sync, addr, request(HOLD), 60_000)
        with pytest.raises(FutureTimeout):
            held.result(0.5)
        proc.kill()
        proc.wait(5)
        with pytest.raises(RemotingConnectError, match="closed before the response"):
            held.result(10)
        caller.shutdown(wait=False)


def test_a_connection_that_closed_between_sync_calls_does_not_fail_the_next() -> None:
    """The server restarts on its port between two calls of one thread: the second (answered after half a
    second, so that it waits on its socket) gets its answer; the close before it is not its business."""
    port = free_port()
    caller = ThreadPoolExecutor(1)
    with RemotingClient(name="between") as client:
        with script_process(HOLDING_SERVER, f"127.0.0.1:{port}", what="server") as (proc, addr):
            assert caller.submit(client.invoke_sync, addr, request(ECHO), 5000).result(10).code == ResponseCode.SUCCESS
            proc.kill()
            proc.wait(5)
        with script_process(HOLDING_SERVER, f"127.0.0.1:{port}", what="restarted server") as (_, addr):
            answer = caller.submit(client.invoke_sync, addr, request(SLOW), 10_000).result(15)
            assert answer.code == ResponseCode.SUCCESS
    caller.shutdown(wait=False)


def test_an_answer_read_after_its_server_died_never_aborts_the_reader() -> None:
    """libzmq aborts the process when a ZMQ_IMMEDIATE socket (every client socket) learns of a closed connection
    between the frames of a multipart message. It looks for such news on every 100th read, so a client that had
    read 49 two-frame answers died reading the second frame of the 50th (``Assertion failed: !_more``) when the
    server was killed just after sending it. A command is one frame, read whole or not at all: the reader here
    (a process of its own, so that an abort fails this test and not the test run) gets the answer."""
    server_script = (
        "import os, threading, time\n"
        "from rocketmesh.remoting import RemotingServer, ResponseCode, response_to\n"
        "s = RemotingServer('127.0.0.1:0', 'dies-after-answering')\n"
        "n = [0]\n"
        "def echo(cmd, ctx):\n"
        "    n[0] += 1\n"
        "    if n[0] == 50:  # the last answer leaves first, then the process dies\n"
        "        threading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\n"
        "    return response_to(cmd, ResponseCode.SUCCESS, body=b'x' * 10)\n"
        f"s.register({ECHO}, echo)\n"
        "s.start()\n"
        "print(s.address, flush=True)\n"
        "time.sleep(60)\n"
    )
    # The reader does what RemotingClient's sockets do: ZMQ_IMMEDIATE, and whole messages read with recv_frames.
    reader_script = (
        "import sys, time, zmq\n"
        "from rocketmesh.remoting import decode, request\n"
        "from rocketmesh.remoting.protocol.frames import recv_frames, send_frames\n"
        "sock = zmq.Context.instance().socket(zmq.DEALER)\n"
        "sock.setsockopt(zmq.IMMEDIATE, 1)\n"
        "sock.setsockopt(zmq.LINGER, 0)\n"
        "sock.connect('tcp://' + sys.argv[1])\n"
        "poller = zmq.Poller()\n"
        "poller.register(sock, zmq.POLLIN)\n"
        "answers = []\n"
        "for i in range(50):\n"
        "    deadline = time.monotonic() + 10\n"
        "    while True:\n"
        "        try:\n"
        f"            send_frames(sock, request({ECHO}).encode())\n"
        "            break\n"
        "        except zmq.Again:  # not connected yet\n"
        "            assert time.monotonic() < deadline, 'no connection'\n"
        "            time.sleep(0.01)\n"
        "    if i < 49:\n"
        "        assert poller.poll(10_000), 'no answer'\n"
        "    else:\n"
        "        time.sleep(1.5)  # the answer and the closed connection both wait, unread\n"
        "    answers.append(decode(recv_frames(sock)).code)\n"
        "print(len(answers), set(answers), flush=True)\n"
    )
    with script_process(server_script, what="server") as (server, addr):
        reader = subprocess.run([sys.executable, "-P", "-c", reader_script, addr], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, timeout=60)
        assert server.wait(10) == 0, "the server process was to exit once it had answered 50 requests"
        assert reader.returncode == 0, f"the reader died ({reader.returncode}): {reader.stderr[-2000:]}"
        assert reader.stdout.split() == ["50", "{0}"], reader.stdout


def test_an_awaited_call_to_a_killed_server_fails_at_once_not_at_its_timeout() -> None:
    """invoke_from_loop waits on the loop's own socket: the client's connection closing fails it too."""

    async def main(proc, addr: str, client: RemotingClient) -> None:
        assert (await client.invoke_from_loop(addr, request(ECHO), 5000)).code == ResponseCode.SUCCESS
        held = asyncio.create_task(client.invoke_from_loop(addr, request(HOLD), 60_000))
        await asyncio.sleep(0.5)
        assert not held.done()  # held, as a long-polling pull is
        proc.kill()
        await asyncio.to_thread(proc.wait, 5)
        start = time.monotonic()
        with pytest.raises(RemotingConnectError, match="closed before the response"):
            await asyncio.wait_for(held, 10)
        assert time.monotonic() - start < 5

    with script_process(HOLDING_SERVER, "127.0.0.1:0", what="server") as (proc, addr), \
            RemotingClient(name="held-loop") as client:
        asyncio.run(main(proc, addr, client))


def test_an_awaited_call_made_while_its_server_restarts_is_answered_once_it_is_back() -> None:
    """A request that could not leave while its server was down is sent when the server is back, and its
    answer is awaited: the connection that closed before it left is not its business."""
    port = free_port()
    addr = f"127.0.0.1:{port}"

    def serve() -> RemotingServer:
        srv = RemotingServer(addr, "restarting")
        srv.register(ECHO, lambda cmd, ctx: response_to(cmd, ResponseCode.SUCCESS, body=cmd.body))
        return srv.start()

    async def main(client: RemotingClient) -> None:
        first = serve()
        assert (await client.invoke_from_loop(addr, request(ECHO, body=b"before"), 3000)).body == b"before"
        first.stop()
        await asyncio.sleep(0.5)  # the client has seen its connection close
        call = asyncio.create_task(client.invoke_from_loop(addr, request(ECHO, body=b"after"), 10_000))
        await asyncio.sleep(0.5)
        second = serve()
        try:
            assert (await asyncio.wait_for(call, 10)).body == b"after"
        finally:
            second.stop()

    with RemotingClient(name="restart-loop") as client:
        asyncio.run(main(client))
