"""RemotingServer + RemotingClient over real loopback TCP, in this process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

import orjson
import pytest
import zmq

from rocketmesh.remoting import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    RemotingClient,
    RemotingCommand,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingServer,
    RemotingTimeoutError,
    RequestContext,
    RequestError,
    ResponseCode,
    SocketOptions,
    decode,
    pack_frame,
    request,
    response_to,
)

ECHO = 1001
SLOW = 1002
NEVER = 1003
LATER = 1004
BOOM = 1005
REFUSE = 1006
REMEMBER = 1007
ONEWAY = 1008
DELAYED = 1009
ARRIVAL = 1010


class Recorder:
    """What the handlers saw."""

    def __init__(self) -> None:
        self.oneways: list[RemotingCommand] = []
        self.oneway_seen = threading.Event()
        self.identities: list[bytes] = []
        self.release_slow = threading.Event()
        self.waited_ms: list[float] = []
        self.delayed_calls = 0
        #: Bodies of ARRIVAL requests, in the order the server read them.
        self.arrived: list[bytes] = []


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture(params=[0, 200], ids=["sleeps", "busy-polls"])
def server(request: pytest.FixtureRequest, recorder: Recorder, pool: ThreadPoolExecutor) -> Iterator[RemotingServer]:
    """Every test runs against a server whose I/O thread sleeps between requests and one that busy-polls."""
    srv = RemotingServer("127.0.0.1:0", "test", options=SocketOptions(max_message_size=64 * 1024),
                         busy_poll_us=request.param)

    def echo(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return response_to(cmd, ResponseCode.SUCCESS, "echo", dict(cmd.ext), cmd.body)

    def slow(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        recorder.waited_ms.append(ctx.waited_ms)
        recorder.release_slow.wait(5)
        return response_to(cmd, ResponseCode.SUCCESS)

    def later(cmd: RemotingCommand, ctx: RequestContext) -> None:
        delay = float(cmd.ext.get("delay", 0.05))
        threading.Timer(delay, lambda: ctx.respond(response_to(cmd, ResponseCode.SUCCESS, body=b"later"))).start()
        return None

    def delayed(cmd: RemotingCommand, ctx: RequestContext) -> None:
        # The first call is answered after 300 ms, later ones at once.
        recorder.delayed_calls += 1
        delay = 0.3 if recorder.delayed_calls == 1 else 0.0
        threading.Timer(delay, lambda: ctx.respond(response_to(cmd, ResponseCode.SUCCESS, body=cmd.body))).start()
        return None

    def boom(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise ValueError("the handler broke")

    def refuse(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        raise RequestError(ResponseCode.NO_PERMISSION, "not for you")

    def remember(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        recorder.identities.append(ctx.identity)
        return response_to(cmd, ResponseCode.SUCCESS, ctx.remote)

    def oneway(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        recorder.oneways.append(cmd)
        recorder.oneway_seen.set()
        # Returning a response to a oneway request must send nothing.
        return response_to(cmd, ResponseCode.SUCCESS)

    srv.register(ECHO, echo)
    srv.register(SLOW, slow, pool, queue_capacity=2)
    srv.register(NEVER, lambda cmd, ctx: None)
    srv.register(LATER, later)
    srv.register(DELAYED, delayed)
    srv.register(BOOM, boom, pool)
    srv.register(REFUSE, refuse)
    srv.register(REMEMBER, remember)
    srv.register(ONEWAY, oneway)
    srv.register(ARRIVAL, lambda cmd, ctx: recorder.arrived.append(cmd.body) or response_to(cmd, ResponseCode.SUCCESS))
    srv.start()
    yield srv
    recorder.release_slow.set()
    srv.stop(grace_s=0.5)


@pytest.fixture
def client() -> Iterator[RemotingClient]:
    c = RemotingClient(name="rpc-test")
    yield c
    c.close()


def test_sync_round_trip(server: RemotingServer, client: RemotingClient) -> None:
    resp = client.invoke_sync(server.address, request(ECHO, {"topic": "T", "n": 3}, b"payload"), 2000)
    assert resp.code == ResponseCode.SUCCESS and resp.is_response
    assert (resp.remark, resp.ext, resp.body) == ("echo", {"topic": "T", "n": 3}, b"payload")


def test_sync_calls_from_many_threads(server: RemotingServer, client: RemotingClient) -> None:
    def worker(n: int) -> list[bytes]:
        return [client.invoke_sync(server.address, request(ECHO, body=b"%d-%d" % (n, i))).body for i in range(50)]

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(worker, range(4)))
    assert results == [[b"%d-%d" % (n, i) for i in range(50)] for n in range(4)]


def test_pipelined_async_responses_match_their_requests(server: RemotingServer, client: RemotingClient) -> None:
    futures = [client.invoke_async(server.address, request(ECHO, body=str(i).encode()), 5000) for i in range(2000)]
    done, not_done = wait(futures, timeout=20)
    assert not not_done
    assert [f.result().body for f in futures] == [str(i).encode() for i in range(2000)]


def test_async_callback_runs_off_the_io_thread(server: RemotingServer, client: RemotingClient) -> None:
    seen: Future[tuple[str, bytes]] = Future()

    def callback(fut: Future[RemotingCommand]) -> None:
        # A callback may block, even call invoke_sync.
        again = client.invoke_sync(server.address, request(ECHO, body=b"nested"), 2000)
        seen.set_result((threading.current_thread().name, fut.result().body + again.body))

    client.invoke_async(server.address, request(ECHO, body=b"first-"), 2000, callback=callback)
    thread_name, body = seen.result(5)
    assert body == b"first-nested"
    assert "remoting-io" not in thread_name


def test_callback_invocation_gets_each_answer_or_error_once(server: RemotingServer, client: RemotingClient) -> None:
    got: list[tuple[bytes | None, type | None]] = []
    done = threading.Event()

    def on_answer(resp: RemotingCommand | None, error: BaseException | None) -> None:
        got.append((resp.body if resp is not None else None, type(error) if error is not None else None))
        if len(got) == 3:
            done.set()

    def boom(resp: RemotingCommand | None, error: BaseException | None) -> None:
        raise RuntimeError("a broken callback")

    client.invoke_with_callback(server.address, request(ECHO, body=b"one"), 2000, on_answer)
    client.invoke_with_callback(server.address, request(ECHO, body=b"x"), 2000, boom)  # logged, nothing more
    client.invoke_with_callback(server.address, request(NEVER), 200, on_answer)
    client.invoke_with_callback(server.address, request(ECHO, body=b"two"), 2000, on_answer)
    assert done.wait(5)
    time.sleep(0.3)
    assert sorted(got, key=repr) == sorted([(b"one", None), (b"two", None), (None, RemotingTimeoutError)], key=repr)
    assert client.invoke_sync(server.address, request(ECHO, body=b"still"), 2000).body == b"still"
    assert len(client._pending) == 0


def test_a_request_made_on_the_io_thread_goes_after_those_handed_over_before(
        server: RemotingServer, client: RemotingClient, recorder: Recorder) -> None:
    """A callback (on the I/O thread) that sends leaves the requests other threads handed over earlier in front
    of its own: one sender's async requests keep their order whichever thread makes them."""
    done = threading.Event()

    def on_first(resp: RemotingCommand | None, error: BaseException | None) -> None:
        # On the I/O thread: another thread hands over "second" (it waits in the mailbox, as this thread is
        # busy here), then this callback sends "third" itself.
        other = threading.Thread(target=client.invoke_with_callback,
                                 args=(server.address, request(ARRIVAL, body=b"second"), 2000, lambda r, e: None))
        other.start()
        other.join()
        client.invoke_with_callback(server.address, request(ARRIVAL, body=b"third"), 2000,
                                    lambda r, e: done.set())

    client.invoke_with_callback(server.address, request(ARRIVAL, body=b"first"), 2000, on_first)
    assert done.wait(5)
    assert recorder.arrived == [b"first", b"second", b"third"]


