"""The dashboard under a large mesh: how fast its lists and overview answer, in the server and in a browser, and
how much memory it holds.

Run::

    python bench/dashboard_bench.py                      # 5,000 topics, 1,000 consumer groups, 10 rounds
    python bench/dashboard_bench.py --quick              # a smoke run: 200 topics, 50 groups, 3 rounds
    python bench/dashboard_bench.py --topics 10000 --groups 2000 --rounds 5

It starts a name server and one broker (child processes in a temporary folder) and fills them through the
public Admin API: ``--topics`` topics of ``--queues`` queues (``--threads`` creating at once) and ``--groups``
subscription group configs; ``--lag-topics`` of the topics get ``--per-queue`` messages in each queue and
``--lag-groups`` of the groups commit offsets in two of them, part way, so they have lag to sort by. Then it
starts the dashboard, waits until its overview counts every topic and group, and measures ``--rounds`` rounds,
each of:

  server   GET /, /topics, /groups and their JSON twins /api/overview, /api/topics, /api/groups from a Python
           client on loopback: the wall time of one request on a fresh connection, body read; then the same on
           one connection kept alive through the run, as a browser or a script's HTTP session keeps it
  browser  the same three pages loaded in headless Chromium (tests/browserkit.py): the Navigation Timing
           API's loadEventEnd - startTime

A thread samples the dashboard's RSS (/proc/PID/status VmRSS) every 0.1 s from its start to three collector
intervals after the last round, idle (which also gives a collector round's CPU); the kernel's peak (VmHWM) is
printed beside it. The figures come out as a Markdown table with the bounds (every round within --bound-s, RSS
under --bound-rss-mb) and the machine's load average.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import orjson
from selenium.webdriver.remote.webdriver import WebDriver

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchkit import Services, free_port, process_times  # noqa: E402
from browserkit import chromium  # noqa: E402
from rocketmesh import Admin, Message, MQBrokerError, Producer  # noqa: E402
from rocketmesh.client import ResponseCode  # noqa: E402
from rocketmesh.model.message import MessageQueue  # noqa: E402
from rocketmesh.remoting.protocol.headers import UpdateConsumerOffsetRequestHeader  # noqa: E402

BROKER = "broker-a"
TOPIC = "BenchDashTopic-{:05d}"
GROUP = "bench-dash-group-{:05d}"

#: Collector intervals the bench stays idle after the rounds (RSS still sampled, the collector's CPU measured).
IDLE_ROUNDS = 3

#: (page, its JSON twin) as the issue names them.
PAGES = (("/", "/api/overview"), ("/topics", "/api/topics"), ("/groups", "/api/groups"))

#: Navigation Timing of the page now shown: its load in ms, or null until its load event has ended.
NAV_JS = ("const e = performance.getEntriesByType('navigation')[0];"
          "return e && e.loadEventEnd > 0 ? e.loadEventEnd - e.startTime : null;")


def progress(what: str, total: int) -> Callable[[int], None]:
    """A callback that prints ``what: done/total`` at each tenth (and the rate so far)."""
    t0 = time.monotonic()
    step = max(1, total // 10)

    def tick(done: int) -> None:
        if done % step == 0 or done == total:
            elapsed = time.monotonic() - t0
            print(f"  {what}: {done:,}/{total:,} in {elapsed:.1f} s ({done / max(elapsed, 1e-9):,.0f}/s)", flush=True)

    return tick


def run_all(threads: int, items: Iterable[str], work: Callable[[str], object], tick: Callable[[int], None]) -> None:
    """``work(item)`` for each item on ``threads`` threads (a failure stops the run), ``tick`` after each."""
    done = 0
    lock = threading.Lock()

    def one(item: str) -> None:
        nonlocal done
        work(item)
        with lock:
            done += 1
            tick(done)

    with ThreadPoolExecutor(threads) as pool:
        for fut in [pool.submit(one, item) for item in items]:
            fut.result()


class Setup:
    """What the bench made, and how long each step took."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}

    def step(self, name: str, fn: Callable[[], None]) -> None:
        t0 = time.monotonic()
        fn()
        self.steps[name] = time.monotonic() - t0
        print(f"{name}: {self.steps[name]:.1f} s", flush=True)


