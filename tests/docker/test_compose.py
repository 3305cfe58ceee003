"""docker-compose.yml for real, against a Docker engine: build the image, `up -d`, wait for health, the
dashboard's overview on the host's published port listing the brokers, add the second broker group of
docker-compose.broker-b.yml to the running mesh (nothing else recreated, both groups in cluster-list, a
topic on broker-b taking sends and consumed), send and consume from the host (127.0.0.1 published ports)
and from a client container, a delayed and a transactional message arrive,
`--scale scheduler=3` still delivers every delayed message (at least once, duplicates reported; each
replica serving its own metrics port), the master stopped and a consumer finishes from the slave,
`down -v` (every volume of the project gone, broker-b's too).

Opt-in, ROCKETMESH_DOCKER_SPARK=1 (a 1.4 GB image and about two minutes more): the `spark` profile, its
image built by docker/build-image.sh --spark, the example job's closed windows read from its volume and
its alerts consumed from the host.

The engine: the one `docker info` reaches; else, as root with dockerd installed, a dockerd started here
(data under /tmp, stopped by its pid at the end; see ../shared/notes/docker-on-these-machines.md); as
root, a machine without docker.io, docker-compose and debootstrap gets them from apt first. No engine: the
tests fail, saying why (a compose stack that was not run would prove nothing). The image comes from
docker/build-image.sh (its base image tarball and wheels cached in .cache/, gitignored).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import orjson
import pytest

from aptkit import apt_install, can_install
from procs import stop_process, wait_for
from rocketmesh import Admin, LocalTransactionState, Message, Producer, PushConsumer, TransactionProducer
from rocketmesh.remoting import RequestCode
from tcpkit import RawClient, cmd

#: Minutes of tests: scheduled first (tests/conftest.py).
pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
NAMESRV = "127.0.0.1:9876;127.0.0.1:9877"
PROJECT = f"rmtest{os.getpid()}"
#: Small commitlog files and quick transaction checks for the test; the rest is the compose file's.
COMPOSE_ENV = {"MAPPED_FILE_SIZE_COMMIT_LOG": str(64 * 1024 * 1024), "TRANSACTION_CHECK_INTERVAL": "2000",
               "TRANSACTION_TIME_OUT": "1000", "ROCKETMESH_IMAGE": "rocketmesh:latest"}
APT_PACKAGES = ["docker.io", "docker-compose", "debootstrap"]
#: The spark profile's test is opt-in: its image is 1.4 GB and it runs about two minutes.
SPARK = os.environ.get("ROCKETMESH_DOCKER_SPARK", "").lower() in ("1", "true", "yes")


def _run(*cmd: str, timeout: float = 120, env: dict | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


def _engine_answers() -> bool:
    try:
        return shutil.which("docker") is not None and _run("docker", "info", timeout=20, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _can_start_dockerd() -> bool:
    """Root, with dockerd and the docker client installed: the test starts an engine of its own."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and bool(shutil.which("dockerd") and shutil.which("docker"))


NO_ENGINE = ("no Docker engine: `docker info` fails and there is no dockerd this user can start (start one, or "
             "run the tests as root with dockerd installed)")