def test_oneway_reaches_handler_and_gets_no_response(
    server: RemotingServer, client: RemotingClient, recorder: Recorder
) -> None:
    client.invoke_oneway(server.address, request(ONEWAY, {"k": "v"}))
    assert recorder.oneway_seen.wait(5)
    assert recorder.oneways[0].is_oneway and recorder.oneways[0].ext == {"k": "v"}
    # A response would be dropped by the client anyway; check none was owed.
    assert len(client._pending) == 0
    assert client.invoke_sync(server.address, request(ECHO, body=b"after")).body == b"after"


def test_sync_timeout_when_server_never_answers(server: RemotingServer, client: RemotingClient) -> None:
    start = time.monotonic()
    with pytest.raises(RemotingTimeoutError):
        client.invoke_sync(server.address, request(NEVER), 200)
    assert 0.15 < time.monotonic() - start < 2.0


def test_async_timeout_when_server_never_answers(server: RemotingServer, client: RemotingClient) -> None:
    start = time.monotonic()
    fut = client.invoke_async(server.address, request(NEVER), 200)
    with pytest.raises(RemotingTimeoutError):
        fut.result(5)
    assert 0.15 < time.monotonic() - start < 2.0
    assert len(client._pending) == 0


def test_late_response_is_ignored_and_the_next_call_gets_its_own(
    server: RemotingServer, client: RemotingClient
) -> None:
    with pytest.raises(RemotingTimeoutError):
        client.invoke_sync(server.address, request(DELAYED, body=b"first"), 100)
    time.sleep(0.4)  # the first response has arrived by now and sits unread
    assert client.invoke_sync(server.address, request(DELAYED, body=b"second"), 2000).body == b"second"


