"""The brokers a Python team would otherwise run, measured the way producer_bench and consumer_bench
measure rocketmesh: on this machine, 1 KiB bodies, Python clients, servers started here.

Run (the clients: ``pip install -e '.[peers]'``; the servers: ``apt-get install nats-server redis-server
rabbitmq-server``)::

    python bench/peers_bench.py                                   # every peer, every mode
    python bench/peers_bench.py --peers nats,redis --modes async,drain --backlog 200000

Peers (each server from the system's own package, on loopback ports of its own, its data in a temporary
folder; a peer whose server is not installed is skipped, saying which package brings it):
  nats      NATS JetStream (``apt-get install nats-server``), nats-py: a file-storage stream; every
            publish acked by JetStream once stored (written to the OS, synced every 2 min by default).
  redis     Redis Streams (``apt-get install redis-server``), redis-py: XADD with the append-only file on
            (``appendfsync everysec``: written to the OS before the answer, synced each second).
  rabbitmq  RabbitMQ (``apt-get install rabbitmq-server``), pika: a durable classic queue, persistent
            messages, publisher confirms.

Each is what rocketmesh's default (ASYNC_FLUSH: stored in the page cache before the answer) compares
with: acknowledged once the server has the message, not once it reached the disk.

Modes (as rocketmesh's benches name them):
  sync1   one sender, each message's acknowledgement awaited before the next
          (producer_bench --modes sync1)
  async   --window messages in flight, each acknowledged; Redis: pipelines of --window XADDs
          (producer_bench --modes async)
  drain   --backlog messages stored first, then read by one consumer, --pull-batch at a time,
          acknowledged a batch at a time (consumer_bench --modes pull)
  e2e     one sender at --rate msg/s for --duration s without waiting for acknowledgements, one
          consumer; send-to-receive latency p50/p99 (consumer_bench --modes e2e)
  sync16, sync64
          16 or 64 senders, each on its own connection awaiting each acknowledgement; RabbitMQ only,
          whose confirms of persistent messages on a durable queue come once they are on disk: the
          peer of rocketmesh's SYNC_FLUSH (producer_bench --set flushDiskType=SYNC_FLUSH --modes sync16)

Prints msg/s and latency per mode, and the CPU each message took in this process and in the server
(microseconds), as the other benches do.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable

from benchkit import (
    cpu_per_process,
    free_port,
    percentile,
    process_times,
    process_tree,
    report,
    report_cpu,
)

MODES = ("sync1", "async", "drain", "e2e", "sync16", "sync64")
#: The modes of many senders, each awaiting its acknowledgements: peers with a ``senders`` method only.
SENDERS = {"sync16": 16, "sync64": 64}
PEERS = ("nats", "redis", "rabbitmq")


class Settings:
    """The command line's figures, shared by every peer."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.duration: float = a.duration
        self.window: int = a.window
        self.backlog: int = a.backlog
        self.pull_batch: int = a.pull_batch
        self.rate: int = a.rate
        self.body = b"x" * a.size


