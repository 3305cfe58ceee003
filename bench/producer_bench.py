"""Producer throughput and latency against a local name server and broker it starts itself.

Run::

    python bench/producer_bench.py                     # every mode, 5 s each, 1 KiB bodies
    python bench/producer_bench.py --modes sync1,async --duration 10
    python bench/producer_bench.py --namesrv 127.0.0.1:9876   # use running services instead
    python bench/producer_bench.py --modes sync1 --profile     # cProfile of the client side (main thread)
    python bench/producer_bench.py --stub              # against a stub that answers at once: the client's ceiling
    python bench/producer_bench.py --modes sync1 --thread-cpu   # CPU per message of each busy thread
    python bench/producer_bench.py --ha --set brokerRole=SYNC_MASTER --modes sync1,sync16,sync64   # with a slave
    python bench/producer_bench.py --modes sync1,async --tracing exported   # every span exported (OTLP/HTTP)
    python bench/producer_bench.py --modes sync1,async --curve on   # every connection CurveZMQ-encrypted
    python bench/producer_bench.py --modes sync1,async --acl on     # plain ACL on, every request signed

Modes:
  sync1, sync4, sync16, sync64   send() in a loop on 1, 4, 16, 64 threads
  async                  send_async() keeping --window requests in flight (latency = submit to completion)
  async-auto             the same with a Producer(auto_batch=True): single sends coalesced into batches
  batch                  send_batch() of --batch messages (latency per batch, msg/s counts messages)
  batch-async            send_batch_async() keeping --batch-window batches in flight
  paced                  send() on one thread paced at --rate msg/s (the latency a steady load sees)

Prints msg/s and p50/p99 latency (ms) per mode, and the CPU each message took
in this process and in each service (microseconds: a figure that other work on
the machine moves far less than msg/s). The broker runs with its
default config but for --set overrides (commit log files of 256 MiB here,
so a run does not start by zero-filling a 1 GiB file). ``--stub`` replaces
name server and broker by one child process that answers every request at
once without storing anything, which shows what the client side alone costs.

``--tracing`` (also consumer_bench's): ``off`` (the default) configures no
OpenTelemetry SDK anywhere; ``sampled-off`` gives this process a TracerProvider
whose sampler is ALWAYS_OFF and starts the services with
``OTEL_TRACES_EXPORTER=otlp`` and ``OTEL_TRACES_SAMPLER=always_off``;
``exported`` records every span, in this process and in the services, and
exports it with a BatchSpanProcessor over OTLP/HTTP to a receiver on loopback
(a child process, tests/otlp_receiver.py, that decodes and counts them).

``--curve on`` (also consumer_bench's): a key pair made for the run (``rocketmesh keys``' layout, in a
temporary directory) is named by ROCKETMESH_CURVE_SECRET_KEY_FILE in this process's environment, so the
services it starts serve with CurveZMQ and its clients connect with it (with the server's key pair as their
own: the handshake and per-message crypto cost the same as with a client pair). Not with --namesrv: running
services must be started with the keys by whoever started them.

``--acl on`` (also consumer_bench's): the name server and broker run with aclEnable and a plain_acl.yml made
for the run; producers and consumers sign every request with a non-admin account allowed PUB|SUB on every
topic and group (so each request pays for the signature and the permission lookup), the admin (topic
creation) and the broker's registration with an admin account. Not with --namesrv.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import itertools
import os
import pstats
import shutil
import subprocess
import sys
from concurrent.futures import Future
import tempfile
import threading
import time
from typing import Callable, Optional

import orjson

from rocketmesh import Admin, Message, Producer
from rocketmesh.broker.config import BrokerConfig
from rocketmesh.model.codec import decode_batch, encode_host, encode_message_id
from rocketmesh.remoting import RemotingCommand, RemotingServer, RequestCode, RequestContext, ResponseCode, response_to

# The tests' helpers (free_port, the OTLP receiver) serve the benches too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from procs import free_port  # noqa: E402

TOPIC = "ProducerBench"
GROUP = "bench-producer"
#: The topics the modes send to, in turn (``--topics``).
_topics = itertools.cycle([TOPIC])


def next_topic() -> str:
    """The topic of the next send: ``--topics`` topics in turn (one topic unless asked)."""
    return next(_topics)


TRACING_MODES = ("off", "sampled-off", "exported")
CURVE_MODES = ("off", "on")
ACL_MODES = ("off", "on")
#: ``--acl on``: the keywords the bench's producers and consumers sign with, and its Admin's; empty when off.
CLIENT_ACCOUNT: dict[str, str] = {}
ADMIN_ACCOUNT: dict[str, str] = {}


def acl_setup(mode: str) -> tuple[list[str], list[str], Optional[str]]:
    """``--acl on``: write a plain_acl.yml for the run and fill CLIENT_ACCOUNT / ADMIN_ACCOUNT (before any
    client is made). Returns the ``--set`` items of the servers (name server and brokers), those of the services
    that sign (brokers, ha), and the directory to remove at the end (None: off)."""
    if mode == "off":
        return [], [], None
    acl_dir = tempfile.mkdtemp(prefix="bench-acl-")
    path = os.path.join(acl_dir, "plain_acl.yml")
    with open(path, "w") as f:
        f.write("accounts:\n"
                "  - {accessKey: benchadmin, secretKey: benchadmin-secret, admin: true}\n"
                "  - {accessKey: benchclient, secretKey: benchclient-secret, defaultTopicPerm: PUB|SUB,"
                " defaultGroupPerm: SUB}\n")
    CLIENT_ACCOUNT.update(access_key="benchclient", secret_key="benchclient-secret")
    ADMIN_ACCOUNT.update(access_key="benchadmin", secret_key="benchadmin-secret")
    return (["aclEnable=true", f"aclFile={path}"], ["accessKey=benchadmin", "secretKey=benchadmin-secret"],
            acl_dir)


def curve_keys(mode: str) -> Optional[str]:
    """``--curve on``: make a key pair in a temporary directory and name it in this process's environment (before
    the services start and before any client is made); returns the directory to remove at the end (None: off)."""
    if mode == "off":
        return None
    from rocketmesh.cli.security import make_keys
    from rocketmesh.remoting.transport.curve import SECRET_KEY_ENV

    key_dir = tempfile.mkdtemp(prefix="bench-curve-")
    os.environ[SECRET_KEY_ENV] = make_keys(key_dir)["server_secret"]
    return key_dir


class Tracing:
    """``--tracing``: this process's OpenTelemetry SDK and the ``OTEL_*`` environment of the services it starts
    (set up before they start). ``stop()`` after the services stopped: it flushes this process's spans,
    stops the receiver and returns how many spans it got (None when ``off``)."""

    def __init__(self, mode: str, service_name: str) -> None:
        self.mode = mode
        self.provider = None
        self.receiver: Optional[subprocess.Popen] = None
        if mode == "off":
            return
        if mode not in TRACING_MODES:
            raise SystemExit(f"--tracing {mode!r} is not one of {', '.join(TRACING_MODES)}")
        self.receiver = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve-otlp"],
                                         stdout=subprocess.PIPE, text=True, start_new_session=True)
        endpoint = self.receiver.stdout.readline().split()[-1]
        env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        if mode == "sampled-off":
            env["OTEL_TRACES_SAMPLER"] = "always_off"
        os.environ.update(env)  # the services started from here on, and the SDK below, read them
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

        self.provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}),
                                       sampler=ALWAYS_OFF if mode == "sampled-off" else ALWAYS_ON)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(self.provider)

    def stop(self) -> Optional[int]:
        if self.provider is not None:
            self.provider.shutdown()  # exports what is queued
        if self.receiver is None:
            return None
        self.receiver.terminate()
        out, _ = self.receiver.communicate(30)
        words = out.split()
        return int(words[-1]) if words else None


def serve_otlp() -> None:
    """Child process of --tracing: the tests' OTLP/HTTP receiver, counting the spans it decodes (not keeping
    them: a run exports millions). Prints its endpoint, then on SIGTERM the number of spans."""
    import signal
    from otlp_receiver import OtlpReceiver

    class Counting(OtlpReceiver):
        count = 0

        def _add(self, req) -> None:  # noqa: ANN001 - an ExportTraceServiceRequest
            n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
            with self._lock:
                self.count += n

    rx = Counting().start()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    print("otlp receiver on", rx.endpoint, flush=True)
    stopping.wait()
    rx.stop()
    print("spans received", rx.count, flush=True)


def disk_use(path: str) -> int:
    """Bytes of disk the files under ``path`` take (allocated blocks, not sizes)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