def test_respond_later_from_another_thread(server: RemotingServer, client: RemotingClient) -> None:
    sync = client.invoke_sync(server.address, request(LATER, {"delay": 0.1}), 2000)
    assert sync.body == b"later"
    futs = [client.invoke_async(server.address, request(LATER, {"delay": 0.05}), 2000) for _ in range(20)]
    assert all(f.result(5).body == b"later" for f in futs)


def test_respond_only_once(server: RemotingServer) -> None:
    ctx = RequestContext(server, b"nobody", "nobody", request(ECHO), time.monotonic(), b"nobody")
    assert ctx.respond(response_to(ctx.request, ResponseCode.SUCCESS)) is True
    assert ctx.respond(response_to(ctx.request, ResponseCode.SUCCESS)) is False
    assert ctx.responded


def test_unknown_code_is_not_supported(server: RemotingServer, client: RemotingClient) -> None:
    resp = client.invoke_sync(server.address, request(4242))
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "4242" in (resp.remark or "")


def test_handler_exception_becomes_system_error(server: RemotingServer, client: RemotingClient) -> None:
    resp = client.invoke_sync(server.address, request(BOOM))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "the handler broke" in (resp.remark or "")
    assert client.invoke_sync(server.address, request(ECHO, body=b"alive")).body == b"alive"


def test_request_error_sets_code_and_remark(server: RemotingServer, client: RemotingClient) -> None:
    resp = client.invoke_sync(server.address, request(REFUSE))
    assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "not for you")


def test_bounded_queue_answers_system_busy(
    server: RemotingServer, client: RemotingClient, recorder: Recorder
) -> None:
    futs = [client.invoke_async(server.address, request(SLOW), 5000) for _ in range(5)]
    busy = [f.result(3) for f in futs[2:]]
    assert all(r.code == ResponseCode.SYSTEM_BUSY for r in busy)
    assert not futs[0].done() and not futs[1].done()
    recorder.release_slow.set()
    assert [f.result(5).code for f in futs[:2]] == [ResponseCode.SUCCESS] * 2
    assert all(w >= 0 for w in recorder.waited_ms)