class Server:
    """One peer's server as a child process (its own session, so that stop() ends all it started)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=f"peer-{name}-")
        self.log = open(os.path.join(self.dir, "server.log"), "w+")
        self.argv = argv
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ, **(self.env or {}))
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=self.dir, start_new_session=True)

    def pids(self) -> dict[int, str]:
        """The server's processes (the whole tree: RabbitMQ runs a VM under a shell), labelled by peer."""
        return {} if self.proc is None else {pid: self.name for pid in process_tree(self.proc.pid)}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_until(ready: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except Exception as exc:  # noqa: BLE001 - not up yet
            last = exc
        time.sleep(0.2)
    raise SystemExit(f"{what} did not come up within {timeout_s:.0f} s ({last})")


def one_by_one(send: Callable[[], object], duration: float) -> tuple[int, float, list[float]]:
    """``send()`` again and again for ``duration`` s: how many, the time taken, the latency of each."""
    lat: list[float] = []
    clock = time.perf_counter
    start = clock()
    stop_at = start + duration
    while True:
        t0 = clock()
        if t0 >= stop_at:
            break
        send()
        lat.append(clock() - t0)
    return len(lat), clock() - start, lat


def stamp(body: bytes) -> bytes:
    """``body`` led by the send time (ns, 19 digits), for e2e latency."""
    return str(time.time_ns()).encode() + body[19:]


def stamped_latency(body: bytes) -> float:
    return (time.time_ns() - int(body[:19])) / 1e9


# -- Redis Streams ---------------------------------------------------------------------------------------


class RedisPeer:
    name = "redis"
    #: The server: its Debian package, and the command it installs.
    package = "redis-server"

    def __init__(self) -> None:
        self.port = free_port()
        self.server = Server(self.name, ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                                         "--protected-mode", "no"])
        self.server.argv += ["--dir", self.server.dir]

    def start(self) -> None:
        import redis

        self.server.start()
        self.redis = redis
        wait_until(lambda: self.client().ping(), "redis-server")

    def client(self):  # noqa: ANN201 - redis.Redis
        return self.redis.Redis(host="127.0.0.1", port=self.port)

    def sync1(self, s: Settings) -> tuple[int, float, list[float]]:
        r = self.client()
        return one_by_one(lambda: r.xadd("sync1", {"b": s.body}), s.duration)

    def async_(self, s: Settings) -> tuple[int, float, list[float]]:
        r = self.client()
        lat: list[float] = []
        clock = time.perf_counter
        start = clock()
        stop_at = start + s.duration
        n = 0
        while clock() < stop_at:
            t0 = clock()
            pipe = r.pipeline(transaction=False)
            for _ in range(s.window):
                pipe.xadd("async", {"b": s.body})
            pipe.execute()
            lat.append(clock() - t0)
            n += s.window
        return n, clock() - start, lat

    def fill(self, s: Settings, stream: str) -> None:
        r = self.client()
        for i in range(0, s.backlog, 1000):
            pipe = r.pipeline(transaction=False)
            for _ in range(min(1000, s.backlog - i)):
                pipe.xadd(stream, {"b": s.body})
            pipe.execute()

    def drain(self, s: Settings) -> float:
        r = self.client()
        r.xgroup_create("drain", "g", id="0")
        got = 0
        first = 0.0
        while got < s.backlog:
            resp = r.xreadgroup("g", "c", {"drain": ">"}, count=s.pull_batch, block=10_000)
            if not resp:
                raise SystemExit(f"redis drain stalled at {got}/{s.backlog}")
            entries = resp[0][1]
            if not first:
                first = time.monotonic()
            r.xack("drain", "g", *[entry_id for entry_id, _ in entries])
            got += len(entries)
        return got / (time.monotonic() - first)

    def e2e(self, s: Settings) -> list[float]:
        r = self.client()
        r.xgroup_create("e2e", "g", id="$", mkstream=True)
        lat: list[float] = []
        done = threading.Event()

        def consume() -> None:
            c = self.client()
            while not done.is_set():
                resp = c.xreadgroup("g", "c", {"e2e": ">"}, count=s.pull_batch, block=200)
                for _, entries in resp or []:
                    for _entry_id, fields in entries:
                        lat.append(stamped_latency(fields[b"b"]))
                    c.xack("e2e", "g", *[entry_id for entry_id, _ in entries])

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        time.sleep(0.5)
        paced(s, lambda body: r.xadd("e2e", {"b": body}))
        time.sleep(1.0)
        done.set()
        t.join(5)
        return lat

    def stop(self) -> None:
        self.server.stop()


# -- NATS JetStream --------------------------------------------------------------------------------------


