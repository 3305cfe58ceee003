"""What a request/response between two Python processes costs on this machine, before any of our code.

Run::

    python bench/transport_floors.py                 # all three, 100-byte bodies
    python bench/transport_floors.py -n 50000 --window 1000
    python bench/transport_floors.py --cpu-dma-latency-us 0   # with idle CPUs kept polling (root)

Each measurement starts an echo server in a child process (``--serve KIND PORT`` is
its entry point) and a bare client here:

- ``tcp sync``: a blocking TCP socket (TCP_NODELAY both ends), one round trip at a time;
- ``zmq sync``: a bare pyzmq DEALER against a bare ROUTER echo, one round trip at a time;
- ``zmq pipelined``: the same pair with ``--window`` requests in flight.

These bound what any request/response over the transport can do here: a sync
send cannot beat ``zmq sync``, nor can a pipelined one beat ``zmq pipelined``.
BENCHMARKS.md puts them next to the producer and consumer figures.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

import zmq

from benchkit import free_port
from rocketmesh.broker import cpu_latency


def serve(kind: str, port: int) -> None:
    """Child process: echo every request back, forever."""
    if kind == "tcp":
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", port))
        srv.listen()
        print("ready", flush=True)
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(65536):
            conn.sendall(data)
        return
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.SNDHWM, 0)  # a ROUTER drops what does not fit its high-water mark: keep everything
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.bind(f"tcp://127.0.0.1:{port}")
    print("ready", flush=True)
    while True:
        sock.send_multipart(sock.recv_multipart())


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def report(name: str, n: int, elapsed: float, lat: list[float]) -> None:
    lat.sort()
    print(f"{name:<14} {n / elapsed:>9,.0f} round trips/s   p50 {percentile(lat, 0.5) * 1e6:6.0f} us   "
          f"p99 {percentile(lat, 0.99) * 1e6:6.0f} us", flush=True)


def tcp_sync(port: int, n: int, body: bytes) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def once() -> None:
        sock.sendall(body)
        got = 0
        while got < len(body):
            got += len(sock.recv(65536))

    for _ in range(1000):
        once()
    lat = []
    clock = time.perf_counter
    start = clock()
    for _ in range(n):
        t0 = clock()
        once()
        lat.append(clock() - t0)
    report("tcp sync", n, clock() - start, lat)
    sock.close()


def dealer(port: int) -> zmq.Socket:
    """A DEALER to the echo server; a reply missing for 10 s ends the run (zmq.Again) instead of hanging it."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    sock.connect(f"tcp://127.0.0.1:{port}")
    return sock


def zmq_sync(port: int, n: int, body: bytes) -> None:
    sock = dealer(port)
    for _ in range(1000):
        sock.send(body)
        sock.recv()
    lat = []
    clock = time.perf_counter
    start = clock()
    for _ in range(n):
        t0 = clock()
        sock.send(body)
        sock.recv()
        lat.append(clock() - t0)
    report("zmq sync", n, clock() - start, lat)
    sock.close(0)


def zmq_pipelined(port: int, n: int, body: bytes, window: int) -> None:
    sock = dealer(port)
    for _ in range(1000):
        sock.send(body)
        sock.recv()
    clock = time.perf_counter
    sent_at: list[float] = []
    lat: list[float] = []
    start = clock()
    while len(sent_at) < min(window, n):
        sent_at.append(clock())
        sock.send(body)
    done = 0
    while done < n:
        sock.recv()
        now = clock()
        lat.append(now - sent_at[done])
        done += 1
        if len(sent_at) < n:
            sent_at.append(now)
            sock.send(body)
    report("zmq pipelined", n, clock() - start, lat)
    sock.close(0)


def run(kind: str, fn, *args) -> None:
    port = free_port()
    child = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        if child.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            raise SystemExit(f"the {kind} echo server did not start")
        fn(port, *args)
    finally:
        child.terminate()
        child.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20_000, help="round trips per measurement (x10 pipelined)")
    ap.add_argument("--body", type=int, default=100, help="body bytes")
    ap.add_argument("--window", type=int, default=1000, help="requests in flight when pipelined")
    ap.add_argument("--cpu-dma-latency-us", type=int, default=-1,
                    help="hold a PM QoS request for the run, as the broker's cpuDmaLatencyUs does (root)")
    ap.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    body = b"x" * args.body
    qos = cpu_latency.hold(args.cpu_dma_latency_us) if args.cpu_dma_latency_us >= 0 else None
    run("tcp", tcp_sync, args.n, body)
    run("zmq", zmq_sync, args.n, body)
    run("zmq", zmq_pipelined, args.n * 10, body, args.window)
    if qos is not None:
        qos.release()


if __name__ == "__main__":
    main()