def test_enqueued_at_measures_the_wait_in_the_queue(recorder: Recorder) -> None:
    one = ThreadPoolExecutor(1)
    srv = RemotingServer("127.0.0.1:0", "queue-test")

    def handler(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        recorder.waited_ms.append(ctx.waited_ms)
        time.sleep(0.1)
        return response_to(cmd, ResponseCode.SUCCESS)

    srv.register(SLOW, handler, one)
    srv.start()
    try:
        with RemotingClient() as c:
            futs = [c.invoke_async(srv.address, request(SLOW), 3000) for _ in range(3)]
            assert all(f.result(5).code == ResponseCode.SUCCESS for f in futs)
        # The third waited behind two 100 ms handlers.
        assert max(recorder.waited_ms) >= 150
    finally:
        srv.stop()
        one.shutdown()


def test_server_push_reaches_the_client_identity(server: RemotingServer, recorder: Recorder) -> None:
    pushed: list[tuple[str, RemotingCommand]] = []
    got = threading.Event()

    def on_request(addr: str, cmd: RemotingCommand) -> RemotingCommand | None:
        pushed.append((addr, cmd))
        got.set()
        return response_to(cmd, ResponseCode.SUCCESS, body=b"client says hi") if not cmd.is_oneway else None

    with RemotingClient(identity="consumer-1", on_request=on_request) as c:
        # A sync call runs on the calling thread's own socket; the server still
        # sees the client's identity and pushes reach the client.
        resp = c.invoke_sync(server.address, request(REMEMBER))
        assert resp.remark and resp.remark.startswith("consumer-1@127.0.0.1")
        identity = recorder.identities[-1]
        assert identity == b"consumer-1"

        def push_until_delivered() -> None:
            deadline = time.monotonic() + 5
            while not got.is_set() and time.monotonic() < deadline:
                server.push(identity, request(40, {"consumerGroup": "g"}))
                got.wait(0.1)

        push_until_delivered()
        assert got.is_set()
        addr, cmd = pushed[0]
        assert addr == server.address and cmd.code == 40 and cmd.ext == {"consumerGroup": "g"} and cmd.is_oneway

        resp = server.invoke_client(identity, request(39, {"tranStateTableOffset": 7}), 2000).result(5)
        assert resp.code == ResponseCode.SUCCESS and resp.body == b"client says hi"


def test_push_to_unknown_identity_fails_fast(server: RemotingServer) -> None:
    fut = server.invoke_client(b"nobody-here", request(39), 2000)
    with pytest.raises(RemotingSendRequestError):
        fut.result(3)


def test_invoke_client_times_out_when_client_does_not_answer(server: RemotingServer) -> None:
    with RemotingClient(identity="silent-1", on_request=lambda addr, cmd: None) as c:
        c.invoke_sync(server.address, request(REMEMBER))
        deadline = time.monotonic() + 5
        while True:
            fut = server.invoke_client(b"silent-1", request(39), 200)
            try:
                fut.result(3)
            except RemotingTimeoutError:
                break
            except RemotingSendRequestError:
                # The push connection may still be coming up.
                assert time.monotonic() < deadline
                time.sleep(0.05)


def raw_dealer(server: RemotingServer) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 2000)
    sock.connect(f"tcp://{server.address}")
    return sock


