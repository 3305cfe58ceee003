"""What the benches share: the services they start, the CPU and latency figures they print, and the
``--tracing``, ``--curve`` and ``--acl`` modes of producer_bench and consumer_bench.

The benches import it as their sibling module (``python bench/<name>.py`` puts bench/ first on the import
path); everything else they use is the installed rocketmesh. Its own command line runs the child processes
some modes need::

    python bench/benchkit.py serve-stub PORT    # name server and broker in one, answering at once, storing nothing
    python bench/benchkit.py serve-otlp         # an OTLP/HTTP receiver that counts spans
"""

from __future__ import annotations

import collections
import gc
import gzip
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

from rocketmesh import Admin, Message, Producer
from rocketmesh.broker.config import BrokerConfig
from rocketmesh.model.codec import decode_batch, encode_host, encode_message_id
from rocketmesh.remoting import (
    RemotingCommand,
    RemotingServer,
    RequestCode,
    RequestContext,
    ResponseCode,
    response_to,
)
from rocketmesh.runtime.launcher import (
    ServiceStartError,
    free_port,
    launch,
    stop_process,
)
from rocketmesh.runtime.python_process import python_module_argv

__all__ = ["ACL_MODES", "ADMIN_ACCOUNT", "BACKLOG_TOPIC", "CLIENT_ACCOUNT", "CURVE_MODES", "TRACING_MODES", "Services",
           "Tracing", "acl_setup", "cpu_per_process", "curve_keys", "fill_backlog", "free_port", "make_topic",
           "percentile", "process_label", "process_times", "process_tree", "report", "report_cpu", "watched_pids"]


TRACING_MODES = ("off", "sampled-off", "exported")


CURVE_MODES = ("off", "on")


ACL_MODES = ("off", "on")


#: ``--acl on``: the keywords the bench's producers and consumers sign with, and its Admin's; empty when off.
CLIENT_ACCOUNT: dict[str, str] = {}


ADMIN_ACCOUNT: dict[str, str] = {}


def acl_setup(mode: str) -> tuple[list[str], list[str], str | None]:
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


def curve_keys(mode: str) -> str | None:
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
        self.receiver: subprocess.Popen | None = None
        if mode == "off":
            return
        if mode not in TRACING_MODES:
            raise SystemExit(f"--tracing {mode!r} is not one of {', '.join(TRACING_MODES)}")
        self.receiver = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve-otlp"],
                                         stdout=subprocess.PIPE, text=True, start_new_session=True)
        endpoint = self.receiver.stdout.readline().split()[-1]
        env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        if mode == "sampled-off":
            env["OTEL_TRACES_SAMPLER"] = "always_off"
        os.environ.update(env)  # the services started from here on, and the SDK below, read them
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

        self.provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}),
                                       sampler=ALWAYS_OFF if mode == "sampled-off" else ALWAYS_ON)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(self.provider)

    def stop(self) -> int | None:
        if self.provider is not None:
            self.provider.shutdown()  # exports what is queued
        if self.receiver is None:
            return None
        self.receiver.terminate()
        out, _ = self.receiver.communicate(30)
        words = out.split()
        return int(words[-1]) if words else None


def serve_otlp() -> None:
    """Child process of --tracing: an OTLP/HTTP receiver on loopback that counts the spans it decodes (keeps
    none: a run exports millions). Prints its endpoint, then on SIGTERM the number of spans."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    count = 0
    lock = threading.Lock()
    answer = ExportTraceServiceResponse().SerializeToString()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            nonlocal count
            data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                data = gzip.decompress(data)
            req = ExportTraceServiceRequest.FromString(data)
            n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
            with lock:
                count += n
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: object) -> None:
            """Quiet: an access line per export would drown the figures."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    print(f"otlp receiver on http://127.0.0.1:{server.server_address[1]}", flush=True)
    stopping.wait()
    server.shutdown()
    print("spans received", count, flush=True)


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