def fill(admin: Admin, namesrv: str, broker_addr: str, args: argparse.Namespace, setup: Setup) -> None:
    """Topics, subscription groups, messages in the lag topics and the lag groups' offsets."""
    topics = [TOPIC.format(i) for i in range(args.topics)]
    groups = [GROUP.format(i) for i in range(args.groups)]
    lag_topics = topics[: args.lag_topics]
    rng = random.Random(7)

    def create_topics() -> None:
        # broker_addr given: no cluster lookup a topic. The broker handles the creations one after another, each
        # rewriting its topic table; 8 threads still took 20 s against 27 s one at a time (they overlap the trips).
        run_all(args.threads, topics, lambda t: admin.create_topic(t, args.queues, args.queues,
                                                                     broker_addr=broker_addr),
                progress("topics", len(topics)))
        admin.wait_topic_route(topics[-1], timeout_s=60)

    def create_groups() -> None:
        run_all(args.threads, groups, lambda g: admin.update_subscription_group(g, broker_addr=broker_addr),
                progress("groups", len(groups)))

    def send() -> None:
        body = b"x" * args.size
        with Producer("bench-dash-producer", namesrv) as producer:

            def settle(fut: Future, mq: MessageQueue) -> None:
                # A broker flow-controlling under the machine's other work answers SYSTEM_BUSY: send again, bounded.
                for attempt in range(5):
                    try:
                        fut.result()
                        return
                    except MQBrokerError as exc:
                        if exc.response_code != ResponseCode.SYSTEM_BUSY or attempt == 4:
                            raise
                    time.sleep(0.2 * (attempt + 1))
                    fut = producer.send_batch_async(batch(mq), queue=mq)

            def batch(mq: MessageQueue) -> list[Message]:
                return [Message(mq.topic, body) for _ in range(args.per_queue)]

            window: deque[tuple[Future, MessageQueue]] = deque()
            for t in lag_topics:
                for q in range(args.queues):
                    mq = MessageQueue(t, BROKER, q)
                    window.append((producer.send_batch_async(batch(mq), queue=mq), mq))
                    if len(window) >= 16:
                        settle(*window.popleft())
            while window:
                settle(*window.popleft())
        # The consume queues are built after the answers: wait until the last topic's queues count them.
        deadline = time.monotonic() + 30
        while sum(o.max_offset for o in admin.topic_status(lag_topics[-1]).values()) < args.queues * args.per_queue:
            if time.monotonic() > deadline:
                raise SystemExit(f"the messages sent to {lag_topics[-1]} were not in its queues within 30 s")
            time.sleep(0.1)
        print(f"  sent {len(lag_topics) * args.queues * args.per_queue:,} messages of {args.size} bytes "
              f"to {len(lag_topics):,} topics", flush=True)

    def commit() -> None:
        # Each lag group consumed two of the lag topics part way: a committed offset below the queue's end.
        calls = []
        for i, g in enumerate(groups[: args.lag_groups]):
            for t in {lag_topics[i % len(lag_topics)], lag_topics[(i * 7 + 1) % len(lag_topics)]}:
                for q in range(args.queues):
                    calls.append((broker_addr, UpdateConsumerOffsetRequestHeader(g, t, q,
                                                                                 rng.randrange(args.per_queue))))
        for i in range(0, len(calls), 500):
            failed = [e for e in admin.api.update_consumer_offsets(calls[i: i + 500]) if e is not None]
            if failed:
                raise SystemExit(f"{len(failed)} offset commits failed, first: {failed[0]}")
        print(f"  committed {len(calls):,} queue offsets for {args.lag_groups:,} groups", flush=True)

    setup.step(f"create {len(topics):,} topics ({args.queues} queues, {args.threads} threads)", create_topics)
    setup.step(f"create {len(groups):,} subscription groups", create_groups)
    if lag_topics and args.lag_groups:
        setup.step(f"send to {len(lag_topics):,} topics", send)
        setup.step(f"commit offsets of {args.lag_groups:,} groups", commit)


