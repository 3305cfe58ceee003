"""Every ``rocketmesh`` command and subcommand answers ``--help``: what it does and its defaults."""

from __future__ import annotations

import pytest

from procs import run_cli
from rocketmesh.cli.admin import COMMANDS

#: command line -> texts its help must show (what it does, the defaults a user looks for).
HELP: dict[tuple[str, ...], tuple[str, ...]] = {
    (): ("up", "namesrv", "broker", "scheduler", "txn-checker", "dashboard", "admin", "produce", "consume"),
    ("up",): ("Run a local mesh", "default: 9876", "default: 10911", "default: 10950", "default: 10960",
              "default: 8082", "--no-dashboard", "default: rocketmesh-data", "default: 127.0.0.1"),
    ("namesrv",): ("Run a name server", "default 9876", "default 127.0.0.1", "kvConfig.json"),
    ("broker",): ("Run a broker", "default 10911", "default 127.0.0.1", "storePathRootDir (default",
                  "brokerName (default broker-a)"),
    ("scheduler",): ("Deliver delayed and timer messages", "default 10950", "default 127.0.0.1"),
    ("txn-checker",): ("Check transactional half messages", "default 10960", "default 127.0.0.1"),
    ("admin",): ("mqadmin's commands", *COMMANDS),
    ("produce",): ("quickstart producer", "default: TopicTest", "default: 10"),
    ("consume",): ("quickstart consumer", "default: TopicTest", "default: please_rename_unique_group_name_4"),
    **{("admin", name): (help_text[0].upper() + help_text[1:], "NAMESRV_ADDR")
       for name, (help_text, _fn, _setup) in COMMANDS.items()},
}


@pytest.mark.parametrize("command", list(HELP), ids=lambda c: " ".join(c) or "rocketmesh")
def test_help_says_what_the_command_does_and_its_defaults(command: tuple[str, ...]) -> None:
    result = run_cli(*command, "--help", timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: rocketmesh"), result.stdout
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for expected in HELP[command]:
        assert " ".join(expected.split()) in text, f"{expected!r} missing from `rocketmesh {' '.join(command)} --help`"


def test_every_admin_command_has_its_help_checked() -> None:
    assert {c[1] for c in HELP if len(c) == 2 and c[0] == "admin"} == set(COMMANDS)


def test_list_dlq_help_shows_the_dead_letter_topic() -> None:
    result = run_cli("admin", "list-dlq", "--help", timeout=30)
    assert result.returncode == 0, result.stderr
    assert "%DLQ%<group>" in result.stdout


def test_python_dash_m_rocketmesh_cli_is_the_console_script() -> None:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "rocketmesh.cli", "admin", "--help"], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 0 and "mqadmin's commands" in result.stdout, result.stderr
