"""rocketmesh and every installed peer through the same workloads, in interleaved rounds, with the machine's
load and steal time beside each figure and the transport and disk floors measured in the same run.

Run (the peers' servers: ``apt-get install -y nats-server redis-server rabbitmq-server``; their clients and
matplotlib: ``pip install -e '.[peers]'``)::

    python bench/side_by_side.py                         # 2 rounds, every workload, every installed peer
    python bench/side_by_side.py --quick --peers redis    # a short smoke run
    python bench/side_by_side.py --workloads e2e --hog    # with a CPU hog pinned to one core throughout

Each round runs the floors, then rocketmesh, then each peer (A B C A B C: drift over the run hits all
alike). Nothing is measured here: the figures come from the benches, run as child processes whose printed
lines are parsed (producer_bench and consumer_bench for rocketmesh, peers_bench for the peers,
transport_floors and page_floor for the floors; the one exception is the fdatasync floor, a loop of 4 KiB
writes each followed by ``os.fdatasync``, which no bench measured). Beside each figure go the 1-minute load
average when it was printed, and the machine's CPU steal time and busy time (from /proc/stat) over the span
that produced it: from the figure before it in the same child process, or from that process's start (so a
drain's span includes filling its backlog, and the first figure's the services' start).

Workloads (``--workloads``, comma-separated):
  sync1       one sender, each send awaited (producer_bench sync1; peers_bench sync1)
  async       1,000 in flight: the default Producer, which batches async sends (producer_bench async), and
              one request a message (async-off) as a second row; NATS and RabbitMQ: peers_bench async
  batch       batches of 32, 32 in flight (producer_bench batch-async; Redis: pipelines of 1,000 XADDs,
              peers_bench async)
  drain       a backlog drained by one consumer, 128 at a time (consumer_bench pull and push; peers_bench drain)
  e2e         one sender at 2,000 msg/s, one consumer: p50 and p99 send to receive (consumer_bench e2e;
              peers_bench e2e)
  sync-flush  SYNC_FLUSH with 16 and 64 senders (producer_bench --set flushDiskType=SYNC_FLUSH; RabbitMQ's
              durable queue with publisher confirms, peers_bench sync16/sync64)
  topics      1,000 topics x 4 queues against 1 topic (producer_bench --topics, 16 senders and async)

Writes into ``--out`` (default bench/results/): ``side_by_side.md`` (the table: each workload's figures per
system, one per round, and the ratio to the best peer within each round; then every figure with its load and
steal), ``side_by_side.png`` (a chart of the same), ``side_by_side.json`` and ``side_by_side.log`` (every line
the benches printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

BENCH = os.path.dirname(os.path.abspath(__file__))
PEERS = ("nats", "redis", "rabbitmq")
WORKLOADS = ("sync1", "async", "batch", "drain", "e2e", "sync-flush", "topics")
#: Names the chart and the table give the systems.
TITLES = {"rocketmesh": "rocketmesh", "nats": "NATS JetStream", "redis": "Redis Streams", "rabbitmq": "RabbitMQ",
          "1 topic": "rocketmesh, 1 topic", "floor": "floor"}
#: The Debian package that brings each peer's server (peers_bench skips a peer without it).
PACKAGES = {"nats": "nats-server", "redis": "redis-server", "rabbitmq": "rabbitmq-server"}


@dataclass
class Row:
    """One line of the table: which figure of which system it shows, and what is better."""

    workload: str
    title: str
    unit: str
    #: system -> the key of its figure (see Figure.key)
    sources: dict[str, str]
    higher_is_better: bool = True


ROWS = (
    Row("sync1", "one sender, each send awaited", "msg/s",
        {"rocketmesh": "sync1", "nats": "sync1", "redis": "sync1", "rabbitmq": "sync1"}),
    Row("async", "1,000 in flight, the default Producer (async sends batched)", "msg/s",
        {"rocketmesh": "async", "nats": "async", "rabbitmq": "async"}),
    Row("async", "1,000 in flight, one request a message", "msg/s",
        {"rocketmesh": "async-off", "nats": "async", "rabbitmq": "async"}),
    Row("batch", "batches of 32, 32 in flight (Redis: pipelines of 1,000)", "msg/s",
        {"rocketmesh": "batch-async", "redis": "async"}),
    Row("drain", "drain of the backlog: PullConsumer", "msg/s",
        {"rocketmesh": "pull", "nats": "drain", "redis": "drain", "rabbitmq": "drain"}),
    Row("drain", "drain of the backlog: PushConsumer", "msg/s",
        {"rocketmesh": "push", "nats": "drain", "redis": "drain", "rabbitmq": "drain"}),
    Row("e2e", "end to end at 2,000 msg/s: p50", "ms",
        {"rocketmesh": "e2e-p50", "nats": "e2e-p50", "redis": "e2e-p50", "rabbitmq": "e2e-p50"},
        higher_is_better=False),
    Row("e2e", "end to end at 2,000 msg/s: p99", "ms",
        {"rocketmesh": "e2e-p99", "nats": "e2e-p99", "redis": "e2e-p99", "rabbitmq": "e2e-p99"},
        higher_is_better=False),
    Row("sync-flush", "SYNC_FLUSH, 16 senders (RabbitMQ: confirms)", "msg/s",
        {"rocketmesh": "sf-sync16", "rabbitmq": "sync16"}),
    Row("sync-flush", "SYNC_FLUSH, 64 senders (RabbitMQ: confirms)", "msg/s",
        {"rocketmesh": "sf-sync64", "rabbitmq": "sync64"}),
    Row("topics", "{topics} topics x 4 queues, 16 senders (against 1 topic)", "msg/s",
        {"rocketmesh": "topics-sync16", "1 topic": "topics-sync16"}),
    Row("topics", "{topics} topics x 4 queues, 1,000 in flight (against 1 topic)", "msg/s",
        {"rocketmesh": "topics-async", "1 topic": "topics-async"}),
)


@dataclass
class Figure:
    """One figure a bench printed, with the conditions it was taken in."""

    system: str
    #: What it is, as the rows name it: the bench's mode, with a prefix for runs with settings of their own.
    key: str
    round: int
    value: float
    unit: str
    #: 1-minute load average when the figure was printed.
    load1: float
    #: Percent of the machine's CPU time stolen by the host over the span that produced the figure.
    steal_pct: float
    #: Percent of the machine's CPU time in use over that span (by the run and by anything else).
    busy_pct: float
    #: Client plus server CPU per message (microseconds), where the bench prints it.
    cpu_us: float | None = None


@dataclass
class Command:
    """One bench run: its argument list, the system its figures belong to and the prefix of their keys."""

    system: str
    argv: list[str]
    prefix: str = ""
    figures: list[Figure] = field(default_factory=list)
    #: A line for each run that exited with an error: where, and its last line.
    failures: list[str] = field(default_factory=list)


class CpuClock:
    """The machine's CPU time, idle time and steal time (clock ticks, all CPUs) from /proc/stat."""

    @staticmethod
    def read() -> tuple[int, int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
        return sum(fields), fields[3] + fields[4], fields[7]  # user nice system idle iowait irq softirq steal

    def __init__(self) -> None:
        self.last = self.read()

    def span(self) -> tuple[float, float] | None:
        """Since the last call (or creation), in percent of all CPU time: steal, and busy (neither idle nor
        stolen: this run's processes and everything else on the machine); None when no clock tick passed."""
        now = self.read()
        total, idle, steal = (a - b for a, b in zip(now, self.last, strict=True))
        self.last = now
        if not total:
            return None
        return 100.0 * steal / total, 100.0 * (total - idle - steal) / total


def load1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


_NUM = r"([\d,]+(?:\.\d+)?)"
#: The benches' printed lines: (pattern, what the match gives: [(key, group, unit)] or "cpu").
PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # benchkit.report: producer_bench modes and peers_bench's "peer:mode"
    (re.compile(rf"^(?:\w+:)?([\w-]+)\s+{_NUM} msgs\s+[\d.]+ s\s+{_NUM} msg/s"), "rate"),
    # benchkit.report_cpu
    (re.compile(r"^(?:\w+:)?([\w-]+)\s+cpu us/msg: .*total ([\d.]+)"), "cpu"),
    # peers_bench drain, consumer_bench pull/push
    (re.compile(rf"^(?:\w+:)?(\w+)\s+drain \d+ x \d+ B.*?: {_NUM} msg/s"), "drain"),
    # peers_bench e2e, consumer_bench e2e
    (re.compile(rf"^(?:\w+:)?(e2e)\s+\d+ msg/s for \d+ s: p50 {_NUM} ms, p99 {_NUM} ms"), "e2e"),
    # transport_floors
    (re.compile(rf"^(tcp sync|zmq sync|codec sync|zmq pipelined)\s+{_NUM} round trips/s"), "floor"),
    (re.compile(rf"^(zmq relay) e2e\s+[\d,]+ msg/s for [\d.]+ s: p50 {_NUM} ms, p99 {_NUM} ms"), "relay"),
    # page_floor
    (re.compile(rf"^(commitlog file|anon first)\s+{_NUM} us per 4 KiB page"), "page"),
]


