"""Figures for RELIABILITY.md, recorded by the fault, fuzz and security tests.

A test takes the ``reliability`` fixture and records one row per case it ran::

    reliability.fault("SIGKILL broker, SYNC_FLUSH", cycles=20, sent=..., acknowledged=...,
                      lost=0, duplicated=..., recovery_s=[...], note="...")
    reliability.fuzz("wire decoder", inputs=2000, note="...")
    reliability.security("send without credentials", refused="NO_PERMISSION ...", note="...")

Rows are kept for the whole pytest session. When ``ROCKETMESH_RELIABILITY_REPORT`` names a
file, the session ends by writing RELIABILITY.md there from the rows this session recorded
(``make_report``); without it nothing is written. Under pytest-xdist each worker saves its rows
beside that file and the controller merges them. The file's own header says how to rerun it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPORT_ENV = "ROCKETMESH_RELIABILITY_REPORT"
#: Set to 1 for the longer variants (more cycles, the long soak).
LONG_ENV = "ROCKETMESH_LONG_FAULTS"

RERUN_COMMAND = (
    "ROCKETMESH_RELIABILITY_REPORT=RELIABILITY.md python -m pytest -q tests/faults tests/fuzz tests/security"
)


@dataclass(slots=True)
class FaultRow:
    """One fault case: how often the fault was injected and what the messages went through."""

    case: str
    cycles: int
    sent: int
    acknowledged: int
    lost: int
    duplicated: int
    recovery_s: list[float] = field(default_factory=list)
    note: str = ""


@dataclass(slots=True)
class FuzzRow:
    """One fuzz target: how many generated inputs reached it and what it must have withstood."""

    target: str
    inputs: int
    note: str = ""


@dataclass(slots=True)
class SecurityRow:
    """One security check: what was attempted and what refused it."""

    check: str
    refused: str
    note: str = ""


class ReliabilityRecorder:
    """Collects the rows of one pytest session; ``long`` tells tests to run their longer variants."""

    def __init__(self, long: bool = False) -> None:
        self.long = long
        self.faults: list[FaultRow] = []
        self.fuzz_targets: list[FuzzRow] = []
        self.checks: list[SecurityRow] = []

    def fault(self, case: str, *, cycles: int, sent: int, acknowledged: int, lost: int, duplicated: int,
              recovery_s: Sequence[float] = (), note: str = "") -> FaultRow:
        row = FaultRow(case, cycles, sent, acknowledged, lost, duplicated, [float(s) for s in recovery_s], note)
        self.faults.append(row)
        return row

    def fuzz(self, target: str, *, inputs: int, note: str = "") -> FuzzRow:
        row = FuzzRow(target, inputs, note)
        self.fuzz_targets.append(row)
        return row

    def security(self, check: str, *, refused: str, note: str = "") -> SecurityRow:
        row = SecurityRow(check, refused, note)
        self.checks.append(row)
        return row

    @property
    def empty(self) -> bool:
        return not (self.faults or self.fuzz_targets or self.checks)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _recovery(samples: Sequence[float]) -> str:
    if not samples:
        return "-"
    median = statistics.median(samples)
    return f"{median:.2f} s (max {max(samples):.2f} s)"


def make_report(rec: ReliabilityRecorder, when: datetime | None = None) -> str:
    """RELIABILITY.md's text for the rows in ``rec``."""
    when = when or datetime.now(UTC)
    lines = [
        "# Reliability",
        "",
        "What rocketmesh survives, what bad input it rejects and what it refuses without credentials,",
        "in figures from its own test suite. Every figure below comes from one run of:",
        "",
        "```",
        RERUN_COMMAND,
        "```",
        "",
        f"(`{LONG_ENV}=1` runs the longer variants.) Run of {when:%Y-%m-%d}, "
        f"{'long' if rec.long else 'CI-sized'} variants.",
        "",
    ]
    if rec.faults:
        lines += [
            "## Faults",
            "",
            "A message is *acknowledged* when its send returned SEND_OK; *lost* counts acknowledged "
            "messages no consumer received after recovery; *duplicated* counts extra deliveries "
            "(at-least-once allows them). Recovery is from the fault to the first acknowledged send "
            "(or the state the case waits for).",
            "",
            "| fault | cycles | sent | acknowledged | lost | duplicated | recovery (median) | notes |",
            "|---|---:|---:|---:|---:|---:|---|---|",
        ]
        for r in sorted(rec.faults, key=lambda r: r.case):
            lines.append(f"| {_cell(r.case)} | {r.cycles} | {r.sent} | {r.acknowledged} | {r.lost} | "
                         f"{r.duplicated} | {_recovery(r.recovery_s)} | {_cell(r.note)} |")
        lines.append("")
    if rec.fuzz_targets:
        lines += [
            "## Bad input",
            "",
            "Generated inputs (hypothesis) sent to a live service; after each target the service is "
            "still up, answered every request with a well-formed reply, and served a normal client.",
            "",
            "| target | inputs | notes |",
            "|---|---:|---|",
        ]
        for r in sorted(rec.fuzz_targets, key=lambda r: r.target):
            lines.append(f"| {_cell(r.target)} | {r.inputs} | {_cell(r.note)} |")
        lines.append("")
    if rec.checks:
        lines += [
            "## Security",
            "",
            "| attempt | refused with | notes |",
            "|---|---|---|",
        ]
        for r in sorted(rec.checks, key=lambda r: r.check):
            lines.append(f"| {_cell(r.check)} | {_cell(r.refused)} | {_cell(r.note)} |")
        lines.append("")
    return "\n".join(lines)


def write_report(rec: ReliabilityRecorder, path: Path) -> None:
    path.write_text(make_report(rec))


def save_rows(rec: ReliabilityRecorder, path: Path) -> None:
    """Write ``rec``'s rows to ``path`` as JSON (a pytest-xdist worker's share of the report)."""
    path.write_text(json.dumps({"faults": [asdict(r) for r in rec.faults],
                                "fuzz": [asdict(r) for r in rec.fuzz_targets],
                                "security": [asdict(r) for r in rec.checks]}))


def merge_rows(rec: ReliabilityRecorder, path: Path) -> None:
    """Add the rows ``save_rows`` wrote to ``path`` to ``rec``."""
    data = json.loads(path.read_text())
    rec.faults += [FaultRow(**r) for r in data["faults"]]
    rec.fuzz_targets += [FuzzRow(**r) for r in data["fuzz"]]
    rec.checks += [SecurityRow(**r) for r in data["security"]]