class NatsPeer:
    name = "nats"
    package = "nats-server"

    def __init__(self) -> None:
        self.port = free_port()
        self.server = Server(self.name, ["nats-server", "-js", "-a", "127.0.0.1", "-p", str(self.port)])
        self.server.argv += ["-sd", self.server.dir]
        self.loop = asyncio.new_event_loop()

    def run(self, coro):  # noqa: ANN001, ANN201 - a coroutine and its result
        return self.loop.run_until_complete(coro)

    def start(self) -> None:
        self.server.start()

        async def up() -> bool:
            nc = await self.connect()
            await nc.close()
            return True

        wait_until(lambda: self.run(up()), "nats-server")

    async def connect(self):  # noqa: ANN201 - nats.NATS
        import nats

        return await nats.connect(f"nats://127.0.0.1:{self.port}", connect_timeout=2, allow_reconnect=False)

    async def stream(self, name: str):  # noqa: ANN201 - (NATS, JetStreamContext)
        from nats.js.api import StorageType

        nc = await self.connect()
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{name}.>"], storage=StorageType.FILE)
        return nc, js

    def sync1(self, s: Settings) -> tuple[int, float, list[float]]:
        async def go() -> tuple[int, float, list[float]]:
            nc, js = await self.stream("sync1")
            lat: list[float] = []
            clock = time.perf_counter
            start = clock()
            stop_at = start + s.duration
            while True:
                t0 = clock()
                if t0 >= stop_at:
                    break
                await js.publish("sync1.x", s.body)
                lat.append(clock() - t0)
            await nc.close()
            return len(lat), clock() - start, lat

        return self.run(go())

    async def windowed(self, nc, subject: str, body: bytes, window: int, stop: Callable[[int], bool],  # noqa: ANN001
                       lat: list[float] | None = None) -> int:
        """Publishes (nats-py's publish_async) with ``window`` unacknowledged at most until ``stop(n)``; returns
        how many were acknowledged."""
        js = nc.jetstream(publish_async_max_pending=window)
        clock = time.perf_counter
        failed: list[BaseException] = []
        n = 0

        def done(fut: asyncio.Future, t0: float) -> None:
            if fut.exception() is not None:
                failed.append(fut.exception())
            elif lat is not None:
                lat.append(clock() - t0)

        while not stop(n):
            t0 = clock()
            fut = await js.publish_async(subject, body)
            fut.add_done_callback(lambda f, t0=t0: done(f, t0))
            n += 1
        await js.publish_async_completed()
        if failed:
            raise SystemExit(f"nats: {len(failed)} of {n} publishes failed: {failed[0]!r}")
        return n

    def async_(self, s: Settings) -> tuple[int, float, list[float]]:
        async def go() -> tuple[int, float, list[float]]:
            nc, _ = await self.stream("async")
            lat: list[float] = []
            start = time.perf_counter()
            stop_at = start + s.duration
            n = await self.windowed(nc, "async.x", s.body, s.window, lambda _: time.perf_counter() >= stop_at, lat)
            elapsed = time.perf_counter() - start
            await nc.close()
            return n, elapsed, lat

        return self.run(go())

    def fill(self, s: Settings, stream: str) -> None:
        async def go() -> None:
            nc, _ = await self.stream(stream)
            await self.windowed(nc, f"{stream}.x", s.body, 1000, lambda n: n >= s.backlog)
            await nc.close()

        self.run(go())

    def drain(self, s: Settings) -> float:
        from nats.js.api import AckPolicy, ConsumerConfig

        async def go() -> float:
            nc = await self.connect()
            js = nc.jetstream()
            # Acknowledging the last message of a batch acknowledges the batch (as an offset commit does).
            sub = await js.pull_subscribe("drain.>", durable="g", stream="drain",
                                          config=ConsumerConfig(ack_policy=AckPolicy.ALL))
            got = 0
            first = 0.0
            while got < s.backlog:
                msgs = await sub.fetch(s.pull_batch, timeout=10)
                if not first:
                    first = time.monotonic()
                await msgs[-1].ack()
                got += len(msgs)
            rate = got / (time.monotonic() - first)
            await nc.close()
            return rate

        return self.run(go())

    def e2e(self, s: Settings) -> list[float]:
        lat: list[float] = []

        async def go() -> None:
            nc, js = await self.stream("e2e")
            sub_nc = await self.connect()
            sub_js = sub_nc.jetstream()

            async def received(msg) -> None:  # noqa: ANN001 - nats.aio.msg.Msg
                lat.append(stamped_latency(msg.data))
                await msg.ack()

            await sub_js.subscribe("e2e.>", durable="g", cb=received, manual_ack=True)
            await asyncio.sleep(0.5)
            interval = 1.0 / s.rate
            start = time.monotonic()
            sent = 0
            while time.monotonic() - start < s.duration:
                delay = start + sent * interval - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await nc.publish("e2e.x", stamp(s.body))  # stored by the stream, no acknowledgement awaited
                sent += 1
            await nc.flush()
            await asyncio.sleep(1.0)
            await sub_nc.close()
            await nc.close()

        self.run(go())
        return lat

    def stop(self) -> None:
        self.server.stop()
        self.loop.close()