class Services:
    """A name server and one broker (or one stub) as child processes in a temporary folder, started, waited
    for and stopped by rocketmesh.runtime.launcher (as ``rocketmesh up`` starts them); :meth:`start` adds
    another service (a scheduler, a txn-checker, a slave)."""

    def __init__(self, broker_sets: list[str], stub: bool = False, ha: bool = False,
                 acl_sets: tuple[list[str], list[str]] = ([], []), namesrv_sets: Iterable[str] = ()) -> None:
        # --acl on: the ACL keys go to the name server and the brokers, the account to the brokers and ha.
        acl_server, acl_account = acl_sets
        broker_sets = [*broker_sets, *acl_server, *acl_account]
        self.dir = tempfile.mkdtemp(prefix="bench-services-")
        self.ns_port, self.broker_port = free_port(), free_port()
        self.namesrv = f"127.0.0.1:{self.ns_port}"
        self.procs: list[subprocess.Popen] = []
        if stub:
            self._run("stub", [sys.executable, os.path.abspath(__file__), "serve-stub", str(self.ns_port)])
            return
        self.start("namesrv", "rocketmesh.namesrv", "-p", str(self.ns_port), "--listen-address", "127.0.0.1",
                   "--kv-config-path", os.path.join(self.dir, "kv.json"), *_sets(acl_server), *_sets(namesrv_sets))
        self.start("broker", "rocketmesh.broker", "-n", self.namesrv, "--listen-port", str(self.broker_port),
                   "--store-dir", os.path.join(self.dir, "store"), "--set", "brokerIP1=127.0.0.1",
                   *_sets(broker_sets))
        if ha:
            # A slave of the same group with the same settings (but its role) and the ha service feeding it.
            self.start("slave", "rocketmesh.broker", "-n", self.namesrv, "--listen-port", str(free_port()),
                       "--store-dir", os.path.join(self.dir, "slave-store"), "--set", "brokerIP1=127.0.0.1",
                       "--set", "brokerId=1", "--set", "brokerRole=SLAVE",
                       *_sets(item for item in broker_sets
                              if item.partition("=")[0].strip() not in ("brokerRole", "brokerId")))
            self.start("ha", "rocketmesh.ha", "-n", self.namesrv, "--listen-port", "0", "--set", "brokerName=broker-a",
                       *_sets(acl_account))

    def start(self, name: str, module: str, *args: str, timeout_s: float = 30.0) -> None:
        """Run ``python -P -m module args`` and wait for its ready line; SystemExit with its log's tail if it
        does not come up (everything started is stopped then)."""
        self._run(name, python_module_argv(module, *args), timeout_s)

    def _run(self, name: str, argv: list[str], timeout_s: float = 30.0) -> None:
        run = launch(name, argv, os.path.join(self.dir, f"{name}.log"))
        self.procs.append(run.proc)
        try:
            run.wait_ready(timeout_s)
        except ServiceStartError as exc:
            self.stop()
            raise SystemExit(str(exc)) from None

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc, 15)
        shutil.rmtree(self.dir, ignore_errors=True)


def _sets(items: Iterable[str]) -> list[str]:
    """``--set item`` for each of ``items``."""
    return [a for item in items for a in ("--set", item)]


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
    """``pid`` and its descendants."""
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


def thread_times(pids: list[int]) -> dict[tuple[int, int, str], tuple[int, int, int, int]]:
    """(pid, tid, thread name) -> (user, system clock ticks, voluntary, involuntary context switches), from
    /proc. A voluntary switch is the thread going to sleep, so each is one wake-up of it. This process's
    Python threads go by their Python names (the kernel knows them all as "python")."""
    out = {}
    own = {t.native_id: t.name for t in threading.enumerate()}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                if pid == os.getpid():
                    name = own.get(int(tid), name)
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    switches = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
            except OSError:
                continue
            out[(pid, int(tid), name)] = (int(fields[11]), int(fields[12]),
                                          int(switches.get("voluntary_ctxt_switches", 0)),
                                          int(switches.get("nonvoluntary_ctxt_switches", 0)))
    return out


def report_thread_cpu(before: dict, after: dict, messages: int, labels: dict[int, str]) -> None:
    """Each thread's CPU over a mode in microseconds per message, and how often it was woken (voluntary
    context switches) and preempted (involuntary ones) per message; threads that used no CPU left out."""
    hz = os.sysconf("SC_CLK_TCK")
    woken = 0.0
    for key, (user, system, vol, invol) in sorted(after.items()):
        if key not in before or not messages:
            continue
        du, ds = (user - before[key][0]) / hz, (system - before[key][1]) / hz
        dv, di = (vol - before[key][2]) / messages, (invol - before[key][3]) / messages
        if du + ds <= 0:
            continue
        woken += dv
        pid, tid, name = key
        print(f"    {labels.get(pid, str(pid)):<16} {name[:28]:<28} tid {tid:<7} "
              f"user {du * 1e6 / messages:7.1f} us/msg   system {ds * 1e6 / messages:7.1f} us/msg   "
              f"woken {dv:5.2f}/msg   preempted {di:5.2f}/msg", flush=True)
    print(f"    wake-ups a message, all threads above: {woken:.2f}", flush=True)


