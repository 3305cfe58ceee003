"""What a request/response between two Python processes costs on this machine, before any of our code.

Run::

    python bench/transport_floors.py                 # all five, 100-byte bodies
    python bench/transport_floors.py -n 50000 --window 1000
    python bench/transport_floors.py --cpu-dma-latency-us 0   # with idle CPUs kept polling (root)
    python bench/transport_floors.py --rate 2000 --relay-seconds 10   # a longer relay run

Each measurement starts an echo server in a child process (``--serve KIND PORT`` is
its entry point) and a bare client here:

- ``tcp sync``: a blocking TCP socket (TCP_NODELAY both ends), one round trip at a time;
- ``zmq sync``: a bare pyzmq DEALER against a bare ROUTER echo, one round trip at a time;
- ``codec sync``: the same pair, one round trip at a time, each side doing the least a remoting
  round trip needs in Python: the client encodes a SEND_MESSAGE with the header a Producer sends and
  decodes the answer, the server decodes the request and encodes an answer with a send's response
  header (``RemotingCommand`` and its codec, no threads, futures or handlers);
- ``zmq pipelined``: the zmq pair with ``--window`` requests in flight;
- ``zmq relay e2e``: a message's way from a sender through a middle process to a consumer, as a
  produced message reaches a consumer through a broker: a DEALER sends ``--rate`` msg/s to a ROUTER
  in the child process, which passes each to a second DEALER here (a thread of its own, blocked in
  its read); p50 and p99 of send to receipt. No codec, store or long poll: the least a message's
  way through a ZeroMQ broker costs, threads woken included.

These bound what any request/response over the transport can do here: a sync
send cannot beat ``zmq sync``, nor can a pipelined one beat ``zmq pipelined``;
``codec sync`` is as near as a sync send written in Python can come to ``zmq sync``.
Each line is followed by the CPU a round trip took in the client's and the
server's processes (every thread, ZeroMQ's I/O threads and the kernel's time
on their behalf included), the same accounting the producer bench uses.
BENCHMARKS.md puts them next to the producer and consumer figures.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import zmq

from benchkit import cpu_per_process, free_port, process_times, report_cpu
from rocketmesh.broker import cpu_latency
from rocketmesh.remoting import RemotingCommand, RequestCode, ResponseCode, decode, response_to
from rocketmesh.remoting.protocol.headers import SendMessageResponseHeader

#: The echo server's process, whose CPU each measurement counts beside this one's.
_server_pid = 0


class CpuMeter:
    """CPU of this process and the echo server's over a measurement, reported a round trip."""

    def __init__(self) -> None:
        self._pids = [os.getpid(), _server_pid]
        self._before = process_times(self._pids)

    def report(self, name: str, n: int) -> None:
        per = cpu_per_process(self._before, process_times(self._pids), n,
                              {os.getpid(): "client", _server_pid: "server"})
        report_cpu(name.replace(" ", "-"), per)


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
    if kind == "relay":
        while True:  # the consumer says hello first; everything after goes to it
            route, body = sock.recv_multipart()
            if route != b"consumer":
                sock.send_multipart([b"consumer", body])
    if kind == "codec":
        offset = 0
        while True:
            route, *frames = sock.recv_multipart()
            cmd = decode(frames)
            offset += 1
            ext = SendMessageResponseHeader("7F00000100002A9F0000000000000000", 0, offset).to_ext()
            sock.send_multipart([route, *response_to(cmd, ResponseCode.SUCCESS, ext=ext).encode()])
    while True:
        sock.send_multipart(sock.recv_multipart())


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def report(name: str, n: int, elapsed: float, lat: list[float]) -> None:
    lat.sort()
    print(f"{name:<14} {n / elapsed:>9,.0f} round trips/s   p50 {percentile(lat, 0.5) * 1e6:6.0f} us   "
          f"p99 {percentile(lat, 0.99) * 1e6:6.0f} us", flush=True)


def one_at_a_time(name: str, once: Callable[[int], object], n: int) -> None:
    """Time ``n`` calls of ``once(i)`` (each a round trip) after 1,000 to warm up; report them and their CPU."""
    for i in range(1000):
        once(i)
    lat = []
    clock = time.perf_counter
    meter = CpuMeter()
    start = clock()
    for i in range(n):
        t0 = clock()
        once(i)
        lat.append(clock() - t0)
    report(name, n, clock() - start, lat)
    meter.report(name, n)


