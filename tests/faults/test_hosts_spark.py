"""Spark on a cluster of hosts: the merchant_totals job on a standalone cluster, one worker's host cut off mid-run.

Every process runs in a simulated host of its own (netkit.py): a name server and a broker on two hosts; a
Spark standalone master and two workers (one core each) started from PySpark's own distribution
(``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) on three more; the driver,
``spark-submit --master spark://...`` of the ``merchant_totals`` job in client mode, on a sixth. The test
process is the client host: it feeds the job's input topic with numbered orders over the bridge.

- A worker's host cut off while a task runs on it: its port on the bridge goes down once its executor's log
  shows a task started and not finished, with the job's micro-batches running and orders still flowing.
  The master declares the worker dead, the driver loses its executor and runs the lost tasks again on the
  other worker, and the job keeps going: batches planned after the cut complete on the one worker left.
- Exactly once: the orders are laid out so that the job's own totals name them. Order ``i`` falls in event-time
  window ``i // 100`` (10 s windows, an order every 100 ms of event time), merchant ``m-(i % 5)``, and its amount is
  ``2^((i % 100) // 5)`` cents, a power of two no other order of its (window, merchant) has. A row of the
  parquet output whose order count and amount equal the sent orders' count and sum holds each of those orders
  exactly once (n distinct powers of two are the only n powers of two with that sum), so the parquet output
  matching the sent orders row for row shows that none was lost or counted twice. The alerts the job sends to
  a topic on the broker (one per (window, merchant) whose orders are all there) arrive once each.

Figures in RELIABILITY.md: orders sent, acknowledged, lost, duplicated; recovery is the time from the cut to
the completion of the first micro-batch planned after it (one that can use the remaining worker only).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import unquote, urlparse

import orjson
import pytest
from hostkit import BROKER_DEFAULTS
from netkit import Host, Net

from aptkit import unavailable
from clientkit import FAST_CLIENT, make_topic
from procs import BrokerProcess, NamesrvProcess, ServiceProcess, wait_for
from reliability import ReliabilityRecorder
from rocketmesh import Admin, Message, Producer, PullConsumer
from rocketmesh.client.results import SendStatus

# The job needs the `spark` extra: without it, this module is one skip, not a collection error.
for _module in ("pyspark", "pyarrow"):
    pytest.importorskip(_module, reason=f"{_module} is not installed: the Spark tests need the spark extra "
                                        "(pip install 'rocketmesh[spark]')")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

#: Minutes of tests: scheduled first (tests/conftest.py).
pytestmark = pytest.mark.heavy

#: PySpark's own distribution: bin/spark-class, bin/spark-submit and the jars.
SPARK_HOME = os.path.dirname(importlib.util.find_spec("pyspark").origin)  # type: ignore[arg-type, union-attr]
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
TOPIC = "Orders"
ALERTS = "MerchantAlerts"
GROUP = "merchant-totals"

#: The orders' layout (see the module's docstring): event time an order, window, orders a window, merchants.
SPACING_MS = 100
WINDOW_MS = 10_000
PER_WINDOW = WINDOW_MS // SPACING_MS
MERCHANTS = 5
#: Event time of order 0, on a window's start.
START_MS = 1_764_000_000_000
#: The amount of a (window, merchant) whose orders are all there: 2^0 + ... + 2^19 cents. The alert threshold.
FULL_CENTS = 2 ** (PER_WINDOW // MERCHANTS) - 1
#: Orders a second from the client host, sent 20 at a time (2 s of event time a send: far less than the 10 s
#: watermark, so an order read one micro-batch after a later one is never dropped as late).
RATE = 40
SEND_BATCH = 20

#: Every JVM of the cluster on two shared cores, for a run of a minute or two: the serial collector and the
#: quick compiler only (no parallel GC threads, no optimizing compiler competing with the job for the cores).
JVM_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
#: Spark's default logging (INFO to stderr) with the driver's task scheduler kept at INFO under the job's WARN:
#: its lines say which task ran where (TID, host, executor) and which failed because its executor was lost.
LOG4J2 = """\
rootLogger.level = info
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = info
"""
#: The master and the workers (SPARK_MASTER_OPTS, SPARK_WORKER_OPTS): a worker heartbeats every
#: spark.worker.timeout / 4 and the master drops one it has not heard from for spark.worker.timeout (60 s by
#: default), telling the driver that its executors are lost. At 5 s, a host cut off is dropped within 5-10 s.
DAEMON_OPTS = "-Dspark.worker.timeout=5"
#: The driver's failure detection, for the same reason: an executor heartbeats every second and is given up
#: after spark.network.timeout without one (120 s by default), looked for every spark.network.timeoutInterval
#: (60 s by default). A shuffle fetch from the lost executor's host gives up connecting after 2 s (a connection
#: on this bridge is made in a millisecond; the default is spark.network.timeout) and is retried once a second
#: later, not three times 5 s apart: the reducer then fails and its stage runs again without that executor.
DRIVER_CONF = {
    "spark.executor.heartbeatInterval": "1s",
    "spark.network.timeout": "10s",
    "spark.network.timeoutInterval": "1s",
    "spark.shuffle.io.connectionCreationTimeout": "2s",
    "spark.shuffle.io.maxRetries": "1",
    "spark.shuffle.io.retryWait": "1s",
}

#: Bounds of the waits on this shared, busy two-core machine.
FIRST_BATCHES_S = 120
BATCHES_AFTER_CUT = 3
AFTER_CUT_S = 90
DRAIN_S = 60


# --- processes outside start_on: Spark's JVMs ----------------------------------------------------------------

class Spawned:
    """A Spark process (and its children) run in a host: its output in ``log``."""

    def __init__(self, name: str, proc: subprocess.Popen, log: Path) -> None:
        self.name, self.proc, self.log = name, proc, log

    def output(self, tail: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-tail:]

    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def spawn(tmp_path: Path, make_net: Callable[..., Net]) -> Iterator[Callable[..., Spawned]]:
    """Factory: ``spawn(host, "master", argv, env)`` runs ``argv`` in ``host`` in a session of its own (the
    process group of a JVM and what it starts: executors, Python workers). Every group is killed at teardown,
    also after a failure, before the hosts go (the hosts' removal then kills whatever left the group)."""
    started: list[Spawned] = []

    def start(host: Host, name: str, argv: list[str], env: dict[str, str]) -> Spawned:
        log = tmp_path / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(host.exec_argv(*argv), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        started.append(Spawned(name, proc, log))
        return started[-1]

    yield start
    for s in reversed(started):
        with contextlib.suppress(ProcessLookupError):  # the group ended already
            os.killpg(s.proc.pid, signal.SIGKILL)
        s.proc.wait(10)


def spark_env(tmp_path: Path, host: Host) -> dict[str, str]:
    """The environment of a Spark process in ``host``: this PySpark's distribution, no configuration files but
    the logging's (:data:`LOG4J2`), everything bound to the host's address (SPARK_LOCAL_IP: nothing listens on
    loopback only or on another host's address), its scratch space of its own, small daemons, this Python on
    the driver and executors."""
    conf = tmp_path / "spark-conf"
    conf.mkdir(exist_ok=True)
    (conf / "log4j2.properties").write_text(LOG4J2)
    return {**os.environ, "SPARK_HOME": SPARK_HOME, "SPARK_CONF_DIR": str(conf), "SPARK_LOCAL_IP": host.addr,
            "SPARK_LOCAL_DIRS": str(tmp_path / f"{host.name}-scratch"), "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": JVM_OPTS, "SPARK_MASTER_OPTS": DAEMON_OPTS, "SPARK_WORKER_OPTS": DAEMON_OPTS,
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def spark_bin(name: str) -> list[str]:
    """A script of the distribution's bin/ (run by bash: a wheel's files need not keep their mode bits)."""
    return ["bash", os.path.join(SPARK_HOME, "bin", name)]


#: The master's web UI is asked directly, never through a proxy of this machine's environment.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def master_state(master: Host) -> dict:
    """The master's state as its web UI gives it (/json/): workers with their state and cores, applications."""
    with _NO_PROXY.open(f"http://{master.addr}:{MASTER_UI_PORT}/json/", timeout=3) as resp:
        return json.loads(resp.read())


def master_answers(master: Host) -> dict | None:
    """:func:`master_state`, or None while the master does not answer, or answers /json/ with its HTML page
    (its web UI is up before the JSON handler is, while it starts)."""
    try:
        return master_state(master)
    except (OSError, ValueError):  # json.JSONDecodeError is a ValueError
        return None


def alive_workers(master: Host) -> int:
    """How many workers the master counts alive (0 while it does not answer yet)."""
    state = master_answers(master)
    return sum(w["state"] == "ALIVE" for w in state["workers"]) if state else 0


def workers_by_host(state: dict) -> dict[str, dict]:
    """The master's workers by host address (the newest registration of each)."""
    return {w["host"]: w for w in sorted(state["workers"], key=lambda w: w["lastheartbeat"])}


# --- the job's input -------------------------------------------------------------------------------------------

def order(i: int) -> tuple[int, str, int]:
    """Order ``i``'s window, merchant and amount in cents (see the module's docstring)."""
    return i // PER_WINDOW, f"m-{i % MERCHANTS}", 2 ** ((i % PER_WINDOW) // MERCHANTS)


def order_message(i: int, event_time: int | None = None, merchant: str | None = None, cents: int = 0) -> Message:
    """Order ``i`` as the job reads it (order_events' body: order id as the key, merchant as the tag)."""
    _, m, c = order(i)
    m, c = merchant or m, cents or c
    body = {"order_id": f"o-{i}", "merchant": m, "amount": c / 100,
            "event_time": START_MS + i * SPACING_MS if event_time is None else event_time}
    return Message(TOPIC, orjson.dumps(body), keys=f"o-{i}", tags=m)


class Feed:
    """Orders 0, 1, 2, ... sent from this host at :data:`RATE` a second until :meth:`stop`; which were
    acknowledged (SEND_OK) and what failed."""

    def __init__(self, namesrv: str) -> None:
        self.producer = Producer("spark-hosts-orders", namesrv, **FAST_CLIENT)
        self.sent = 0
        self.acked: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="orders", daemon=True)

    def start(self) -> Feed:
        self.producer.start()
        self._thread.start()
        return self

    def _run(self) -> None:
        began = time.monotonic()
        while not self._stop.is_set():
            ids = list(range(self.sent, self.sent + SEND_BATCH))
            self.sent += len(ids)
            try:
                result = self.producer.send_batch([order_message(i) for i in ids])
            except Exception as exc:  # noqa: BLE001 - counted: the orders of a failed send are not acknowledged
                self.errors.append(repr(exc))
            else:
                if result.send_status is SendStatus.SEND_OK:
                    self.acked.extend(ids)
                else:
                    self.errors.append(str(result.send_status))
            self._stop.wait(max(0.0, self.sent / RATE - (time.monotonic() - began)))

    def close(self) -> None:
        """Stop sending (a test that failed)."""
        self._stop.set()
        self._thread.join(30)
        self.producer.shutdown()

    def stop(self) -> None:
        """Stop sending, then send one event an hour of event time later, which no order's window reaches: the
        watermark passes every order's window and the job writes them all. It is no order (another merchant,
        in a window that never closes) and is not counted."""
        self._stop.set()
        self._thread.join(30)
        try:
            assert not self._thread.is_alive(), "the orders' sender did not stop"
            last = START_MS + self.sent * SPACING_MS
            closer = order_message(self.sent, event_time=last + 3_600_000, merchant="closer", cents=1)
            result = self.producer.send(closer)
            assert result.send_status is SendStatus.SEND_OK, result
        finally:
            self.producer.shutdown()


def tally(want: dict[tuple[int, str], tuple[int, int]],
          got: dict[tuple[int, str], tuple[int, int]]) -> tuple[int, int]:
    """Orders lost and orders counted more than once, from the (orders, cents) of each (window, merchant): the
    orders short of its count, those beyond it; a total with its count but not its amount has one order in
    place of another (one lost, one twice) at least."""
    lost = duplicated = 0
    for key in set(want) | set(got):
        (n, cents), (got_n, got_cents) = want.get(key, (0, 0)), got.get(key, (0, 0))
        short, extra = max(0, n - got_n), max(0, got_n - n)
        if short == extra == 0 and cents != got_cents:
            short = extra = 1
        lost += short
        duplicated += extra
    return lost, duplicated


def expected_totals(acked: list[int]) -> dict[tuple[int, str], tuple[int, int]]:
    """(window, merchant) -> (orders, cents) of the acknowledged orders."""
    want: dict[tuple[int, str], tuple[int, int]] = {}
    for i in acked:
        window, merchant, cents = order(i)
        n, total = want.get((window, merchant), (0, 0))
        want[(window, merchant)] = (n + 1, total + cents)
    return want


# --- what the job wrote -------------------------------------------------------------------------------------------

def batch_times(query_checkpoint: Path, log: str) -> dict[int, float]:
    """Batch id -> when the query wrote it to its checkpoint's ``log`` (``offsets``: planned, ``commits``:
    completed), as the file's mtime (wall clock)."""
    folder = query_checkpoint / log
    if not folder.is_dir():
        return {}
    out = {}
    for f in folder.iterdir():
        if f.name.isdigit():
            out[int(f.name)] = f.stat().st_mtime
    return out


def committed_files(output: Path) -> set[Path]:
    """The parquet files the file sink committed: those its _spark_metadata log lists (what a Spark reader of
    the folder reads; a lost task's files are left in the folder, not in the log)."""
    log = output / "_spark_metadata"
    files: set[Path] = set()
    if not log.is_dir():
        return files
    for entry in log.iterdir():
        if not re.fullmatch(r"\d+(\.compact)?", entry.name):
            continue
        for line in entry.read_text().splitlines()[1:]:  # the first line is the log's version
            record = json.loads(line)
            if record["action"] == "add":
                files.add(Path(unquote(urlparse(record["path"]).path)))
    return files


def parquet_totals(output: Path) -> tuple[dict[tuple[int, str], tuple[int, int]], int]:
    """(window, merchant) -> (orders, cents) summed over the committed rows, and the number of rows."""
    got: dict[tuple[int, str], tuple[int, int]] = {}
    rows = 0
    for path in committed_files(output):
        table = pq.read_table(path, columns=["window_start", "merchant", "orders", "amount"])
        starts = table.column("window_start").cast(pa.timestamp("ms")).cast(pa.int64()).to_pylist()
        for start, merchant, n, amount in zip(starts, table.column("merchant").to_pylist(),
                                              table.column("orders").to_pylist(), table.column("amount").to_pylist(),
                                              strict=True):
            key = ((start - START_MS) // WINDOW_MS, merchant)
            prev_n, prev_cents = got.get(key, (0, 0))
            got[key] = (prev_n + n, prev_cents + round(amount * 100))
            rows += 1
    return got, rows


def read_alerts(namesrv: str, want: int, timeout_s: float = 30.0) -> list[dict]:
    """Every alert on the alerts topic (at least ``want``), read by a new group from the first offset, as the
    JSON bodies the job sent."""
    out: list[dict] = []
    deadline = time.monotonic() + timeout_s
    with PullConsumer(f"spark-hosts-alerts-{time.time_ns()}", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                      **FAST_CLIENT) as consumer:
        consumer.subscribe(ALERTS)
        while time.monotonic() < deadline:
            msgs = consumer.poll(timeout_ms=2000 if len(out) >= want else 3000)
            if not msgs and len(out) >= want:
                break
            out.extend(orjson.loads(m.body) for m in msgs)
    return out


def in_flight(work_dir: Path) -> set[int]:
    """Tasks the executor in ``work_dir`` (a worker's) has started and not ended, by its log."""
    started: set[int] = set()
    ended: set[int] = set()
    for log in work_dir.glob("app-*/*/stderr"):
        for line in log.read_text(errors="replace").splitlines():
            if m := re.search(r"Running task .*\(TID (\d+)\)", line):
                started.add(int(m.group(1)))
            elif m := re.search(r"(?:Finished task|Exception in task|[Kk]illed task).*\(TID (\d+)\)", line):
                ended.add(int(m.group(1)))
    return started - ended


_STARTING = re.compile(r"Starting task (\d+)\.\d+ in stage (\d+)\.\d+ \(TID (\d+)\) \(([\d.]+), ?executor")


def reruns(driver_log: str, lost: str, other: str) -> list[tuple[int, int]]:
    """Tasks the driver started on host ``lost`` that failed (lost with their executor, or their output lost
    with it) and started again on host ``other``, by its scheduler's log: (the first TID, the rerun's TID)."""
    started: dict[int, tuple[str, str, str]] = {}
    failed: list[int] = []
    out: list[tuple[int, int]] = []
    for line in driver_log.splitlines():
        if m := _STARTING.search(line):
            index, stage, tid, host = m.group(1), m.group(2), int(m.group(3)), m.group(4)
            started[tid] = (index, stage, host)
            if host == other:
                out += [(f, tid) for f in failed if started[f][:2] == (index, stage) and (f, tid) not in out]
        elif "Lost task" in line or "failed because" in line:
            failed += [tid for tid in map(int, re.findall(r"\(TID (\d+)\)", line))
                       if tid in started and started[tid][2] == lost]
    return out


# --- the case ----------------------------------------------------------------------------------------------------

def test_a_spark_worker_cut_off_mid_run_has_its_tasks_rescheduled_and_parquet_holds_every_order_once(
        make_net: Callable[..., Net], start_on: Callable[..., ServiceProcess], spawn: Callable[..., Spawned],
        reliability: ReliabilityRecorder, tmp_path: Path) -> None:
    if shutil.which("java") is None:
        unavailable("Spark on hosts needs java (not on PATH)")
    began = time.monotonic()
    net = make_net("ns", "broker", "spark-master", "worker1", "worker2", "driver")
    master_host, w1, w2, driver_host = net["spark-master"], net["worker1"], net["worker2"], net["driver"]

    # Everything that waits for nothing started at once: the master and its workers (a worker that finds no
    # master yet tries again 5-15 s later; the master's JVM is up first), the name server and the broker.
    spark_url = f"spark://{master_host.addr}:{MASTER_PORT}"
    master = spawn(master_host, "spark-master", [*spark_bin("spark-class"), "org.apache.spark.deploy.master.Master",
                                                 "--host", master_host.addr, "--port", str(MASTER_PORT),
                                                 "--webui-port", str(MASTER_UI_PORT)],
                   spark_env(tmp_path, master_host))
    work_dirs = {}
    for w in (w1, w2):
        work_dirs[w.name] = tmp_path / f"{w.name}-work"
        spawn(w, w.name, [*spark_bin("spark-class"), "org.apache.spark.deploy.worker.Worker", spark_url,
                          "--host", w.addr, "--cores", "1", "--memory", "1g", "--webui-port", "8081",
                          "--work-dir", str(work_dirs[w.name])], spark_env(tmp_path, w))
    namesrv = start_on(net["ns"], NamesrvProcess, name="namesrv")
    broker = start_on(net["broker"], BrokerProcess, namesrv.addr, name="broker-a", **BROKER_DEFAULTS)
    broker.wait_registered(15)
    with Admin(namesrv.addr) as admin:
        make_topic(admin, TOPIC, 2)
        make_topic(admin, ALERTS, 2)

    feed = Feed(namesrv.addr).start()
    feeding = True
    try:
        output, checkpoint = tmp_path / "totals", tmp_path / "checkpoint"
        job = importlib.util.find_spec("rocketmesh.spark.jobs.merchant_totals").origin  # type: ignore[union-attr]
        driver = spawn(driver_host, "driver", [
            *spark_bin("spark-submit"), "--master", spark_url, "--deploy-mode", "client",
            "--driver-memory", "512m", "--executor-memory", "512m", "--executor-cores", "1",
            "--total-executor-cores", "2", "--driver-java-options", JVM_OPTS,
            "--conf", f"spark.executor.extraJavaOptions={JVM_OPTS}",
            # The driver's address for the executors on the other hosts.
            "--conf", f"spark.driver.host={driver_host.addr}", "--conf", f"spark.driver.bindAddress={driver_host.addr}",
            *(a for k, v in DRIVER_CONF.items() for a in ("--conf", f"{k}={v}")),
            job, "-n", namesrv.addr, "-t", TOPIC, "-g", GROUP, "--starting-offsets", "earliest",
            "--output", str(output), "--checkpoint", str(checkpoint), "--alerts-topic", ALERTS,
            "--alert-amount", str(FULL_CENTS / 100), "--window", f"{WINDOW_MS // 1000} seconds",
            "--watermark", "10 seconds", "--shuffle-partitions", "2"], spark_env(tmp_path, driver_host))
        totals_cp = checkpoint / "totals"

        def job_running(predicate: Callable[[], object]) -> Callable[[], object]:
            """``predicate`` for wait_for, failing at once with the driver's output if the job has ended."""
            def check() -> object:
                assert driver.alive(), f"the job ended:\n{driver.output()}"
                return predicate()
            return check

        wait_for(lambda: alive_workers(master_host) == 2 or not master.alive(), 60,
                 what="both workers registered with the master")
        assert master.alive(), master.output()
        # Both executors at work (each worker's one core granted to the job) and a batch of orders completed.
        wait_for(job_running(lambda: len(batch_times(totals_cp, "commits")) >= 1), FIRST_BATCHES_S,
                 what="the job's first micro-batch", interval_s=0.5)
        state = master_state(master_host)
        assert [app["cores"] for app in state["activeapps"]] == [2], state["activeapps"]
        assert {h: w["coresused"] for h, w in workers_by_host(state).items()} == {w1.addr: 1, w2.addr: 1}

        # The cut: worker1's host off the network while its executor runs a task.
        running = wait_for(job_running(lambda: in_flight(work_dirs["worker1"])), 30,
                           what="a task running on worker1's executor", interval_s=0.02)
        cut_wall, cut = time.time(), time.monotonic()
        net.link_down("worker1")  # healed when the net goes at teardown: nothing of worker1 comes back meanwhile
        cut_at = {"offsets": batch_times(totals_cp, "offsets"), "commits": batch_times(totals_cp, "commits")}
        wait_for(lambda: workers_by_host(master_state(master_host))[w1.addr]["state"] == "DEAD", 30,
                 what="the master declaring worker1 dead")
        dead_s = time.monotonic() - cut

        def planned_after_cut() -> list[int]:
            return sorted(b for b, t in batch_times(totals_cp, "offsets").items() if t > cut_wall)

        def completed_after_cut() -> list[int]:
            done = batch_times(totals_cp, "commits")
            return [b for b in planned_after_cut() if b in done]

        wait_for(job_running(lambda: len(completed_after_cut()) >= BATCHES_AFTER_CUT), AFTER_CUT_S,
                 what=f"{BATCHES_AFTER_CUT} micro-batches planned after the cut completed", interval_s=0.5)
        first_after = planned_after_cut()[0]
        recovery_s = batch_times(totals_cp, "commits")[first_after] - cut_wall
        feeding = False
        feed.stop()
        want = expected_totals(feed.acked)
        wait_for(job_running(lambda: set(parquet_totals(output)[0]) >= set(want)), DRAIN_S,
                 what="every order's window in the parquet output", interval_s=1.0)
        assert driver.alive(), driver.output()
        got, rows = parquet_totals(output)
        alerts = read_alerts(namesrv.addr, sum(1 for _, cents in want.values() if cents == FULL_CENTS))
        after_cut_batches = len(completed_after_cut())
    finally:
        if feeding:
            feed.close()
    state = master_state(master_host)
    driver_log = driver.log.read_text(errors="replace")
    rerun = reruns(driver_log, w1.addr, w2.addr)

    # Equal count and equal sum of distinct powers of two is each order exactly once.
    lost, duplicated = tally(want, got)
    mismatched = {key: (want.get(key), got.get(key)) for key in set(want) | set(got) if want.get(key) != got.get(key)}
    alert_keys = [((int(datetime.fromisoformat(a["window_start"]).timestamp() * 1000) - START_MS) // WINDOW_MS,
                   a["merchant"]) for a in alerts]
    want_alerts = sorted(key for key, (_, cents) in want.items() if cents == FULL_CENTS)
    orphans = len(set(output.glob("part-*.parquet")) - committed_files(output))
    total_s = time.monotonic() - began
    reliability.fault(
        "Hosts: Spark standalone cluster, a worker's host cut off mid-run (merchant_totals to parquet)", cycles=1,
        sent=feed.sent, acknowledged=len(feed.acked), lost=lost, duplicated=duplicated, recovery_s=[recovery_s],
        note=f"master, 2 one-core workers, the spark-submit driver, name server and broker on 6 hosts, orders "
             f"sent at {RATE}/s from a seventh (then one event closing the last windows); worker1's link cut while "
             f"its executor ran task(s) {sorted(running)} (the totals query's batch "
             f"{max(cut_at['offsets'], default=-1)} planned, {max(cut_at['commits'], default=-1)} completed); the "
             f"master declared it dead after {dead_s:.1f} s, the driver ran {len(rerun)} of its tasks again on "
             f"worker2 (TID first, rerun: {rerun}); {after_cut_batches} batches planned after the cut completed, the "
             f"first {recovery_s:.1f} s after it (recovery); {len(want) - len(mismatched)} of {len(want)} (window, "
             f"merchant) totals in {rows} parquet rows matching their orders' count and amount; {len(alerts)} alerts "
             f"for the {len(want_alerts)} full totals; {orphans} part file(s) of lost attempts outside the sink's "
             f"log; {total_s:.0f} s in all")

    assert feed.errors == [] and len(feed.acked) == feed.sent, feed.errors[:5]
    assert rerun, f"no task of worker1's executor was lost and run again on worker2:\n{driver_log[-4000:]}"
    assert workers_by_host(state)[w2.addr]["state"] == "ALIVE" and [a["cores"] for a in state["activeapps"]] == [1], \
        state
    assert not mismatched, f"{len(mismatched)} totals differ (want, got), e.g. {sorted(mismatched.items())[:5]}"
    assert rows == len(want), f"{rows} rows for {len(want)} (window, merchant) totals"
    assert sorted(alert_keys) == want_alerts