class RssSampler(threading.Thread):
    """VmRSS of ``pid`` every ``interval_s``, in MB (10^6 bytes, the bound's unit); ``mark()`` starts a new
    phase, so each phase has its max."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        super().__init__(name="rss-sampler", daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.phase = "start"
        self.max_by_phase: dict[str, float] = {}
        self.last = 0.0
        self._done = threading.Event()

    def status(self, key: str) -> float:
        """A ``kB`` line of /proc/PID/status (KiB) in MB (0 when the process is gone)."""
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) * 1024 / 1e6
        except OSError:
            pass
        return 0.0

    def mark(self, phase: str) -> None:
        self.phase = phase

    def run(self) -> None:
        while True:
            rss = self.status("VmRSS")
            if rss:
                self.last = rss
                self.max_by_phase[self.phase] = max(self.max_by_phase.get(self.phase, 0.0), rss)
            if self._done.wait(self.interval_s):
                return

    def stop(self) -> None:
        self._done.set()
        self.join(5)


def connect(base: str, timeout_s: float = 30) -> http.client.HTTPConnection:
    host, _, port = base.removeprefix("http://").partition(":")
    return http.client.HTTPConnection(host, int(port), timeout=timeout_s)


def timed_get(conn: http.client.HTTPConnection, path: str) -> tuple[float, int, bytes]:
    """(seconds, status, body) of one GET on ``conn``, the body read to its end."""
    t0 = time.perf_counter()
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    return time.perf_counter() - t0, resp.status, body


def http_get(base: str, path: str) -> tuple[float, int, bytes]:
    """:func:`timed_get` on a fresh connection (as curl or a probe asks), closed after."""
    conn = connect(base)
    try:
        return timed_get(conn, path)
    finally:
        conn.close()


class KeptAlive:
    """One connection kept open across requests, as a browser or a script's HTTP session keeps it."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.conn = connect(base)

    def get(self, path: str) -> tuple[float, int, bytes]:
        try:
            return timed_get(self.conn, path)
        except (http.client.RemoteDisconnected, ConnectionError):
            # The server closed it after its keep-alive timeout (the bench paused): a new one, timed anew.
            self.conn.close()
            self.conn = connect(self.base)
            return timed_get(self.conn, path)

    def close(self) -> None:
        self.conn.close()