def test_garbage_frames_are_dropped_or_answered(server: RemotingServer, client: RemotingClient) -> None:
    sock = raw_dealer(server)
    try:
        sock.send(b"\x00\xff garbage")
        sock.send(pack_frame(b"not json", b"x"))
        sock.send(pack_frame(b"[1,2,3]"))
        sock.send_multipart([pack_frame(b"{}"), b"", b"", b""])
        sock.send_multipart([b'{"opaque": 98}', b""])  # header and body in two frames, no length field
        sock.send(pack_frame(b'{"code": 10, "opaque": 5, "flag": 2'))  # truncated JSON
        sock.send(pack_frame(b'{"opaque": 77, "flag": 2}'))  # oneway: no answer
        sock.send(pack_frame(b'{"opaque": 99, "ext": "nope"}'))  # readable opaque: answered
        reply = decode(sock.recv_multipart())
        assert reply.opaque == 99 and reply.code == ResponseCode.SYSTEM_ERROR and reply.is_response
        assert "malformed" in (reply.remark or "")
        # A well-formed request on the same connection still works.
        sock.send_multipart(RemotingCommand(ECHO, 5, 0, None, {}, b"ok").encode())
        reply = decode(sock.recv_multipart())
        assert (reply.opaque, reply.body) == (5, b"ok")
    finally:
        sock.close()
    assert client.invoke_sync(server.address, request(ECHO, body=b"still serving")).body == b"still serving"


def test_oversized_message_is_refused_and_server_survives(server: RemotingServer, client: RemotingClient) -> None:
    sock = raw_dealer(server)
    sock.setsockopt(zmq.RCVTIMEO, 300)
    try:
        sock.send_multipart(RemotingCommand(ECHO, 1, 0, None, {}, b"x" * (100 * 1024)).encode())
        with pytest.raises(zmq.Again):
            sock.recv_multipart()
    finally:
        sock.close()
    assert client.invoke_sync(server.address, request(ECHO, body=b"fine")).body == b"fine"


def test_client_refuses_to_send_oversized_request(server: RemotingServer) -> None:
    with RemotingClient(options=SocketOptions(max_message_size=1024)) as c:
        with pytest.raises(RemotingSendRequestError):
            c.invoke_sync(server.address, request(ECHO, body=b"x" * 2048))
        with pytest.raises(RemotingSendRequestError):
            c.invoke_async(server.address, request(ECHO, body=b"x" * 2048))


def test_response_flags_are_set_by_the_server(server: RemotingServer) -> None:
    sock = raw_dealer(server)
    try:
        sock.send_multipart(RemotingCommand(ECHO, 123, 0, None, {"a": 1}, b"").encode())
        reply = decode(sock.recv_multipart())
        assert reply.flag & RESPONSE_FLAG and not reply.flag & ONEWAY_FLAG and reply.opaque == 123
    finally:
        sock.close()


def test_a_negative_busy_poll_is_refused() -> None:
    with pytest.raises(RemotingError, match="busy_poll_us must be >= 0"):
        RemotingServer("127.0.0.1:0", "test", busy_poll_us=-1)


def test_bad_address_fails_at_once(client: RemotingClient) -> None:
    with pytest.raises(RemotingConnectError):
        client.invoke_sync("no-port-here", request(ECHO))
    with pytest.raises(RemotingConnectError):
        client.invoke_async("host:notaport", request(ECHO))


def test_nothing_listening_fails_with_connect_error(client: RemotingClient) -> None:
    from procs import free_port

    addr = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(RemotingConnectError):
        client.invoke_sync(addr, request(ECHO), 200)
    with pytest.raises(RemotingConnectError):
        client.invoke_async(addr, request(ECHO), 200).result(5)
    client.invoke_oneway(addr, request(ECHO), 200)  # dropped quietly
    assert time.monotonic() - start < 3


def test_requests_wait_for_a_server_that_comes_up(client: RemotingClient) -> None:
    from procs import free_port

    port = free_port()
    fut = client.invoke_async(f"127.0.0.1:{port}", request(ECHO, body=b"early"), 3000)
    time.sleep(0.3)
    srv = RemotingServer(f"127.0.0.1:{port}", "late")
    srv.register(ECHO, lambda cmd, ctx: response_to(cmd, ResponseCode.SUCCESS, body=cmd.body))
    srv.start()
    try:
        assert fut.result(5).body == b"early"
    finally:
        srv.stop()