def _start_dockerd() -> subprocess.Popen:
    log = open("/tmp/rocketmesh-test-dockerd.log", "ab")
    proc = subprocess.Popen(["dockerd", "--data-root", "/tmp/dockerdata", "--exec-root", "/tmp/dockerexec",
                             "--pidfile", "/tmp/rocketmesh-test-dockerd.pid", "-H", "unix:///var/run/docker.sock"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while not _engine_answers():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc, 30)
            raise AssertionError("dockerd did not come up; see /tmp/rocketmesh-test-dockerd.log")
        time.sleep(0.5)
    return proc


@pytest.fixture(scope="module")
def engine() -> Iterator[None]:
    if _engine_answers():
        yield
        return
    if can_install() and not all(map(shutil.which, ("dockerd", "docker-compose", "debootstrap"))):
        apt_install(*APT_PACKAGES)  # a machine without the engine: Debian's
    if not _can_start_dockerd():
        pytest.fail(f"{NO_ENGINE}; the compose tests must run (as root with apt-get, they install docker.io, "
                    "docker-compose and debootstrap first)")
    proc = _start_dockerd()
    try:
        yield
    finally:
        stop_process(proc, 30)  # the dockerd this test started, and only it, by its pid


def _compose_cmd() -> list[str]:
    if _run("docker", "compose", "version", check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` (v2) nor docker-compose (v1) is installed")


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def sample(text: str, name: str) -> float:
    """The sum of ``name``'s samples in a Prometheus text page (0 when absent)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((f"{name}{{", f"{name} ")))


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class Compose:
    """The test's compose project; every command names all its files (an override added on the way too, so
    that `down -v` removes the override's containers and volumes as well)."""

    def __init__(self) -> None:
        self.base = [*_compose_cmd(), "-p", PROJECT]
        self.files = [ROOT / "docker-compose.yml"]

    @property
    def cmd(self) -> list[str]:
        return [*self.base, *(arg for f in self.files for arg in ("-f", str(f)))]

    def add_file(self, name: str) -> None:
        """Pass the override ``name`` to this and every later command."""
        self.files.append(ROOT / name)

    def __call__(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return _run(*self.cmd, *args, timeout=timeout, env=COMPOSE_ENV)

    def containers(self, service: str) -> list[str]:
        return self("ps", "-q", service).stdout.split()

    def health(self, container: str) -> str:
        return _run("docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}",
                    container).stdout.strip()

    def all_healthy(self, counts: dict[str, int]) -> bool:
        for service, n in counts.items():
            ids = self.containers(service)
            if len(ids) != n or any(self.health(c) != "healthy" for c in ids):
                return False
        return True


MESH = {"namesrv": 1, "namesrv-2": 1, "broker-a": 1, "broker-a-s": 1, "ha": 1, "scheduler": 1, "txn-checker": 1,
        "dashboard": 1}
#: docker-compose.broker-b.yml's services.
BROKER_B = {"broker-b": 1, "broker-b-s": 1, "ha-b": 1}


def _project_volumes() -> list[str]:
    """The project's volumes left in the engine."""
    label = f"label=com.docker.compose.project={PROJECT}"
    return _run("docker", "volume", "ls", "-q", "--filter", label).stdout.split()


@pytest.fixture(scope="module")
def mesh(engine) -> Iterator[Compose]:
    busy = [p for p in (8082, 9876, 9877, 10911, 10921, 10931, 10941, *range(5556, 5566), *range(5570, 5590))
            if not _port_free(p)]
    if busy:
        pytest.fail(f"ports the compose file publishes on 127.0.0.1 are taken: {busy}")
    t0 = time.monotonic()
    # The spark image too when its test runs: built now, before `up`, so that nothing rebuilds rocketmesh:latest
    # under the running mesh (a changed image would make a later `up -d` recreate every service).
    _run(str(ROOT / "docker" / "build-image.sh"), *(["--spark"] if SPARK else []), timeout=1200)
    print(f"\nimage{'s (and the spark target)' if SPARK else ''} built in {time.monotonic() - t0:.0f} s")
    compose = Compose()
    try:
        t0 = time.monotonic()
        compose("up", "-d", timeout=300)
        wait_for(lambda: compose.all_healthy(MESH), 120, what="every service healthy", interval_s=1)
        print(f"mesh up and healthy in {time.monotonic() - t0:.0f} s")
        yield compose
    finally:
        if os.environ.get("ROCKETMESH_KEEP_COMPOSE") != "1":
            volumes = _project_volumes()
            compose("down", "-v", "--remove-orphans", timeout=120)
            print(f"`down -v` removed {len(volumes)} volumes: {sorted(volumes)}")
            left = _project_volumes()
            assert not left, f"`down -v` left volumes of the project: {left}"


class Received:
    """A push consumer group's bodies, from the host."""

    def __init__(self, group: str, topic: str) -> None:
        self.bodies: dict[str, object] = {}
        #: Every delivery's (body, commitlog offset): a body twice at one offset was delivered twice, at
        #: two offsets it was stored twice (two schedulers re-put one delayed message).
        self.deliveries: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.consumer = PushConsumer(group, NAMESRV, consume_from="CONSUME_FROM_FIRST_OFFSET")
        self.consumer.subscribe(topic, "*")
        self.consumer.register_listener(self._on)

    def _on(self, msgs) -> str:  # noqa: ANN001
        with self.lock:
            for m in msgs:
                self.bodies[m.body.decode()] = m
                self.deliveries.append((m.body.decode(), m.commitlog_offset))
        return "CONSUME_SUCCESS"

    def has(self, bodies) -> bool:  # noqa: ANN001
        with self.lock:
            return set(bodies) <= set(self.bodies)

    def duplicates(self) -> dict[str, list[int]]:
        """Bodies delivered more than once, with the commitlog offset of each delivery."""
        seen: dict[str, list[int]] = {}
        with self.lock:
            for body, offset in self.deliveries:
                seen.setdefault(body, []).append(offset)
        return {body: offsets for body, offsets in seen.items() if len(offsets) > 1}


class Orders:
    """Commits "tx-now" at once; leaves "tx-later" open for the txn-checker's check-back, which commits it."""

    def execute_local_transaction(self, msg, arg):  # noqa: ANN001
        return LocalTransactionState.COMMIT_MESSAGE if arg == "now" else LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg):  # noqa: ANN001
        return LocalTransactionState.COMMIT_MESSAGE


#: Reads the spark job's parquet output in a throwaway container of the spark image (pyarrow is there): one
#: JSON line a row, window bounds in epoch ms. Only the files the file sink committed, those its
#: _spark_metadata log lists (a batch's part files are in the directory, empty or half-written, before its
#: log entry is; Spark writes each log file under a dot-name and renames it).
READ_TOTALS = """
import json, os, sys, urllib.parse, pyarrow as pa, pyarrow.parquet as pq
log = "/data/merchant-totals/_spark_metadata"
paths = set()
for name in sorted(os.listdir(log)) if os.path.isdir(log) else ():
    if not name.startswith("."):
        with open(os.path.join(log, name)) as f:
            entries = [json.loads(line) for line in f.read().splitlines()[1:] if line.strip()]  # line 1: "v1"
        paths |= {urllib.parse.urlparse(e["path"]).path for e in entries if e.get("action", "add") == "add"}
if not paths:
    sys.exit(0)  # no batch committed yet
t = pa.concat_tables([pq.read_table(p) for p in sorted(paths)])
for c in ("window_start", "window_end"):
    t = t.set_column(t.schema.get_field_index(c), c, t[c].cast(pa.timestamp("ms")).cast(pa.int64()))
for row in t.to_pylist():
    print(json.dumps(row))
"""
#: The spark profile's feed: an order every 10 ms of event time (order_events' default spacing), so a full
#: one-minute window holds 6,000 orders.
ORDERS_PER_WINDOW = 6000


def _merchant_totals(volume: str) -> list[dict]:
    """The closed windows the spark job has written to ``volume`` so far."""
    out = _run("docker", "run", "--rm", "-v", f"{volume}:/data:ro", "--entrypoint", "python3",
               "rocketmesh-spark:latest", "-c", READ_TOTALS, timeout=60).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _epoch_ms(text: str) -> int:
    """An alert's window bound (Spark's JSON timestamp, e.g. 2026-11-25T01:33:00.000Z) in epoch ms."""
    return int(datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.skipif(not SPARK, reason="the spark profile (a 1.4 GB image, ~2 min) is opt-in: "
                                      "ROCKETMESH_DOCKER_SPARK=1 pytest tests/docker")
def test_the_spark_profile(mesh: Compose) -> None:
    """`--profile spark up -d`: the order feed and the example job run against the mesh; the job's closed
    windows appear in the spark-data volume (each full window exactly the orders the feed sent in it) and
    an alert for each of them reaches MerchantAlerts."""
    # Its image, rocketmesh-spark:latest, was built by the fixture (docker/build-image.sh --spark).
    with Admin(NAMESRV) as admin:  # so that the host's consumer has a route before the first alert
        admin.create_topic("MerchantAlerts", read_queue_nums=4, write_queue_nums=4)
        admin.wait_topic_route("MerchantAlerts")
    alerts = Received("docker-alerts-group", "MerchantAlerts")
    volume = f"{PROJECT}_spark-data"
    t0 = time.monotonic()
    try:
        with alerts.consumer:
            mesh("--profile", "spark", "up", "-d", timeout=300)
            # The first window is partial (the feed starts within it); the second is the first full one. It
            # closes once the watermark (latest event time - 10 s) passes its end: event time runs twice as
            # fast as the clock (200 orders a second, 10 ms apart), so about a minute after the feed starts.
            totals: list[dict] = []

            def two_windows_and_their_alerts() -> bool:
                nonlocal totals
                totals = _merchant_totals(volume)
                windows = sorted({r["window_start"] for r in totals})
                due = {(r["merchant"], r["window_start"]) for r in totals
                       if r["amount"] >= 5000.0 and r["window_start"] in windows[:2]}
                with alerts.lock:
                    got = {(m["merchant"], _epoch_ms(m["window_start"]))
                           for m in map(json.loads, alerts.bodies)}
                return len(windows) >= 2 and due <= got

            wait_for(two_windows_and_their_alerts, 240, interval_s=5,
                     what="two closed windows in the spark-data volume and their alerts on MerchantAlerts")
    finally:
        mesh("--profile", "spark", "rm", "-s", "-f", "spark", "spark-orders", timeout=120)
    print(f"spark profile: two closed windows and their alerts {time.monotonic() - t0:.0f} s after `up`")

    windows = sorted({r["window_start"] for r in totals})
    merchants = {f"m-{i}" for i in range(20)}
    for r in totals:
        assert r["window_end"] - r["window_start"] == 60_000, r  # --window 1 minute
        assert r["merchant"] in merchants and r["orders"] > 0 and r["amount"] > 0, r
    keys = [(r["window_start"], r["merchant"]) for r in totals]
    assert len(keys) == len(set(keys)), "a closed window written twice"
    per_window = {w: sum(r["orders"] for r in totals if r["window_start"] == w) for w in windows}
    # Exactly once: every full window has every order of its minute, once (the first one starts before the feed).
    assert all(n == ORDERS_PER_WINDOW for w, n in per_window.items() if w != windows[0]), per_window
    assert 0 < per_window[windows[0]] <= ORDERS_PER_WINDOW, per_window
    # An alert is the row it was made from (--alert-amount 5000: a busy merchant's minute).
    rows = {(r["merchant"], r["window_start"]): r for r in totals}
    for body in alerts.bodies:
        alert = json.loads(body)
        key = (alert["merchant"], _epoch_ms(alert["window_start"]))
        if key in rows:  # alerts of a window closed after the last read of the volume are not in ``rows``
            row = rows[key]
            assert (alert["orders"], alert["amount"], _epoch_ms(alert["window_end"])) == (
                row["orders"], row["amount"], row["window_end"]), (alert, row)
    print(f"spark job: {len(totals)} rows in {len(windows)} closed windows, orders per window {per_window}; "
          f"{len(alerts.bodies)} alerts")


def test_the_dashboard(mesh: Compose) -> None:
    """The dashboard container is healthy (its /healthz, asked from inside: the fixture waited for it) and, on the
    port mesh publishes on the host's loopback, its overview lists broker-a's master and slave."""
    assert mesh.all_healthy({"dashboard": 1})
    with urllib.request.urlopen("http://127.0.0.1:8082/healthz", timeout=5) as resp:
        assert resp.read().startswith(b"ok rocketmesh-dashboard")
    brokers: list[dict] = []

    def overview_lists_both() -> bool:
        nonlocal brokers
        with urllib.request.urlopen("http://127.0.0.1:8082/api/overview", timeout=10) as resp:
            brokers = orjson.loads(resp.read())["brokers"]
        return {(b["brokerName"], b["brokerId"], b["addr"]) for b in brokers} >= {
            ("broker-a", 0, "127.0.0.1:10911"), ("broker-a", 1, "127.0.0.1:10921")}

    wait_for(overview_lists_both, 30, interval_s=1, what="the dashboard's overview listing broker-a's master and slave")
    assert not any(b["error"] for b in brokers), brokers


def test_a_second_broker_group(mesh: Compose) -> None:
    """docker-compose.broker-b.yml added to the running mesh, as docs/docker-compose.md does it: broker-b's
    master, slave and ha come up healthy and nothing else is recreated; cluster-list shows both groups; a topic
    created on broker-b with that page's command takes sends from the host, and they are consumed. (The fixture's
    `down -v` then removes broker-b's volumes with the others.)"""
    t0 = time.monotonic()
    running = {service: mesh.containers(service) for service in ("mesh", *MESH)}
    mesh.add_file("docker-compose.broker-b.yml")
    mesh("up", "-d", timeout=300)
    wait_for(lambda: mesh.all_healthy({**MESH, **BROKER_B}), 90, what="broker-b, broker-b-s and ha-b healthy",
             interval_s=1)
    # mesh recreated would have cut every running service off the published ports (and from broker-b).
    assert {service: mesh.containers(service) for service in running} == running, "up -d recreated containers"
    assert {f"{PROJECT}_broker-b-store", f"{PROJECT}_broker-b-s-store"} <= set(_project_volumes())
    print(f"\nbroker-b healthy in {time.monotonic() - t0:.0f} s")

    cluster_list = [sys.executable, "-m", "rocketmesh.cli", "admin", "cluster-list", "-n", NAMESRV]
    rows = {("broker-a", "0", "127.0.0.1:10911"), ("broker-a", "1", "127.0.0.1:10921"),
            ("broker-b", "0", "127.0.0.1:10931"), ("broker-b", "1", "127.0.0.1:10941")}

    def both_groups() -> bool:
        listed = {tuple(line.split()[1:4]) for line in _run(*cluster_list, timeout=30).stdout.splitlines()[1:]}
        return rows <= listed

    wait_for(both_groups, 30, interval_s=1, what="cluster-list showing both groups, master and slave")
    # The docs' command (it names one name server; the broker registers the topic with both).
    _run(sys.executable, "-m", "rocketmesh.cli", "admin", "update-topic", "-n", "127.0.0.1:9876",
         "-b", "127.0.0.1:10931", "-t", "DockerB", timeout=30)
    with Admin(NAMESRV) as admin:
        route = admin.wait_topic_route("DockerB")
    assert [q.broker_name for q in route.queue_datas] == ["broker-b"], route

    got = Received("docker-b-group", "DockerB")
    with got.consumer, Producer("docker-b-producer", NAMESRV) as producer:
        bodies = [f"b-{i}" for i in range(20)]
        queues = {producer.send(Message("DockerB", body)).message_queue.broker_name for body in bodies}
        assert queues == {"broker-b"}, queues
        wait_for(lambda: got.has(bodies), 30, interval_s=0.2, what="the 20 messages sent to broker-b consumed")
    # ha-b replicates broker-b to broker-b-s.
    ha_b = mesh.containers("ha-b")[0]
    wait_for(lambda: "0 bytes behind" in _run("docker", "exec", ha_b, "rocketmesh", "health", "ha",
                                              check=False).stdout, 30, interval_s=0.5, what="broker-b-s caught up")
    print(f"broker-b added, listed, sent to and consumed from in {time.monotonic() - t0:.0f} s")


def test_the_mesh_in_containers(mesh: Compose) -> None:
    t_start = time.monotonic()
    with Admin(NAMESRV) as admin:
        for topic in ("DockerT", "DockerDelay", "DockerFail"):
            admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
            admin.wait_topic_route(topic)

    # From the host, through the published ports: plain, delayed and transactional messages.
    got = Received("docker-host-group", "DockerT")
    with got.consumer, Producer("docker-host-producer", NAMESRV) as producer:
        plain = [f"plain-{i}" for i in range(20)]
        for body in plain:
            producer.send(Message("DockerT", body))
        sent_delayed = time.time() * 1000
        producer.send(Message("DockerT", "delayed", delay_level=2))  # 5 s
        with TransactionProducer("docker-tx-producer", NAMESRV, Orders()) as tx:
            tx.send_message_in_transaction(Message("DockerT", "tx-now"), arg="now")
            tx.send_message_in_transaction(Message("DockerT", "tx-later"), arg="later")
            wait_for(lambda: got.has([*plain, "delayed", "tx-now", "tx-later"]), 60, interval_s=0.2,
                     what="plain, delayed and both transactional messages consumed on the host")
        delayed = got.bodies["delayed"]
        assert delayed.store_timestamp - sent_delayed >= 4000, "a level-2 delay (5 s) was not held back"

    # RocketMQ's own clients: the name server's published TCP door routes them to the brokers' doors.
    door = RawClient("127.0.0.1:9866")
    try:
        resp, _ = door.call(cmd(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": "DockerT"}))
    finally:
        door.close()
    assert orjson.loads(resp.body)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10915",
                                                                       "1": "127.0.0.1:10925"}, resp

    # From a client container in the mesh's network namespace.
    mesh_id = mesh.containers("mesh")[0]
    client = ["docker", "run", "--rm", "--network", f"container:{mesh_id}", "-e", f"NAMESRV_ADDR={NAMESRV}",
              "rocketmesh:latest"]
    _run(*client, "produce", "-t", "DockerT", "-c", "5", timeout=60)
    out = _run(*client, "consume", "-t", "DockerT", "-g", "docker-container-group", "-c", "28", "--timeout", "15",
               timeout=90).stdout
    assert all(body in out for body in ("plain-0", "plain-19", "delayed", "tx-later")), out[-2000:]

    # Three scheduler replicas share the delay queues (no delayed message is lost), two txn-checkers the
    # half queues.
    mesh("up", "-d", "--scale", "scheduler=3", "--scale", "txn-checker=2", timeout=180)
    wait_for(lambda: mesh.all_healthy({**MESH, "scheduler": 3, "txn-checker": 2}), 90, interval_s=1,
             what="3 schedulers and 2 txn-checkers healthy")
    time.sleep(3)  # let the new replicas' rebalance settle (deliveries during it are covered anyway)
    got = Received("docker-delay-group", "DockerDelay")
    with got.consumer, Producer("docker-delay-producer", NAMESRV) as producer:
        delayed_bodies = [f"d-{i}" for i in range(40)]
        for i, body in enumerate(delayed_bodies):
            producer.send(Message("DockerDelay", body, delay_level=1 + i % 2))  # 1 s, 5 s: two queues
        with TransactionProducer("docker-tx-producer-2", NAMESRV, Orders()) as tx:
            tx.send_message_in_transaction(Message("DockerDelay", "tx-scaled"), arg="later")
            wait_for(lambda: got.has([*delayed_bodies, "tx-scaled"]), 60, interval_s=0.2,
                     what="all 40 delayed messages delivered by the scaled schedulers, and a transaction "
                          "checked back by the scaled txn-checkers")
        time.sleep(3)  # a second copy of a due message would arrive within a delivery round of the first
    # At-least-once: every message at least once and nothing else; duplicates are allowed, and reported.
    dups = got.duplicates()
    sent = {*delayed_bodies, "tx-scaled"}
    assert {b for b, _ in got.deliveries} == sent, (
        f"missing {sorted(sent - set(got.bodies))}, strays {sorted(set(got.bodies) - sent)}; duplicates {dups}")
    # Each scheduler replica serves /metrics on its own port of 5570-5579 and counts its own deliveries.
    per_replica = [sample(_scrape(5570 + i), "rocketmq_timer_dequeue_total") for i in range(3)]
    print(f"delayed after scaling: {len(got.deliveries)} deliveries of {len(sent)} messages, duplicates "
          f"(body: commitlog offsets) {dups or 'none'}; deliveries per scheduler replica {per_replica}")

    # The master stopped: a consumer group finishes from the slave what the master had.
    got = Received("docker-failover-group", "DockerFail")
    with Producer("docker-fail-producer", NAMESRV) as producer:
        first = [f"f-{i}" for i in range(20)]
        with got.consumer:
            for body in first:
                producer.send(Message("DockerFail", body))
            wait_for(lambda: got.has(first), 30, what="the first 20 consumed from the master")
        rest = [f"r-{i}" for i in range(30)]
        for body in rest:
            producer.send(Message("DockerFail", body))
    # The slave has the commitlog (ha: 0 bytes behind), and the topic and the group's offsets (its
    # metadata sync, every slaveSyncIntervalMills = 10 s), before the master stops.
    ha = mesh.containers("ha")[0]
    wait_for(lambda: "0 bytes behind" in _run("docker", "exec", ha, "rocketmesh", "health", "ha", check=False).stdout,
             30, interval_s=0.5, what="the slave caught up")
    time.sleep(11)
    mesh("stop", "broker-a", timeout=60)
    with Admin(NAMESRV) as admin:
        wait_for(lambda: "127.0.0.1:10911" not in admin.cluster_info().all_addrs(), 30, interval_s=0.5,
                 what="the master out of the routes")
    got = Received("docker-failover-group", "DockerFail")
    with got.consumer:
        wait_for(lambda: got.has(rest), 60, interval_s=0.5, what="the last 30 consumed from the slave")
    print(f"test body took {time.monotonic() - t_start:.0f} s")
