"""Two builds of rocketmesh through the same bench in alternating runs (A B A B ...): every figure the bench
prints, its median per build, and the ratio B/A taken pair by pair (drift over the runs hits both alike).

Run::

    python bench/ab.py --base main~3 -- producer_bench.py --modes sync1,async --duration 5
    python bench/ab.py --base 628910d --runs 5 -- consumer_bench.py --modes e2e --duration 10
    python bench/ab.py --base main~3 --head main -- store_bench.py --repeat 1

A is the tree at ``--base``; B is the tree at ``--head``, or without it the rocketmesh this Python imports
(the working tree of an editable install). A build of a git ref is installed without its dependencies
(this environment has them) into ``bench/results/builds/<commit>/site``, once, beside a copy of its
``bench/``; a run puts that folder first on ``PYTHONPATH``, which the services a bench starts inherit. By
default both builds run the working tree's bench script, so both are measured the same way; where the
script needs what the older build lacks (a new option, a new name), ``--bench-of each`` runs each
build's own copy of it instead. Failed runs are reported.

A figure is a number followed by a unit (msg/s, MB/s, MiB/s, rows/s, transactions/s, round trips/s, ms,
us/msg, us) on a printed line, named by the line's leading words, its percentile, the words just before it
or its place on the line, and its unit; benchkit's CPU lines give one figure a process. Where less is
better (ms, us) the ratio is still B/A of the figure itself.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
BUILDS = os.path.join(BENCH, "results", "builds")

_FIGURE = re.compile(r"([\d,]+(?:\.\d+)?)\s*(msg/s|MB/s|MiB/s|rows/s|transactions/s|round trips/s|ms\b|us/msg|us\b)")
_NUMBER = re.compile(r"[\d,]+(?:\.\d+)?")
_PERCENTILE = re.compile(r"p\d+(?:\.\d+)?")
_CPU = re.compile(r"(\w+) ([\d.]+)")
#: Units where a smaller figure is the better one (said beside the ratio).
_LOWER_IS_BETTER = {"ms", "us/msg", "us"}


@dataclass
class Build:
    """One side of the comparison: a label, and the folder to put first on PYTHONPATH (None: as installed)."""

    label: str
    site: str | None
    #: The build's own bench/ folder (None: the working tree's).
    bench: str | None = None
    #: figure name -> its value in each run (None where a run did not print it)
    figures: dict[str, list[float | None]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)


def commit_of(ref: str) -> str:
    out = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", f"{ref}^{{commit}}"], capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"not a commit in {REPO}: {ref!r} ({out.stderr.strip()})")
    return out.stdout.strip()


def install(ref: str) -> Build:
    """The tree at ``ref`` installed (no dependencies) under BUILDS, reusing an earlier install."""
    commit = commit_of(ref)
    root = os.path.join(BUILDS, commit[:12])
    site, bench = os.path.join(root, "site"), os.path.join(root, "bench")
    if not os.path.isdir(os.path.join(site, "rocketmesh")) or not os.path.isdir(bench):
        print(f"installing {ref} ({commit[:12]}) into {root}", flush=True)
        shutil.rmtree(root, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="ab-src-") as src:
            archive = os.path.join(src, "tree.tar")
            subprocess.run(["git", "-C", REPO, "archive", "--format=tar", "-o", archive, commit], check=True)
            with tarfile.open(archive) as tar:
                tar.extractall(os.path.join(src, "tree"), filter="data")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--target", site, os.path.join(src, "tree")], check=True)
            shutil.copytree(os.path.join(src, "tree", "bench"), bench)
    return Build(f"{ref} ({commit[:12]})", site, bench)


def figures_of(line: str) -> list[tuple[str, float]]:
    """(name, value) of each figure on a printed line: named by the line's leading words (up to its first
    number), then the percentile the figure is (``p99``) or its place among the line's figures, and its unit.
    A benchkit CPU line (``cpu us/msg: client 213.0, broker 412.2, total 625.2``) gives one figure a process."""
    words = line.split()
    lead: list[str] = []
    for w in words:
        if _NUMBER.fullmatch(w):
            break
        lead.append(w)
    label = " ".join(lead) or "-"
    if "cpu us/msg:" in line:
        head = line[:line.index("cpu us/msg:")].split()
        return [(f"{' '.join(head)} cpu {who} us/msg", float(v)) for who, v in _CPU.findall(line)]
    out = []
    end = 0
    for i, m in enumerate(_FIGURE.finditer(line)):
        before = line[:m.start()].split()
        # After the first figure, the words since the previous one name a figure ("... us   outside the
        # store 51.76 us"), unless it is a percentile.
        words = [w for w in line[end:m.start()].split() if w.isalpha()] if i else []
        if before and _PERCENTILE.fullmatch(before[-1]):
            tag = before[-1]
        else:
            tag = " ".join(words) or f"[{i}]"
        end = m.end()
        out.append((f"{label} {tag} {m[2]}", float(m[1].replace(",", ""))))
    return out


def run_once(build: Build, argv: list[str], timeout_s: float, own_bench: bool) -> None:
    env = dict(os.environ)
    if build.site is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (build.site, env.get("PYTHONPATH")) if p)
    cwd = build.bench if own_bench and build.bench is not None else BENCH
    try:
        out = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        build.failures.append(f"timed out after {timeout_s:.0f} s")
        return
    seen: dict[str, float] = {}
    for line in out.stdout.splitlines():
        for name, value in figures_of(line):
            seen.setdefault(name, value)
    if out.returncode:
        tail = (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:] or ["(nothing printed)"]
        build.failures.append(f"exit {out.returncode}: {tail[0]}")
    runs = max((len(v) for v in build.figures.values()), default=0)
    for name in [*build.figures, *(n for n in seen if n not in build.figures)]:
        values = build.figures[name]
        values.extend([None] * (runs - len(values)))
        values.append(seen.get(name))


def report(a: Build, b: Build) -> None:
    print(f"\nA = {a.label}\nB = {b.label}\n")
    print(f"{'figure':64s} {'A median':>12s} {'B median':>12s} {'B/A median':>11s} {'B/A range':>17s}")
    for name in [*a.figures, *(n for n in b.figures if n not in a.figures)]:
        av, bv = a.figures.get(name, []), b.figures.get(name, [])
        pairs = [(x, y) for x, y in zip(av, bv, strict=False) if x and y is not None]
        am = statistics.median([x for x in av if x is not None]) if any(x is not None for x in av) else None
        bm = statistics.median([y for y in bv if y is not None]) if any(y is not None for y in bv) else None
        ratios = sorted(y / x for x, y in pairs)
        better = " (lower is better)" if name.rsplit(" ", 1)[-1] in _LOWER_IS_BETTER else ""
        cells = [f"{v:12,.2f}" if v is not None else f"{'-':>12s}" for v in (am, bm)]
        if ratios:
            cells += [f"{statistics.median(ratios):11.3f}", f"{ratios[0]:8.3f}..{ratios[-1]:<7.3f}"]
        print(f"{name[:64]:64s} {' '.join(cells)}{better}")
    for build in (a, b):
        for failure in build.failures:
            print(f"{build.label}: a run failed: {failure}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git ref of build A")
    ap.add_argument("--head", help="git ref of build B (default: the rocketmesh this Python imports)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each build (default 3)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default 1800)")
    ap.add_argument("--bench-of", choices=("head", "each"), default="head",
                    help="run the working tree's bench script for both builds (head), or each build's own (each)")
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- BENCH.py [its options]")
    args = ap.parse_args()
    argv = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not argv or not os.path.isfile(os.path.join(BENCH, argv[0])):
        raise SystemExit("name a bench script of bench/ after --, e.g. -- producer_bench.py --modes sync1")
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")
    a = install(args.base)
    b = install(args.head) if args.head else Build("this rocketmesh (as installed)", None)
    for i in range(args.runs):
        for build in (a, b):
            print(f"run {i + 1}/{args.runs}: {build.label}", flush=True)
            run_once(build, argv, args.timeout, args.bench_of == "each")
    report(a, b)


if __name__ == "__main__":
    main()