class Services:
    """A name server and one broker (or one stub) as child processes in a temporary folder."""

    def __init__(self, broker_sets: list[str], stub: bool = False, ha: bool = False,
                 acl_sets: tuple[list[str], list[str]] = ([], [])) -> None:
        # --acl on: the ACL keys go to the name server and the brokers, the account to the brokers and ha.
        acl_server, acl_account = acl_sets
        broker_sets = [*broker_sets, *acl_server, *acl_account]
        self.dir = tempfile.mkdtemp(prefix="producer-bench-")
        self.ns_port, self.broker_port = free_port(), free_port()
        self.namesrv = f"127.0.0.1:{self.ns_port}"
        self.procs: list[subprocess.Popen] = []
        if stub:
            self._start([os.path.abspath(__file__), "--serve-stub", str(self.ns_port)], "stub", "listening on")
            return
        self._start(["-m", "rocketmesh.namesrv", "-p", str(self.ns_port), "--listen-address", "127.0.0.1",
                     "--kv-config-path", os.path.join(self.dir, "kv.json"),
                     *[a for item in acl_server for a in ("--set", item)]], "namesrv", "listening on")
        args = ["-m", "rocketmesh.broker", "-n", self.namesrv, "--listen-port", str(self.broker_port),
                "--store-dir", os.path.join(self.dir, "store"), "--set", "brokerIP1=127.0.0.1"]
        for item in broker_sets:
            args += ["--set", item]
        self._start(args, "broker", "listening on")
        if ha:
            # A slave of the same group with the same settings (but its role) and the ha service feeding it.
            slave = ["-m", "rocketmesh.broker", "-n", self.namesrv, "--listen-port", str(free_port()),
                     "--store-dir", os.path.join(self.dir, "slave-store"), "--set", "brokerIP1=127.0.0.1",
                     "--set", "brokerId=1", "--set", "brokerRole=SLAVE"]
            for item in broker_sets:
                if item.partition("=")[0].strip() not in ("brokerRole", "brokerId"):
                    slave += ["--set", item]
            self._start(slave, "slave", "listening on")
            self._start(["-m", "rocketmesh.ha", "-n", self.namesrv, "--listen-port", "0",
                         "--set", "brokerName=broker-a", *[a for item in acl_account for a in ("--set", item)]],
                        "ha", "listening on")

    def _start(self, args: list[str], name: str, ready: str, timeout_s: float = 30.0) -> None:
        out = open(os.path.join(self.dir, f"{name}.stdout"), "w+")
        err = open(os.path.join(self.dir, f"{name}.stderr"), "w")
        proc = subprocess.Popen([sys.executable, *args], stdout=out, stderr=err, start_new_session=True)
        self.procs.append(proc)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            out.seek(0)
            if ready in out.read():
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise SystemExit(f"{name} did not start; see {self.dir}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def serve_stub(port: int) -> None:
    """Child process of --stub: name server and broker in one, answering at once, storing nothing."""
    # Busy-polls as a broker does by default, so the ceiling compares with a real broker's figures.
    server = RemotingServer(f"127.0.0.1:{port}", "stub", busy_poll_us=BrokerConfig.server_busy_poll_us)
    addr = f"127.0.0.1:{port}"
    host = encode_host("127.0.0.1", port)
    offsets: dict[int, int] = collections.defaultdict(int)
    queues = 8
    route = orjson.dumps({
        "queueDatas": [{"brokerName": "stub", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
                        "topicSysFlag": 0}],
        "brokerDatas": [{"cluster": "StubCluster", "brokerName": "stub", "brokerAddrs": {"0": addr}}],
    })
    cluster = orjson.dumps({
        "brokerAddrTable": {"stub": {"cluster": "StubCluster", "brokerName": "stub", "brokerAddrs": {"0": addr}}},
        "clusterAddrTable": {"StubCluster": ["stub"]},
    })

    def send(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        qid = cmd.ext["queueId"]
        n = len(decode_batch(cmd.ext["topic"], cmd.body)) if cmd.ext.get("batch") else 1
        first = offsets[qid]
        offsets[qid] = first + n
        ids = ",".join(encode_message_id(host, (first + i) * 1000 + qid) for i in range(n))
        return response_to(cmd, ResponseCode.SUCCESS, None, {"msgId": ids, "queueId": qid, "queueOffset": first})

    def ok(cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        return response_to(cmd, ResponseCode.SUCCESS)

    server.register(RequestCode.SEND_MESSAGE, send)
    server.register(RequestCode.SEND_BATCH_MESSAGE, send)
    server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, lambda c, _: response_to(c, ResponseCode.SUCCESS, body=route))
    server.register(RequestCode.GET_BROKER_CLUSTER_INFO,
                    lambda c, _: response_to(c, ResponseCode.SUCCESS, body=cluster))
    server.register_default(ok)
    server.start()
    print("stub listening on", addr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the broker's dispatch worker is its child)."""
    pids = [pid]
    for p in pids:
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:  # gone meanwhile
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    pids.extend(int(c) for c in f.read().split())
            except OSError:
                pass
    return pids


def process_label(pid: int) -> str:
    """A service process's module name (``rocketmesh.broker`` -> ``broker``), or its pid."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return str(pid)
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1].rpartition(".")[2]
    return str(pid)


def thread_times(pids: list[int]) -> dict[tuple[int, int, str], tuple[int, int]]:
    """(pid, tid, thread name) -> (user, system) clock ticks, from /proc."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[(pid, int(tid), name)] = (int(fields[11]), int(fields[12]))
    return out


def report_thread_cpu(before: dict, after: dict, messages: int, labels: dict[int, str]) -> None:
    """Each thread's CPU over a mode, in microseconds per message (threads that used none left out)."""
    hz = os.sysconf("SC_CLK_TCK")
    for key, (user, system) in sorted(after.items()):
        if key not in before or not messages:
            continue
        du, ds = (user - before[key][0]) / hz, (system - before[key][1]) / hz
        if du + ds <= 0:
            continue
        pid, tid, name = key
        print(f"    {labels.get(pid, str(pid)):<16} {name:<20} tid {tid:<7} "
              f"user {du * 1e6 / messages:7.1f} us/msg   system {ds * 1e6 / messages:7.1f} us/msg", flush=True)


def process_times(pids: list[int]) -> dict[int, int]:
    """pid -> user + system clock ticks of the whole process (threads that ended included), from /proc."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = int(fields[11]) + int(fields[12])
    return out


def cpu_per_process(before: dict[int, int], after: dict[int, int], messages: int,
                    labels: dict[int, str]) -> dict[str, float]:
    """CPU microseconds per message of each process (by label) between two ``process_times``, and ``total``."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = collections.defaultdict(float)
    for pid, ticks in after.items():
        if pid in before and messages:
            us = (ticks - before[pid]) / hz * 1e6 / messages
            out[labels.get(pid, str(pid))] += us
            out["total"] += us
    return out


def watched_pids(services: Optional["Services"]) -> dict[int, str]:
    """This process (``client``) and the services' processes, by label."""
    watched = {os.getpid(): "client"}
    for proc in services.procs if services is not None else []:
        label = process_label(proc.pid)
        for pid in process_tree(proc.pid):  # the broker's dispatch worker counts as the broker
            watched[pid] = label
    return watched


def report_cpu(mode: str, per: dict[str, float]) -> None:
    """One line of CPU per message: the client's, each service's, and their sum."""
    parts = ", ".join(f"{k} {v:.1f}" for k, v in per.items() if k != "total" and v >= 0.05)
    print(f"{mode:<8} cpu us/msg: {parts}, total {per.get('total', 0.0):.1f}", flush=True)


def report(mode: str, n: int, elapsed: float, lat_s: list[float], unit: str = "msg") -> None:
    lat = sorted(lat_s)
    print(f"{mode:<8} {n:>9,} {unit}s {elapsed:6.2f} s {n / elapsed:>10,.0f} {unit}/s   "
          f"p50 {percentile(lat, 0.50) * 1000:7.3f} ms   p99 {percentile(lat, 0.99) * 1000:7.3f} ms   "
          f"p99.9 {percentile(lat, 0.999) * 1000:7.3f} ms", flush=True)


def run_sync(producer: Producer, threads: int, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    stop_at = time.perf_counter() + duration
    lats: list[list[float]] = []
    start = threading.Barrier(threads + 1)

    def worker(inline: bool = False) -> None:
        mine: list[float] = []
        lats.append(mine)
        send = producer.send
        clock = time.perf_counter
        if not inline:
            start.wait()
        while True:
            t0 = clock()
            if t0 >= stop_at:
                return
            send(Message(next_topic(), body))
            mine.append(clock() - t0)

    if threads == 1:  # on this thread, so that --profile sees it
        t0 = time.perf_counter()
        worker(inline=True)
        return len(lats[0]), time.perf_counter() - t0, lats[0]
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    start.wait()
    for t in ts:
        t.join(duration + 30)
    elapsed = time.perf_counter() - t0
    all_lat = [x for chunk in lats for x in chunk]
    return len(all_lat), elapsed, all_lat


def run_windowed(send: Callable[[], Future], per_send: int, window: int,
                 duration: float) -> tuple[int, float, list[float]]:
    """Keep ``window`` sends in flight for ``duration`` s; latency is submit to completion."""
    inflight: collections.deque = collections.deque()
    lat: list[float] = []
    clock = time.perf_counter
    record = lat.append
    t_start = clock()
    stop_at = t_start + duration
    n = 0
    while True:
        now = clock()
        if now >= stop_at:
            break
        if len(inflight) >= window:
            inflight.popleft().result(30)
        fut = send()
        fut.add_done_callback(lambda f, t0=now: record(clock() - t0))
        inflight.append(fut)
        n += per_send
    for fut in inflight:
        fut.result(30)
    return n, clock() - t_start, lat


def run_async(producer: Producer, window: int, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    return run_windowed(lambda: producer.send_async(Message(next_topic(), body)), 1, window, duration)


def run_async_auto(namesrv: str, window: int, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    """``async`` with a second producer that has auto_batch on (warmed up like the first)."""
    with Producer(GROUP + "-auto", namesrv, auto_batch=True, **CLIENT_ACCOUNT) as producer:
        for _ in range(200):
            producer.send(Message(TOPIC, body))
        return run_async(producer, window, duration, body)


def run_batch(producer: Producer, size: int, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    lat: list[float] = []
    clock = time.perf_counter
    t_start = clock()
    stop_at = t_start + duration
    batches = 0
    while True:
        t0 = clock()
        if t0 >= stop_at:
            break
        topic = next_topic()
        producer.send_batch([Message(topic, body) for _ in range(size)])
        lat.append(clock() - t0)
        batches += 1
    return batches * size, clock() - t_start, lat


def run_batch_async(producer: Producer, size: int, window: int, duration: float,
                    body: bytes) -> tuple[int, float, list[float]]:
    """Batches of ``size`` with ``window`` batches in flight (latency per batch, msg/s counts messages)."""
    def send() -> Future:
        topic = next_topic()
        return producer.send_batch_async([Message(topic, body) for _ in range(size)])
    return run_windowed(send, size, window, duration)


def run_paced(producer: Producer, rate: float, duration: float, body: bytes) -> tuple[int, float, list[float]]:
    lat: list[float] = []
    clock = time.perf_counter
    interval = 1.0 / rate
    t_start = clock()
    total = int(duration * rate)
    for i in range(total):
        due = t_start + i * interval
        wait = due - clock()
        if wait > 0:
            time.sleep(wait)
        t0 = clock()
        producer.send(Message(next_topic(), body))
        lat.append(clock() - t0)
    return total, clock() - t_start, lat


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namesrv", help="use running services at this name server instead of starting them")
    ap.add_argument("--modes", default="sync1,sync4,sync16,async,async-auto,batch,batch-async,paced")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per mode")
    ap.add_argument("--body", type=int, default=1024, help="body bytes")
    ap.add_argument("--window", type=int, default=1000, help="async requests in flight")
    ap.add_argument("--batch", type=int, default=32, help="messages per batch")
    ap.add_argument("--batch-window", type=int, default=32, help="batches in flight for batch-async")
    ap.add_argument("--rate", type=float, default=2000.0, help="paced mode msg/s")
    ap.add_argument("--queues", type=int, default=8, help="queues per topic")
    ap.add_argument("--topics", type=int, default=1,
                    help="send to this many topics in turn (each with --queues queues); prints the store's disk use")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker config override")
    ap.add_argument("--profile", action="store_true", help="cProfile the main thread of each mode")
    ap.add_argument("--thread-cpu", action="store_true",
                    help="print each thread's CPU time per message (this process and the services it started)")
    ap.add_argument("--stub", action="store_true", help="a stub that answers at once instead of real services")
    ap.add_argument("--ha", action="store_true",
                    help="give the broker a slave and an ha service (--set brokerRole=SYNC_MASTER to wait for it)")
    ap.add_argument("--tracing", choices=TRACING_MODES, default="off",
                    help="no OpenTelemetry SDK (off), an SDK that samples nothing, or every span exported "
                         "over OTLP/HTTP to a local receiver; this process and the services alike")
    ap.add_argument("--curve", choices=CURVE_MODES, default="off",
                    help="CurveZMQ on every connection (keys made for the run), this process and the services alike")
    ap.add_argument("--acl", choices=ACL_MODES, default="off",
                    help="plain ACL on the name server and broker, every client request signed (an account made "
                         "for the run)")
    ap.add_argument("--serve-stub", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--serve-otlp", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_stub:
        serve_stub(args.serve_stub)
        return 0
    if args.serve_otlp:
        serve_otlp()
        return 0
    tracing = Tracing(args.tracing, "producer-bench")
    curve_dir = curve_keys(args.curve)
    *acl_sets, acl_dir = acl_setup(args.acl)

    services = None
    if args.namesrv is None:
        services = Services([f"mappedFileSizeCommitLog={256 * 1024 * 1024}", *args.set], stub=args.stub,
                            ha=args.ha, acl_sets=tuple(acl_sets))
        namesrv = services.namesrv
    else:
        namesrv = args.namesrv
    body = os.urandom(args.body)
    runners: dict[str, Callable[[Producer], tuple[int, float, list[float]]]] = {
        "sync1": lambda p: run_sync(p, 1, args.duration, body),
        "sync4": lambda p: run_sync(p, 4, args.duration, body),
        "sync16": lambda p: run_sync(p, 16, args.duration, body),
        "sync64": lambda p: run_sync(p, 64, args.duration, body),
        "async": lambda p: run_async(p, args.window, args.duration, body),
        "async-auto": lambda p: run_async_auto(namesrv, args.window, args.duration, body),
        "batch": lambda p: run_batch(p, args.batch, args.duration, body),
        "batch-async": lambda p: run_batch_async(p, args.batch, args.batch_window, args.duration, body),
        "paced": lambda p: run_paced(p, args.rate, args.duration, body),
    }
    global _topics
    names = [TOPIC] if args.topics == 1 else [f"{TOPIC}-{i}" for i in range(args.topics)]
    _topics = itertools.cycle(names)
    try:
        with Admin(namesrv, **ADMIN_ACCOUNT) as admin:
            for name in names:
                admin.create_topic(name, args.queues, args.queues)
            for name in names:
                admin.wait_topic_route(name, timeout_s=60)
        with Producer(GROUP, namesrv, **CLIENT_ACCOUNT) as producer:
            # Warm-up: connections, routes, the broker's first files, every queue's consume-queue file (made
            # once per queue: with many topics, making them would otherwise be most of a short run).
            for _ in range(max(2000, 2 * len(names) * args.queues)):
                producer.send(Message(next_topic(), body))
            print(f"body {args.body} B, {len(names)} topic(s) x {args.queues} queues, {args.duration:.0f} s per "
                  f"mode, namesrv {namesrv}", flush=True)
            for mode in args.modes.split(","):
                run = runners[mode.strip()]
                prof = cProfile.Profile() if args.profile else None
                watched = watched_pids(services)
                cpu_before, proc_before = thread_times(list(watched)), process_times(list(watched))
                if prof:
                    prof.enable()
                n, elapsed, lat = run(producer)
                if prof:
                    prof.disable()
                cpu_after, proc_after = thread_times(list(watched)), process_times(list(watched))
                report(mode, n, elapsed, lat)
                report_cpu(mode, cpu_per_process(proc_before, proc_after, n, watched))
                if args.thread_cpu:
                    report_thread_cpu(cpu_before, cpu_after, n, watched)
                if prof:
                    pstats.Stats(prof).sort_stats("tottime").print_stats(20)
            if services is not None and not args.stub:
                store = os.path.join(services.dir, "store")
                print(f"store disk use: {disk_use(store) / 2**20:,.0f} MiB (consume queues "
                      f"{disk_use(os.path.join(store, 'consumequeue')) / 2**20:,.1f} MiB, index "
                      f"{disk_use(os.path.join(store, 'index')) / 2**20:,.1f} MiB)", flush=True)
    finally:
        if services is not None:
            services.stop()
        spans = tracing.stop()
        if spans is not None:
            print(f"tracing {args.tracing}: {spans:,} spans received", flush=True)
        if curve_dir is not None:
            shutil.rmtree(curve_dir, ignore_errors=True)
        if acl_dir is not None:
            shutil.rmtree(acl_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