def test_close_fails_pending_requests(server: RemotingServer) -> None:
    c = RemotingClient()
    fut = c.invoke_async(server.address, request(NEVER), 10_000)
    time.sleep(0.1)
    c.close()
    with pytest.raises(RemotingSendRequestError):
        fut.result(3)
    with pytest.raises(RemotingSendRequestError):
        c.invoke_async(server.address, request(ECHO))
    with pytest.raises(RemotingSendRequestError):
        c.invoke_sync(server.address, request(ECHO))


def test_stop_lets_executor_handlers_answer(recorder: Recorder, pool: ThreadPoolExecutor) -> None:
    srv = RemotingServer("127.0.0.1:0", "graceful")
    running = threading.Event()

    def slowish(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        running.set()
        time.sleep(0.3)
        return response_to(cmd, ResponseCode.SUCCESS, body=b"finished")

    srv.register(SLOW, slowish, pool)
    srv.start()
    with RemotingClient() as c:
        fut = c.invoke_async(srv.address, request(SLOW), 3000)
        assert running.wait(3)
        started = time.monotonic()
        srv.stop(grace_s=2.0)
        assert time.monotonic() - started < 2.0
        assert fut.result(3).body == b"finished"
        # Stopped: new requests are not served.
        with pytest.raises((RemotingTimeoutError, RemotingConnectError)):
            c.invoke_sync(srv.address, request(SLOW), 300)


def test_register_broker_like_json_body_round_trip(server: RemotingServer, client: RemotingClient) -> None:
    body = orjson.dumps({"topicConfigTable": {f"T{i}": {"readQueueNums": 8} for i in range(500)}})
    resp = client.invoke_sync(server.address, request(ECHO, {"brokerId": 0}, body))
    assert orjson.loads(resp.body)["topicConfigTable"]["T499"] == {"readQueueNums": 8}


def test_sync_sockets_of_finished_threads_are_closed(server: RemotingServer, client: RemotingClient) -> None:
    import gc

    def work() -> None:
        assert client.invoke_sync(server.address, request(ECHO, body=b"t")).body == b"t"

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    gc.collect()
    assert len(client._direct) == 0


def test_only_the_pushed_client_may_answer(server: RemotingServer) -> None:
    answered = threading.Event()

    def on_request(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        answered.wait(5)
        return response_to(cmd, ResponseCode.SUCCESS, body=b"genuine")

    with RemotingClient(identity="genuine-1", on_request=on_request) as c:
        c.invoke_sync(server.address, request(ECHO))
        deadline = time.monotonic() + 5
        while True:
            fut = server.invoke_client(b"genuine-1", request(39), 3000)
            time.sleep(0.05)
            if not fut.done():
                break
            with pytest.raises(RemotingSendRequestError):
                fut.result()  # the push connection was not up yet
            assert time.monotonic() < deadline
        # Another peer forges responses for every plausible opaque.
        sock = raw_dealer(server)
        try:
            for opaque in range(1, 200):
                sock.send_multipart(RemotingCommand(0, opaque, RESPONSE_FLAG, None, {}, b"forged").encode())
            time.sleep(0.2)
            assert not fut.done()
        finally:
            sock.close()
        answered.set()
        assert fut.result(5).body == b"genuine"


def test_after_reads_answers_what_inline_handlers_put_off(server: RemotingServer, client: RemotingClient) -> None:
    """A handler may leave its answer to the end of the I/O thread's round of reading (as the broker's group
    commit does): every such request is answered then, on the I/O thread, and a callback that raises neither
    stops the loop nor the other callbacks."""
    put_off: list[tuple[RemotingCommand, RequestContext]] = []
    threads: set[int] = set()

    def defer(cmd: RemotingCommand, ctx: RequestContext) -> None:
        put_off.append((cmd, ctx))
        return None

    def answer_put_off() -> None:
        while put_off:
            cmd, ctx = put_off.pop(0)
            threads.add(threading.get_ident())
            ctx.respond(response_to(cmd, ResponseCode.SUCCESS, body=cmd.body))

    def broken() -> None:
        raise RuntimeError("a broken callback")

    server.register(2001, defer)
    server.after_reads(broken)
    server.after_reads(answer_put_off)
    futs = [client.invoke_async(server.address, request(2001, body=str(i).encode()), 2000) for i in range(50)]
    assert [f.result(5).body for f in futs] == [str(i).encode() for i in range(50)]
    assert client.invoke_sync(server.address, request(2001, body=b"sync"), 2000).body == b"sync"
    assert threads and threading.get_ident() not in threads and len(threads) == 1  # one thread: the I/O thread
    assert client.invoke_sync(server.address, request(ECHO), 2000).code == ResponseCode.SUCCESS


# --- invoke_from_loop: requests awaited on an event loop, on the loop's own socket ---


def test_awaited_calls_get_their_own_answers(server: RemotingServer, client: RemotingClient,
                                            recorder: Recorder) -> None:
    async def main() -> list[RemotingCommand]:
        one = await client.invoke_from_loop(server.address, request(ECHO, {"n": -1}, b"first"), 2000)
        assert one.body == b"first"
        calls = [client.invoke_from_loop(server.address, request(ECHO, {"n": i}, f"b{i}".encode()), 5000)
                 for i in range(200)]
        await client.invoke_from_loop(server.address, request(REMEMBER), 2000)
        return await asyncio.gather(*calls)

    answers = asyncio.run(main())
    assert [(a.ext["n"], a.body) for a in answers] == [(i, f"b{i}".encode()) for i in range(200)]
    assert recorder.identities == [client.identity]  # the server knows the loop's socket as this client
    assert client.pending_requests == 0


def test_an_awaited_call_times_out_and_the_late_answer_is_dropped(server: RemotingServer,
                                                                  client: RemotingClient) -> None:
    async def main() -> None:
        start = time.monotonic()
        with pytest.raises(RemotingTimeoutError):
            await client.invoke_from_loop(server.address, request(NEVER), 200)
        assert time.monotonic() - start < 1.5
        with pytest.raises(RemotingTimeoutError):
            await client.invoke_from_loop(server.address, request(LATER, {"delay": 0.3}), 100)
        await asyncio.sleep(0.4)  # its answer arrives now, for nobody
        assert (await client.invoke_from_loop(server.address, request(ECHO, body=b"next"), 2000)).body == b"next"

    asyncio.run(main())


def test_an_awaited_call_to_nothing_fails_with_connect_error_and_the_loop_keeps_running(
        client: RemotingClient) -> None:
    from procs import free_port

    async def main() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        start = time.monotonic()
        with pytest.raises(RemotingConnectError):
            await client.invoke_from_loop(f"127.0.0.1:{free_port()}", request(ECHO), 300)
        assert time.monotonic() - start < 2
        ticker.cancel()
        return ticks

    assert asyncio.run(main()) >= 10  # the loop ran other tasks while the call waited for a connection


def test_a_cancelled_awaited_call_leaves_nothing_waiting(server: RemotingServer, client: RemotingClient) -> None:
    async def main() -> None:
        call = asyncio.create_task(client.invoke_from_loop(server.address, request(NEVER), 10_000))
        await asyncio.sleep(0.1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert client.pending_requests == 0
        assert (await client.invoke_from_loop(server.address, request(ECHO, body=b"after"), 2000)).body == b"after"

    asyncio.run(main())


def test_close_fails_awaited_calls(server: RemotingServer) -> None:
    async def main() -> None:
        c = RemotingClient(name="closing")
        call = asyncio.create_task(c.invoke_from_loop(server.address, request(NEVER), 10_000))
        await asyncio.sleep(0.1)
        c.close()  # on the loop's thread: its sockets close at once
        with pytest.raises(RemotingSendRequestError):
            await call
        with pytest.raises(RemotingSendRequestError):
            await c.invoke_from_loop(server.address, request(ECHO), 1000)

    asyncio.run(main())