# -- RabbitMQ --------------------------------------------------------------------------------------------


class RabbitPeer:
    name = "rabbitmq"
    package = "rabbitmq-server"

    def __init__(self) -> None:
        self.port = free_port()
        dist = free_port()
        self.epmd_port = free_port()
        # The script under the package's own folder: the one on PATH switches to the rabbitmq user, who
        # cannot write this process's temporary folder.
        script = "/usr/lib/rabbitmq/bin/rabbitmq-server"
        self.server = Server(self.name, [script if os.path.exists(script) else "rabbitmq-server"])
        d = self.server.dir
        for sub in ("mnesia", "log"):
            os.makedirs(os.path.join(d, sub))
        self.server.env = {
            "HOME": d, "ERL_EPMD_PORT": str(self.epmd_port), "RABBITMQ_NODENAME": f"bench{os.getpid()}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(dist),
            "RABBITMQ_MNESIA_BASE": os.path.join(d, "mnesia"), "RABBITMQ_LOG_BASE": os.path.join(d, "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(d, "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": os.path.join(d, "rabbitmq"),
        }
        with open(os.path.join(d, "enabled_plugins"), "w") as f:
            f.write("[].\n")

    def start(self) -> None:
        import pika

        self.pika = pika
        self.server.start()
        wait_until(lambda: self.connection().close() is None, "rabbitmq-server", 120)

    def connection(self):  # noqa: ANN201 - pika.BlockingConnection
        return self.pika.BlockingConnection(self.pika.ConnectionParameters("127.0.0.1", self.port))

    def queue(self, name: str):  # noqa: ANN201 - (connection, channel)
        conn = self.connection()
        ch = conn.channel()
        ch.queue_declare(name, durable=True)
        return conn, ch

    def persistent(self):  # noqa: ANN201 - pika.BasicProperties
        return self.pika.BasicProperties(delivery_mode=2)

    def sync1(self, s: Settings) -> tuple[int, float, list[float]]:
        conn, ch = self.queue("sync1")
        ch.confirm_delivery()  # each publish returns once the server confirmed it
        props = self.persistent()
        out = one_by_one(lambda: ch.basic_publish("", "sync1", s.body, props), s.duration)
        conn.close()
        return out

    def senders(self, s: Settings, count: int) -> tuple[int, float, list[float]]:
        """``count`` threads, each with its own connection and channel in confirm mode, publishing one
        persistent message at a time to one durable queue for ``s.duration`` s."""
        queue = f"sync{count}"
        channels = [self.queue(queue) for _ in range(count)]
        props = self.persistent()
        lats: list[list[float]] = [[] for _ in range(count)]
        start = threading.Barrier(count + 1)

        def sender(ch, lat: list[float]) -> None:  # noqa: ANN001 - a pika channel
            ch.confirm_delivery()
            start.wait()
            lat.extend(one_by_one(lambda: ch.basic_publish("", queue, s.body, props), s.duration)[2])

        threads = [threading.Thread(target=sender, args=(ch, lat)) for (_, ch), lat in zip(channels, lats, strict=True)]
        for t in threads:
            t.start()
        t0 = time.perf_counter()
        start.wait()
        for t in threads:
            t.join(s.duration + 60)
        elapsed = time.perf_counter() - t0
        for conn, _ in channels:
            conn.close()
        every = [x for lat in lats for x in lat]
        return len(every), elapsed, every

    def confirmed(self, s: Settings, queue: str, stop: Callable[[int], bool],
                  lat: list[float] | None = None) -> int:
        """Publishes with ``s.window`` unconfirmed at most until ``stop(n)`` (pika's asynchronous connection and
        publisher confirms); returns how many were confirmed."""
        pika = self.pika
        props = self.persistent()
        clock = time.perf_counter
        state = {"sent": 0, "confirmed": 0, "stopping": False}
        sent_at: dict[int, float] = {}
        out = {"n": 0}

        def publish_more(ch) -> None:  # noqa: ANN001
            while not state["stopping"] and state["sent"] - state["confirmed"] < s.window:
                if stop(state["sent"]):
                    state["stopping"] = True
                    break
                state["sent"] += 1
                sent_at[state["sent"]] = clock()
                ch.basic_publish("", queue, s.body, props)
            if state["stopping"] and state["confirmed"] >= state["sent"]:
                out["n"] = state["confirmed"]
                ch.connection.close()

        def on_confirm(frame, ch) -> None:  # noqa: ANN001
            method = frame.method
            if not isinstance(method, pika.spec.Basic.Ack):
                raise SystemExit("rabbitmq refused a message (basic.nack)")
            upto = method.delivery_tag
            first = state["confirmed"] + 1 if method.multiple else upto
            now = clock()
            for tag in range(first, upto + 1):
                t0 = sent_at.pop(tag, None)
                if t0 is not None and lat is not None:
                    lat.append(now - t0)
            state["confirmed"] = max(state["confirmed"], upto)
            publish_more(ch)

        def on_queue(_frame, ch) -> None:  # noqa: ANN001
            ch.confirm_delivery(lambda frame: on_confirm(frame, ch))
            publish_more(ch)

        def on_channel(ch) -> None:  # noqa: ANN001
            ch.queue_declare(queue, durable=True, callback=lambda frame: on_queue(frame, ch))

        conn = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", self.port),
                                     on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                     on_close_callback=lambda c, reason: c.ioloop.stop())
        conn.ioloop.start()
        return out["n"]

    def async_(self, s: Settings) -> tuple[int, float, list[float]]:
        lat: list[float] = []
        start = time.perf_counter()
        stop_at = start + s.duration
        n = self.confirmed(s, "async", lambda _: time.perf_counter() >= stop_at, lat)
        return n, time.perf_counter() - start, lat

    def fill(self, s: Settings, queue: str) -> None:
        self.confirmed(s, queue, lambda n: n >= s.backlog)

    def drain(self, s: Settings) -> float:
        conn, ch = self.queue("drain")
        ch.basic_qos(prefetch_count=s.pull_batch * 2)
        got = 0
        first = 0.0
        for method, _props, _body in ch.consume("drain", inactivity_timeout=10):
            if method is None:
                raise SystemExit(f"rabbitmq drain stalled at {got}/{s.backlog}")
            if not first:
                first = time.monotonic()
            got += 1
            if got % s.pull_batch == 0 or got >= s.backlog:
                ch.basic_ack(method.delivery_tag, multiple=True)  # a batch at a time
            if got >= s.backlog:
                break
        rate = got / (time.monotonic() - first)
        ch.cancel()
        conn.close()
        return rate

    def e2e(self, s: Settings) -> list[float]:
        lat: list[float] = []
        conn, ch = self.queue("e2e")
        ready = threading.Event()
        done = threading.Event()

        def consume() -> None:
            cconn, cch = self.queue("e2e")
            cch.basic_qos(prefetch_count=s.pull_batch * 2)
            ready.set()
            for method, _props, body in cch.consume("e2e", inactivity_timeout=0.2):
                if done.is_set():
                    break
                if method is not None:
                    lat.append(stamped_latency(body))
                    cch.basic_ack(method.delivery_tag)
            cch.cancel()
            cconn.close()

        t = threading.Thread(target=consume, daemon=True)
        t.start()
        ready.wait(10)
        time.sleep(0.5)
        props = self.persistent()
        paced(s, lambda body: ch.basic_publish("", "e2e", body, props))  # no confirms awaited
        time.sleep(1.0)
        done.set()
        t.join(5)
        conn.close()
        return lat

    def stop(self) -> None:
        self.server.stop()
        # The Erlang port mapper it started outlives it (a daemon of its own, on a port of this run's).
        subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"], capture_output=True, timeout=10,
                       env=dict(os.environ, ERL_EPMD_PORT=str(self.epmd_port)))