def tcp_sync(port: int, n: int, body: bytes) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def once(_: int) -> None:
        sock.sendall(body)
        got = 0
        while got < len(body):
            got += len(sock.recv(65536))

    one_at_a_time("tcp sync", once, n)
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

    def once(_: int) -> None:
        sock.send(body)
        sock.recv()

    one_at_a_time("zmq sync", once, n)
    sock.close(0)


def send_request(opaque: int, body: bytes) -> RemotingCommand:
    """A SEND_MESSAGE with the header fields a Producer sends (RocketMQ's SendMessageRequestHeader)."""
    ext = {"producerGroup": "floor", "topic": "Floor", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
           "queueId": 0, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
           "properties": "UNIQ_KEY\x017F00000100002A9F0000000000000000\x02WAIT\x01true\x02",
           "reconsumeTimes": 0, "unitMode": False, "batch": False}
    return RemotingCommand(int(RequestCode.SEND_MESSAGE), opaque, 0, None, ext, body)


def codec_sync(port: int, n: int, body: bytes) -> None:
    sock = dealer(port)

    def once(opaque: int) -> None:
        sock.send_multipart(send_request(opaque, body).encode())
        answer = decode(sock.recv_multipart())
        if answer.opaque != opaque or answer.code != ResponseCode.SUCCESS:
            raise SystemExit(f"the codec echo answered {answer}")

    one_at_a_time("codec sync", once, n)
    sock.close(0)


def zmq_pipelined(port: int, n: int, body: bytes, window: int) -> None:
    sock = dealer(port)
    for _ in range(1000):
        sock.send(body)
        sock.recv()
    clock = time.perf_counter
    sent_at: list[float] = []
    lat: list[float] = []
    meter = CpuMeter()
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
    meter.report("zmq pipelined", n)
    sock.close(0)


def relay_e2e(port: int, seconds: float, rate: int, body: bytes) -> None:
    ctx = zmq.Context.instance()
    consumer = ctx.socket(zmq.DEALER)
    consumer.setsockopt(zmq.IDENTITY, b"consumer")
    consumer.setsockopt(zmq.RCVTIMEO, 10_000)
    consumer.connect(f"tcp://127.0.0.1:{port}")
    consumer.send(b"hello")
    sender = dealer(port)
    clock = time.perf_counter_ns
    lat: list[float] = []
    total = int(seconds * rate)

    def consume() -> None:
        for _ in range(total):
            try:
                got = consumer.recv()
            except zmq.Again:
                return
            lat.append((clock() - int(got[:19])) / 1e9)

    reader = threading.Thread(target=consume, daemon=True)
    time.sleep(0.5)  # both connections up
    reader.start()
    meter = CpuMeter()
    interval = 1.0 / rate
    start = time.monotonic()
    for sent in range(total):
        delay = start + sent * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sender.send(b"%019d" % clock() + body[19:])
    reader.join(15)
    lat.sort()
    print(f"zmq relay e2e  {rate:,} msg/s for {seconds:g} s: p50 {percentile(lat, 0.5) * 1000:.3f} ms, "
          f"p99 {percentile(lat, 0.99) * 1000:.3f} ms ({len(lat):,} of {total:,} received)", flush=True)
    meter.report("zmq relay e2e", max(1, len(lat)))
    sender.close(0)
    consumer.close(0)


def run(kind: str, fn, *args) -> None:
    global _server_pid
    port = free_port()
    child = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port)], stdout=subprocess.PIPE, text=True)
    _server_pid = child.pid
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
    ap.add_argument("--rate", type=int, default=2000, help="msg/s of the relay's sender")
    ap.add_argument("--relay-seconds", type=float, default=5.0, help="how long the relay's sender sends")
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
    run("codec", codec_sync, args.n, body)
    run("zmq", zmq_pipelined, args.n * 10, body, args.window)
    run("relay", relay_e2e, args.relay_seconds, args.rate, body)
    if qos is not None:
        qos.release()


if __name__ == "__main__":
    main()