def wait_full(url: str, topics: int, groups: int, timeout_s: float) -> dict:
    """Poll /api/overview until it counts ``topics`` topics and ``groups`` groups; its last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        _, status, body = http_get(url, "/api/overview")
        seen = orjson.loads(body) if status == 200 else {}
        if seen.get("topicTotal", 0) >= topics and seen.get("groupCount", 0) >= groups:
            return seen
        if time.monotonic() > deadline:
            raise SystemExit(f"the overview did not count {topics} topics and {groups} groups within {timeout_s:g} s; "
                             f"last answer ({status}): {body[:500]!r}")
        time.sleep(0.5)


def check_lists(url: str, args: argparse.Namespace) -> None:
    """The lists measured are the full ones: /api/topics pages over every topic, /api/groups over every group
    with the lag groups first (SystemExit otherwise)."""
    topics = orjson.loads(http_get(url, "/api/topics")[2])
    groups = orjson.loads(http_get(url, "/api/groups")[2])
    if topics["paging"]["total"] < args.topics or groups["paging"]["total"] < args.groups:
        raise SystemExit(f"the lists are short: {topics['paging']} topics, {groups['paging']} groups")
    if args.lag_groups and not groups["groups"][0]["lag"] > 0:
        raise SystemExit(f"/api/groups does not start with a group that has lag: {groups['groups'][:3]}")


def browser_load(driver: WebDriver, url: str) -> float:
    """Seconds from the navigation's start to its load event's end, loading ``url`` (Navigation Timing)."""
    driver.get(url)
    deadline = time.monotonic() + 10
    while True:
        load_ms = driver.execute_script(NAV_JS)
        if load_ms:
            return float(load_ms) / 1000
        if time.monotonic() > deadline:
            raise SystemExit(f"{url}: no load event end within 10 s of the page's load")
        time.sleep(0.02)


def spread(values: list[float]) -> str:
    """``median (min..max)`` in ms."""
    return f"{statistics.median(values) * 1000:,.0f} ms ({min(values) * 1000:,.0f}..{max(values) * 1000:,.0f})"


def loadavg() -> str:
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=5000)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--queues", type=int, default=8, help="read and write queues of each topic (Admin's default)")
    ap.add_argument("--threads", type=int, default=8, help="topics and groups created at once")
    ap.add_argument("--lag-topics", type=int, default=300, help="topics that get messages")
    ap.add_argument("--lag-groups", type=int, default=300, help="groups that commit offsets in two lag topics")
    ap.add_argument("--per-queue", type=int, default=20, help="messages in each queue of a lag topic")
    ap.add_argument("--size", type=int, default=1024, help="message body bytes")
    ap.add_argument("--collect-interval-ms", type=int, default=5000, help="the dashboard's collectIntervalMs")
    ap.add_argument("--bound-s", type=float, default=1.0, help="every answer and load within this")
    ap.add_argument("--bound-rss-mb", type=float, default=150.0, help="the dashboard's RSS under this")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 200 topics, 50 groups, 3 rounds")
    args = ap.parse_args()
    if args.quick:
        args.topics, args.groups, args.rounds = 200, 50, 3
        args.lag_topics, args.lag_groups = min(args.lag_topics, 20), min(args.lag_groups, 20)
    args.lag_topics = min(args.lag_topics, args.topics)
    args.lag_groups = min(args.lag_groups, args.groups)
    if args.rounds < 1 or args.topics < 1 or args.groups < 0:
        ap.error("--rounds and --topics must be at least 1, --groups at least 0")

    print(f"load average before setup: {loadavg()}", flush=True)
    services = Services(["brokerIP1=127.0.0.1"])
    sampler: RssSampler | None = None
    try:
        setup = Setup()
        with Admin(services.namesrv) as admin:
            broker_addr = f"127.0.0.1:{services.broker_port}"
            t0 = time.monotonic()
            fill(admin, services.namesrv, broker_addr, args, setup)
            setup_s = time.monotonic() - t0
        print(f"setup: {setup_s:.1f} s", flush=True)

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        t0 = time.monotonic()
        services.start("dashboard", "rocketmesh.dashboard", "-n", services.namesrv, "--listen-port", str(port),
                       "--set", f"collectIntervalMs={args.collect_interval_ms}")
        pid = services.procs[-1].pid
        sampler = RssSampler(pid)
        sampler.start()
        overview = wait_full(url, args.topics, args.groups, timeout_s=120 + args.collect_interval_ms / 1000)
        full_s = time.monotonic() - t0
        print(f"dashboard (pid {pid}, {url}) up and counting {overview['topicTotal']:,} topics, "
              f"{overview['groupCount']:,} groups {full_s:.1f} s after its start; RSS {sampler.status('VmRSS'):.0f} MB",
              flush=True)

        check_lists(url, args)

        sampler.mark("rounds")
        load_before = loadavg()
        cpu_before, cpu_t0 = process_times([pid]).get(pid, 0), time.monotonic()
        # path -> seconds of each round: on a fresh connection, on the kept-alive one; page -> browser load.
        fresh: dict[str, list[float]] = {p: [] for pair in PAGES for p in pair}
        kept: dict[str, list[float]] = {p: [] for pair in PAGES for p in pair}
        sizes: dict[str, int] = {}
        browser: dict[str, list[float]] = {p: [] for p, _ in PAGES}
        session = KeptAlive(url)
        with chromium() as driver:
            for r in range(args.rounds):
                for page, twin in PAGES:
                    for path in (page, twin):
                        for get, times in ((lambda p: http_get(url, p), fresh), (session.get, kept)):
                            took, status, body = get(path)
                            if status != 200:
                                raise SystemExit(f"GET {path}: HTTP {status}: {body[:500]!r}")
                            times[path].append(took)
                        sizes[path] = len(body)
                    browser[page].append(browser_load(driver, url + page))
                print(f"  round {r + 1}/{args.rounds} (fresh/kept-alive/browser): " + ", ".join(
                    f"{p} {fresh[p][-1] * 1000:.0f}/{kept[p][-1] * 1000:.0f}/{browser[p][-1] * 1000:.0f} ms"
                    for p, _ in PAGES) + f"  RSS {sampler.last:.0f} MB", flush=True)
        session.close()
        load_after = loadavg()

        hz = os.sysconf("SC_CLK_TCK")
        cpu_mid, cpu_t1 = process_times([pid]).get(pid, 0), time.monotonic()
        # Idle for IDLE_ROUNDS collector intervals: their memory counts too, and the CPU is the collector's own.
        sampler.mark("after")
        time.sleep(IDLE_ROUNDS * args.collect_interval_ms / 1000)
        idle_cpu_s = (process_times([pid]).get(pid, 0) - cpu_mid) / hz
        sampler.stop()
        hwm = sampler.status("VmHWM")
        cpu_s, cpu_wall_s = (cpu_mid - cpu_before) / hz, cpu_t1 - cpu_t0
        rss_max = max(sampler.max_by_phase.values())

        bound_ms = args.bound_s * 1000
        print()
        print(f"{args.topics:,} topics x {args.queues} queues, {args.groups:,} consumer groups "
              f"({args.lag_groups:,} with lag in {args.lag_topics:,} topics), one broker; {args.rounds} rounds; "
              f"collectIntervalMs={args.collect_interval_ms}")
        print(f"setup {setup_s:.0f} s (" + ", ".join(f"{k} {v:.1f} s" for k, v in setup.steps.items()) + ")")
        print(f"load average (1/5/15 min): {load_before} before the rounds, {load_after} after")
        print(f"the dashboard's CPU: {cpu_s:.2f} s over the {cpu_wall_s:.1f} s of the rounds; idle after them, "
              f"{idle_cpu_s:.2f} s over {IDLE_ROUNDS} collector intervals "
              f"(about {idle_cpu_s / IDLE_ROUNDS * 1000:.0f} ms a collector round)\n")
        print("server time: median (min..max) over the rounds, on a fresh connection each and on one kept alive\n")
        print("| page | server, HTML | server, JSON twin | kept alive: HTML | kept alive: JSON | browser load "
              "| bound: every round |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for page, twin in PAGES:
            worst = max(max(t[p]) for t in (fresh, kept) for p in (page, twin))
            worst = max(worst, max(browser[page]))
            verdict = "**met**" if worst * 1000 <= bound_ms else f"**not met** (worst {worst * 1000:,.0f} ms)"
            print(f"| `{page}`, `{twin}` ({sizes[page] / 1024:.0f} / {sizes[twin] / 1024:.0f} KiB) | "
                  f"{spread(fresh[page])} | {spread(fresh[twin])} | {spread(kept[page])} | {spread(kept[twin])} | "
                  f"{spread(browser[page])} | <= {bound_ms:,.0f} ms: {verdict} |")
        verdict = "**met**" if rss_max < args.bound_rss_mb else "**not met**"
        print(f"| dashboard RSS, max of samples every 0.1 s (start {sampler.max_by_phase.get('start', 0):.0f}, "
              f"rounds {sampler.max_by_phase.get('rounds', 0):.0f}, after {sampler.max_by_phase.get('after', 0):.0f}"
              f"; kernel's peak VmHWM {hwm:.0f}) | {rss_max:.0f} MB | | | | | < {args.bound_rss_mb:.0f} MB: "
              f"{verdict} |")
        return 0
    finally:
        if sampler is not None and sampler.is_alive():
            sampler.stop()
        services.stop()


if __name__ == "__main__":
    sys.exit(main())
