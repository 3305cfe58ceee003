"""Round trips through RemotingClient -> RemotingServer against a trivial inline handler.

Run::

    python bench/remoting_bench.py                    # sync loop + pipelined async, server in a child process
    python bench/remoting_bench.py --mode sync -n 20000
    python bench/remoting_bench.py --mode async --window 1000 -n 200000 --body 100
    python bench/remoting_bench.py --inproc           # server in this process (shares the GIL)
    python bench/remoting_bench.py --mode sync --handler-us 8   # the handler works 8 µs before it answers
    python bench/remoting_bench.py --mode sync --busy-poll-us 100  # the server's I/O thread spins between requests
    py-spy record --subprocesses -f raw -o prof.txt -- python bench/remoting_bench.py --mode async

Prints requests/s and p50/p99 latency (µs) per mode. The server runs in a
separate process by default, as a broker would; ``--serve PORT`` is the
child's entry point. ``--handler-us N`` has the handler keep its CPU busy for
N µs before it answers, standing in for a real handler's work (a broker's
send handling is 10-14 µs of Python: ``bench/send_path.py``). The server
polls as a broker does by default (``serverBusyPollUs``: 0, no spin);
``--busy-poll-us`` sets it.

Figures on the 2-core dev VM (Python 3.11, pyzmq 27, 100-byte body,
window 1000), best of several runs while other test suites shared the box:
sync 11,300 round trips/s (p50 84 µs) when the box was otherwise idle,
4,000-6,500/s under load, both with a server that sleeps between requests
(1 KiB bodies, 2026-11-24: 13,389/s, p50 74 µs, busy-polling; 11,651/s
with ``--busy-poll-us 0``); async 31,000-33,000 req/s (23,000-25,000 under
load). For scale: a bare pyzmq DEALER/ROUTER echo with no codec, futures
or threads does about 72,000-85,000/s pipelined here, and a bare pyzmq
client against RemotingServer 45,000-69,000/s.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

# The bench and the services it starts log warnings only (ROCKETMESH_LOG_LEVEL overrides): figures stay readable.
os.environ.setdefault("ROCKETMESH_LOG_LEVEL", "WARNING")

from benchkit import free_port, percentile  # noqa: E402
from rocketmesh.broker.config import BrokerConfig
from rocketmesh.remoting import RemotingClient, RemotingServer, RequestCode, ResponseCode, request, response_to


def handler(busy_us: float):
    """SEND_MESSAGE answered inline with SUCCESS, after ``busy_us`` of busy CPU."""
    if busy_us <= 0:
        return lambda cmd, ctx: response_to(cmd, ResponseCode.SUCCESS)
    busy_s = busy_us / 1e6
    clock = time.perf_counter

    def busy(cmd, ctx):
        until = clock() + busy_s
        while clock() < until:
            pass
        return response_to(cmd, ResponseCode.SUCCESS)
    return busy


def serve(port: int, busy_us: float, busy_poll_us: int) -> None:
    """Child process: a server answering SEND_MESSAGE inline with SUCCESS."""
    server = RemotingServer(f"127.0.0.1:{port}", "bench", busy_poll_us=busy_poll_us)
    server.register(RequestCode.SEND_MESSAGE, handler(busy_us))
    server.start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print("ready", flush=True)
    done.wait()
    server.stop()


def report(mode: str, n: int, elapsed: float, lat: list[float]) -> None:
    lat.sort()
    print(
        f"{mode:>6}: {n / elapsed:10,.0f} req/s   p50 {percentile(lat, 0.5) * 1e6:8.0f} µs"
        f"   p99 {percentile(lat, 0.99) * 1e6:8.0f} µs   ({n} requests in {elapsed:.2f} s)"
    )


def bench_sync(client: RemotingClient, addr: str, n: int, body: bytes) -> None:
    lat = []
    ext = {"topic": "BenchTopic", "queueId": 0}
    for _ in range(min(1000, n)):  # warm-up: connection, caches
        client.invoke_sync(addr, request(RequestCode.SEND_MESSAGE, dict(ext), body))
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        client.invoke_sync(addr, request(RequestCode.SEND_MESSAGE, dict(ext), body))
        lat.append(time.perf_counter() - t0)
    report("sync", n, time.perf_counter() - start, lat)


def bench_async(client: RemotingClient, addr: str, n: int, body: bytes, window: int) -> None:
    lat: list[float] = []
    slots = threading.Semaphore(window)
    done = threading.Event()
    remaining = [n]
    errors = [0]
    ext = {"topic": "BenchTopic", "queueId": 0}

    def make_done(t0: float):
        def on_done(fut) -> None:
            # Runs on the client's I/O thread: keep it tiny.
            lat.append(time.perf_counter() - t0)
            if fut.exception() is not None:
                errors[0] += 1
            slots.release()
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

        return on_done

    for _ in range(min(1000, n)):
        client.invoke_sync(addr, request(RequestCode.SEND_MESSAGE, dict(ext), body))
    start = time.perf_counter()
    for _ in range(n):
        slots.acquire()
        fut = client.invoke_async(addr, request(RequestCode.SEND_MESSAGE, dict(ext), body), 10_000)
        fut.add_done_callback(make_done(time.perf_counter()))
    done.wait(120)
    report("async", n, time.perf_counter() - start, lat)
    if errors[0]:
        print(f"        {errors[0]} requests failed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["sync", "async", "both"], default="both")
    ap.add_argument("-n", type=int, default=0, help="requests per mode (default 20k sync, 200k async)")
    ap.add_argument("--window", type=int, default=1000, help="async requests in flight")
    ap.add_argument("--body", type=int, default=100, help="body bytes")
    ap.add_argument("--inproc", action="store_true", help="run the server in this process")
    ap.add_argument("--handler-us", type=float, default=0.0,
                    help="µs of busy CPU in the handler before it answers (default 0)")
    ap.add_argument("--busy-poll-us", type=int, default=BrokerConfig.server_busy_poll_us,
                    help="the server's busy poll after requests, in µs (default: the broker's, %(default)s)")
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.handler_us, args.busy_poll_us)
        return

    port = free_port()
    child = None
    server = None
    if args.inproc:
        server = RemotingServer(f"127.0.0.1:{port}", "bench", busy_poll_us=args.busy_poll_us)
        server.register(RequestCode.SEND_MESSAGE, handler(args.handler_us))
        server.start()
    else:
        child = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", str(port), "--handler-us", str(args.handler_us),
             "--busy-poll-us", str(args.busy_poll_us)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    addr = f"127.0.0.1:{port}"
    body = b"x" * args.body
    client = RemotingClient(name="bench")
    try:
        if args.mode in ("sync", "both"):
            bench_sync(client, addr, args.n or 20_000, body)
        if args.mode in ("async", "both"):
            bench_async(client, addr, args.n or 200_000, body, args.window)
    finally:
        client.close()
        if server:
            server.stop()
        if child:
            child.send_signal(signal.SIGTERM)
            child.wait(10)


if __name__ == "__main__":
    main()