def number(text: str) -> float:
    return float(text.replace(",", ""))


def parse(line: str) -> Iterator[tuple[str, float, str] | tuple[str, float, None]]:
    """(key, value, unit) of each figure on a printed line; unit None for a CPU-per-message figure."""
    for pattern, kind in PATTERNS:
        m = pattern.match(line.strip())
        if not m:
            continue
        if kind == "rate":
            yield m[1], number(m[3]), "msg/s"
        elif kind == "cpu":
            yield m[1], number(m[2]), None
        elif kind == "drain":
            yield ("drain" if m[1] not in ("pull", "push") else m[1]), number(m[2]), "msg/s"
        elif kind == "e2e":
            yield "e2e-p50", number(m[2]), "ms"
            yield "e2e-p99", number(m[3]), "ms"
        elif kind == "floor":
            yield m[1].replace(" ", "-"), number(m[2]), "round trips/s"
        elif kind == "relay":
            yield "zmq-relay-e2e-p50", number(m[2]), "ms"
            yield "zmq-relay-e2e-p99", number(m[3]), "ms"
        elif kind == "page":
            yield m[1].replace(" ", "-"), number(m[2]), "us/page"
        return


def run(cmd: Command, rnd: int, log) -> None:  # noqa: ANN001 - a text file
    """Run one bench, echoing and logging its lines and collecting its figures."""
    started = time.strftime("%H:%M:%S")
    print(f"--- round {rnd}, {cmd.system}: {' '.join(cmd.argv[1:])}", flush=True)
    log.write(f"--- {started} round {rnd}, {cmd.system}: {' '.join(cmd.argv)}\n")
    clock = CpuClock()
    cpu: dict[str, float] = {}
    last = ""
    steal = busy = 0.0
    proc = subprocess.Popen(cmd.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=BENCH,
                            start_new_session=True)
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            sys.stdout.write("    " + line)
            log.write(line)
            found = list(parse(line))
            if any(unit is not None for _, _, unit in found):
                # One span a line (e2e prints p50 and p99 on one); lines printed together (page_floor's) share
                # the span of the first.
                load, spent = load1(), clock.span()
                steal, busy = spent or (steal, busy)
            for key, value, unit in found:
                if unit is None:
                    cpu[cmd.prefix + key] = value
                    continue
                cmd.figures.append(Figure(cmd.system, cmd.prefix + key, rnd, value, unit, load, steal, busy))
            last = line.strip() or last
        rc = proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(30)
    if rc:
        print(f"    (exited with {rc}: its figures so far are kept)", flush=True)
        cmd.failures.append(f"round {rnd}, {cmd.system}, `{' '.join(cmd.argv[1:])}`: {last}")
    for fig in cmd.figures:
        # e2e prints its CPU once, for the p50 and p99 it printed together.
        key = fig.key.removesuffix("-p50").removesuffix("-p99")
        if fig.round == rnd and key in cpu:
            fig.cpu_us = cpu[key]