def watched_pids(services: Services | None) -> dict[int, str]:
    """This process (``client``) and the services' processes, by label."""
    watched = {os.getpid(): "client"}
    for proc in services.procs if services is not None else []:
        label = process_label(proc.pid)
        for pid in process_tree(proc.pid):
            watched[pid] = label
    return watched


class GcMeter:
    """The garbage collector's collections and the CPU time they took (of the thread each ran on) in this process
    while the meter is on (``gc.callbacks``, the collector's documented hooks; it is timed, not changed)."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def _hook(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.thread_time()
            return
        gen = info["generation"]
        self.collections[gen] += 1
        self.seconds[gen] += time.thread_time() - self._started

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._hook)

    def report(self, mode: str, messages: int) -> None:
        """One line: collections by generation, their time, and that time a message."""
        total = sum(self.seconds)
        print(f"{mode:<8} gc: {'/'.join(map(str, self.collections))} collections (generations 0/1/2), "
              f"{'/'.join(f'{s * 1000:.0f}' for s in self.seconds)} ms of CPU, "
              f"{total * 1e6 / max(messages, 1):.1f} us/msg", flush=True)


def report_cpu(mode: str, per: dict[str, float]) -> None:
    """One line of CPU per message: the client's, each service's, and their sum."""
    parts = ", ".join(f"{k} {v:.1f}" for k, v in per.items() if k != "total" and v >= 0.05)
    print(f"{mode:<8} cpu us/msg: {parts}, total {per.get('total', 0.0):.1f}", flush=True)


def report(mode: str, n: int, elapsed: float, lat_s: list[float], unit: str = "msg") -> None:
    lat = sorted(lat_s)
    print(f"{mode:<8} {n:>9,} {unit}s {elapsed:6.2f} s {n / elapsed:>10,.0f} {unit}/s   "
          f"p50 {percentile(lat, 0.50) * 1000:7.3f} ms   p99 {percentile(lat, 0.99) * 1000:7.3f} ms   "
          f"p99.9 {percentile(lat, 0.999) * 1000:7.3f} ms", flush=True)


#: The backlog topic consumer_bench drains and spark_bench reads.
BACKLOG_TOPIC = "ConsumerBench"


def make_topic(namesrv: str, topic: str, queues: int = 8) -> None:
    """Create ``topic`` with ``queues`` read and write queues (signed with ADMIN_ACCOUNT under --acl on) and wait
    until the name server routes it."""
    with Admin(namesrv, **ADMIN_ACCOUNT) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        admin.wait_topic_route(topic)


def fill_backlog(namesrv: str, n: int, size: int, queues: int, topic: str = BACKLOG_TOPIC) -> None:
    """Make ``topic`` (``queues`` queues) hold at least ``n`` messages of ``size`` bytes: a run after the first
    on the same services finds them there."""
    make_topic(namesrv, topic, queues)
    with Admin(namesrv, **ADMIN_ACCOUNT) as admin:
        have = sum(o.max_offset for o in admin.topic_status(topic).values())
    if have >= n:
        return
    body = b"x" * size
    batch = 64
    t0 = time.monotonic()
    with Producer("bench-fill", namesrv, **CLIENT_ACCOUNT) as p:
        futures = []
        for _ in range(0, n - have, batch):
            futures.append(p.send_batch_async([Message(topic, body) for _ in range(batch)]))
            if len(futures) >= 32:
                futures.pop(0).result()
        for f in futures:
            f.result()
    print(f"filled {n - have} messages in {time.monotonic() - t0:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["serve-stub"] and len(args) == 2:
        serve_stub(int(args[1]))
    elif args == ["serve-otlp"]:
        serve_otlp()
    else:
        print("usage: benchkit.py serve-stub PORT | serve-otlp", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