# -- the runs --------------------------------------------------------------------------------------------


def paced(s: Settings, send: Callable[[bytes], object]) -> int:
    """``send`` stamped bodies at ``s.rate`` msg/s for ``s.duration`` s; returns how many."""
    interval = 1.0 / s.rate
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < s.duration:
        delay = start + sent * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        send(stamp(s.body))
        sent += 1
    return sent


def measure(peer, mode: str, s: Settings) -> None:  # noqa: ANN001 - one of the *Peer classes
    if mode in SENDERS and not hasattr(peer, "senders"):
        print(f"{peer.name}:{mode} skipped (only RabbitMQ's confirms wait for the disk)", flush=True)
        return
    watched = {os.getpid(): "client", **peer.server.pids()}
    label = f"{peer.name}:{mode}"
    if mode == "drain":
        peer.fill(s, "drain")
        before = process_times(list(watched))
        rate = peer.drain(s)
        report_cpu(label, cpu_per_process(before, process_times(list(watched)), s.backlog, watched))
        print(f"{label:<16} drain {s.backlog} x {len(s.body)} B: {rate:,.0f} msg/s", flush=True)
        return
    before = process_times(list(watched))
    if mode == "e2e":
        lat = sorted(peer.e2e(s))
        n = len(lat)
        report_cpu(label, cpu_per_process(before, process_times(list(watched)), n, watched))
        if not lat:
            raise SystemExit(f"{label}: nothing received")
        print(f"{label:<16} {s.rate} msg/s for {s.duration:.0f} s: p50 {percentile(lat, 0.50) * 1000:.2f} ms, "
              f"p99 {percentile(lat, 0.99) * 1000:.2f} ms ({n} messages)", flush=True)
        return
    if mode in SENDERS:
        n, elapsed, lat = peer.senders(s, SENDERS[mode])
    else:
        n, elapsed, lat = peer.sync1(s) if mode == "sync1" else peer.async_(s)
    report_cpu(label, cpu_per_process(before, process_times(list(watched)), n, watched))
    report(label, n, elapsed, lat)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)}")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--window", type=int, default=1000)
    ap.add_argument("--backlog", type=int, default=200_000)
    ap.add_argument("--pull-batch", type=int, default=128)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--size", type=int, default=1024)
    a = ap.parse_args()
    for name, given, known in (("--peers", a.peers, PEERS), ("--modes", a.modes, MODES)):
        unknown = set(given.split(",")) - set(known)
        if unknown:
            raise SystemExit(f"{name}: unknown {', '.join(sorted(unknown))} (choose from {', '.join(known)})")
    if a.size < 19:
        raise SystemExit("--size must be at least 19 bytes (e2e stamps the send time into the body)")
    s = Settings(a)
    classes = {"nats": NatsPeer, "redis": RedisPeer, "rabbitmq": RabbitPeer}
    for name in a.peers.split(","):
        cls = classes[name]
        if shutil.which(cls.package) is None:
            print(f"{name}: skipped, no {cls.package} here (apt-get install {cls.package})", flush=True)
            continue
        peer = cls()
        try:
            peer.start()
            for mode in a.modes.split(","):
                measure(peer, mode, s)
        finally:
            peer.stop()


if __name__ == "__main__":
    main()