def fsync_floor(seconds: float) -> Figure:
    """4 KiB written and fdatasync'ed again and again in a temporary file on the store's disk: the most
    SYNC_FLUSH commits a second here, with one writer."""
    folder = tempfile.mkdtemp(prefix="fsync-floor-")
    path = os.path.join(folder, "floor.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    clock = CpuClock()
    block = b"x" * 4096
    try:
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            os.pwrite(fd, block, (n % 1024) * 4096)
            os.fdatasync(fd)
            n += 1
        rate = n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
    return Figure("floor", "fdatasync", 0, rate, "syncs/s", load1(), *(clock.span() or (0.0, 0.0)))


def plan(a: argparse.Namespace, peers: list[str]) -> list[Command]:
    """Every bench run of one round, in order: floors, rocketmesh, each peer."""
    py = sys.executable
    d = f"{a.duration:g}"
    w = set(a.workloads)
    out = [Command("floor", [py, "transport_floors.py", "-n", str(2000 if a.quick else 20_000), "--body", "1024",
                            "--relay-seconds", "2" if a.quick else "5"]),
           Command("floor", [py, "page_floor.py", "--mib", str(64 if a.quick else 256)])]
    # One producer_bench a mode: a mode that fails (a broker answering SYSTEM_BUSY under load) costs only its
    # own figure, and the span its load and steal cover is its own.
    for wl, ms in (("sync1", ["sync1"]), ("async", ["async", "async-off"]), ("batch", ["batch-async"])):
        if wl in w:
            out += [Command("rocketmesh", [py, "producer_bench.py", "--modes", m, "--duration", d]) for m in ms]
    modes = [m for wl, ms in (("drain", ["pull", "push"]), ("e2e", ["e2e"])) if wl in w for m in ms]
    if modes:
        out.append(Command("rocketmesh", [py, "consumer_bench.py", "--modes", ",".join(modes), "--backlog",
                                          str(a.backlog), "--pull-batch", "128", "--threads", "4", "--duration", d]))
    if "sync-flush" in w:
        out.append(Command("rocketmesh", [py, "producer_bench.py", "--set", "flushDiskType=SYNC_FLUSH", "--modes",
                                          "sync16,sync64", "--duration", d], prefix="sf-"))
    if "topics" in w:
        for system, topics in (("rocketmesh", a.topics), ("1 topic", 1)):
            out.append(Command(system, [py, "producer_bench.py", "--modes", "sync16,async", "--duration", d,
                                        "--queues", "4", "--topics", str(topics)], prefix="topics-"))
    for peer in peers:
        modes = [m for wl, ms in (("sync1", ["sync1"]), ("async", ["async"]), ("drain", ["drain"]), ("e2e", ["e2e"]))
                 if wl in w for m in ms]
        if "batch" in w and peer == "redis" and "async" not in modes:
            modes.append("async")  # Redis's pipelines are the batches' peer
        if "sync-flush" in w and peer == "rabbitmq":
            modes += ["sync16", "sync64"]
        if modes:
            out.append(Command(peer, [py, "peers_bench.py", "--peers", peer, "--modes", ",".join(modes), "--duration",
                                      d, "--backlog", str(a.backlog), "--pull-batch", "128"]))
    return out


def start_hog() -> subprocess.Popen:
    """One process spinning on the last core for the whole run (what a busy neighbour does to the latency)."""
    core = max(os.sched_getaffinity(0))
    code = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    print(f"CPU hog on core {core}", flush=True)
    return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)


def fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{value:.2f}"
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def best_peer(row: Row, by: dict[tuple[str, str, int], Figure], rnd: int) -> Figure | None:
    peers = [by[(s, k, rnd)] for s, k in row.sources.items() if s != "rocketmesh" and (s, k, rnd) in by]
    if not peers:
        return None
    pick = max if row.higher_is_better else min
    return pick(peers, key=lambda f: f.value)


def ratio(ours: Figure, best: Figure, higher_is_better: bool) -> float:
    """How many times better than the best peer (above 1: ahead; for latency, the peer's time over ours)."""
    return ours.value / best.value if higher_is_better else best.value / ours.value


def table(figures: list[Figure], rounds: list[int], systems: list[str], a: argparse.Namespace,
          started: str, failures: list[str]) -> str:
    by = {(f.system, f.key, f.round): f for f in figures}
    shown = [s for s in systems if any(f.system == s for f in figures)]
    lines = [f"Run {started} UTC: {len(rounds)} round(s), {a.duration:g} s per mode, backlog {a.backlog:,}, "
             f"{a.topics:,} topics{', a CPU hog on one core' if a.hog else ''}. Figures are one per round "
             "(a / b); the ratio is rocketmesh against the best peer of the same round (above 1: rocketmesh "
             "ahead; for latency, the peer's time over ours).", ""]
    lines.append("| workload | " + " | ".join(TITLES[s] for s in shown) + " | best peer | ratio |")
    lines.append("|---|" + "---:|" * (len(shown) + 2))
    for row in ROWS:
        if row.workload not in a.workloads:
            continue
        cells = []
        for s in shown:
            key = row.sources.get(s)
            vals = [by[(s, key, r)] for r in rounds if (s, key, r) in by] if key else []
            cells.append(" / ".join(fmt(f.value, row.unit) for f in vals))
        bests = [best_peer(row, by, r) for r in rounds]
        best = " / ".join(f"{TITLES[b.system]} {fmt(b.value, row.unit)}" for b in bests if b is not None)
        ratios = [ratio(by[("rocketmesh", row.sources["rocketmesh"], r)], b, row.higher_is_better)
                  for r, b in zip(rounds, bests, strict=True)
                  if b is not None and ("rocketmesh", row.sources["rocketmesh"], r) in by]
        title = row.title.format(topics=f"{a.topics:,}")
        lines.append(f"| {title} ({row.unit}) | " + " | ".join(cells) + f" | {best} | "
                     + " / ".join(f"**{x:.2f}x**" for x in ratios) + " |")
    if failures:
        lines += ["", "Runs that failed (their other figures are kept):", ""] + [f"- {x}" for x in failures]
    floors = [f for f in figures if f.system == "floor"]
    if floors:
        lines += ["", "Floors, same run: " + "; ".join(
            f"{key} {' / '.join(fmt(f.value, f.unit) for f in floors if f.key == key)} "
            f"{next(f.unit for f in floors if f.key == key)}" for key in dict.fromkeys(f.key for f in floors)) + "."]
    lines += ["", "Every figure with its conditions (load: 1-minute load average when printed; steal: CPU time the "
              "host took over the span that produced it; busy: the machine's CPU in use over that span, 100% = both "
              "cores; CPU: client plus server microseconds a message):", "",
              "| system | figure | round | value | CPU us/msg | load | steal | busy |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for f in figures:
        cpu = "" if f.cpu_us is None else f"{f.cpu_us:.0f}"
        lines.append(f"| {TITLES[f.system]} | {f.key} | {f.round} | {fmt(f.value, f.unit)} {f.unit} | {cpu} | "
                     f"{f.load1:.2f} | {f.steal_pct:.1f}% | {f.busy_pct:.0f}% |")
    return "\n".join(lines) + "\n"


def chart(figures: list[Figure], rounds: list[int], systems: list[str], a: argparse.Namespace, path: str) -> None:
    """One panel a row: each system's figure (the median of the rounds as a bar, each round as a dot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(f.system, f.key, f.round): f for f in figures}
    rows = [r for r in ROWS if r.workload in a.workloads
            and any(("rocketmesh", r.sources["rocketmesh"], n) in by for n in rounds)]
    if not rows:
        return
    cols = 3
    nrows = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(15, 2.6 * nrows), squeeze=False)
    colours = {"rocketmesh": "#d9534f", "1 topic": "#f0ad4e", "nats": "#5bc0de", "redis": "#5cb85c",
               "rabbitmq": "#9b59b6"}
    for ax, row in zip(axes.flat, rows, strict=False):
        names, medians, dots = [], [], []
        for s in systems:
            key = row.sources.get(s)
            vals = [by[(s, key, n)].value for n in rounds if key and (s, key, n) in by]
            if vals:
                names.append(TITLES[s])
                medians.append(statistics.median(vals))
                dots.append(vals)
        ys = range(len(names))
        ax.barh(list(ys), medians, color=[colours.get(s, "grey") for s in systems
                                          if row.sources.get(s) and any((s, row.sources[s], n) in by for n in rounds)])
        for y, vals in zip(ys, dots, strict=True):
            ax.plot(vals, [y] * len(vals), "k.", markersize=4)
        ax.set_yticks(list(ys), names, fontsize=8)
        ax.invert_yaxis()
        better = "higher" if row.higher_is_better else "lower"
        ax.set_title(f"{row.title.format(topics=f'{a.topics:,}')}\n{row.unit}, {better} is better", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle(f"rocketmesh and its peers, one run: {len(rounds)} round(s), {a.duration:g} s a mode, 1 KiB bodies"
                 + (", CPU hog on one core" if a.hog else ""), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {', '.join(WORKLOADS)}")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)} (or none)")
    ap.add_argument("--duration", type=float, default=None, help="seconds per mode (default 5; 1 with --quick)")
    ap.add_argument("--backlog", type=int, default=None, help="messages drained (default 200,000; 20,000 --quick)")
    ap.add_argument("--topics", type=int, default=None, help="topics of the many-topics row (default 1,000; 50 "
                                                            "--quick)")
    ap.add_argument("--hog", action="store_true", help="one process spinning on one core for the whole run")
    ap.add_argument("--quick", action="store_true", help="short durations and small backlogs: a smoke run")
    ap.add_argument("--out", default=os.path.join(BENCH, "results"), help="folder for the table, chart and log")
    a = ap.parse_args()
    a.duration = a.duration or (1.0 if a.quick else 5.0)
    a.backlog = a.backlog or (20_000 if a.quick else 200_000)
    a.topics = a.topics or (50 if a.quick else 1000)
    a.workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    asked = [p.strip() for p in a.peers.split(",") if p.strip() and p.strip() != "none"]
    for name, given, known in (("--workloads", a.workloads, WORKLOADS), ("--peers", asked, PEERS)):
        unknown = set(given) - set(known)
        if unknown:
            raise SystemExit(f"{name}: unknown {', '.join(sorted(unknown))} (choose from {', '.join(known)})")
    peers = []
    for p in asked:
        if shutil.which(PACKAGES[p]) is None:
            print(f"{p}: left out, no {PACKAGES[p]} here (apt-get install {PACKAGES[p]})", flush=True)
        else:
            peers.append(p)
    os.makedirs(a.out, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    hog = start_hog() if a.hog else None
    commands: list[Command] = []
    floors: list[Figure] = []
    rounds = list(range(1, a.rounds + 1))
    try:
        with open(os.path.join(a.out, "side_by_side.log"), "w") as log:
            for rnd in rounds:
                this = plan(a, peers)
                for cmd in this:
                    run(cmd, rnd, log)
                fig = fsync_floor(1.0 if a.quick else 3.0)
                fig.round = rnd
                floors.append(fig)
                print(f"    fdatasync floor: {fig.value:,.0f} syncs/s", flush=True)
                commands += this
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    figures = floors + [f for c in commands for f in c.figures]
    systems = ["rocketmesh", *peers, "1 topic"]
    md = table(figures, rounds, systems, a, started, [x for c in commands for x in c.failures])
    with open(os.path.join(a.out, "side_by_side.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "side_by_side.json"), "w") as f:
        json.dump({"started_utc": started, "args": vars(a), "figures": [dataclasses.asdict(x) for x in figures],
                   "failures": [x for c in commands for x in c.failures]},
                  f, indent=1)
    chart(figures, rounds, systems, a, os.path.join(a.out, "side_by_side.png"))
    print("\n" + md)
    print(f"written to {a.out}/side_by_side.{{md,png,json,log}}", flush=True)


if __name__ == "__main__":
    main()
