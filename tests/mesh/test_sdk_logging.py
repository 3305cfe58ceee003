"""The SDK is a library: quiet below WARNING in someone else's program, their logging config applies,
ROCKETMESH_LOG_LEVEL opens it up; the services keep their JSON lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

APP = """
import logging, sys, threading
from rocketmesh import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer

namesrv, mode = sys.argv[1], sys.argv[2]
if mode == "app-config":
    logging.basicConfig(level=logging.INFO, format="APP %(levelname)s %(name)s: %(message)s")
with Producer("log-producer", namesrv) as producer:
    producer.send(Message("LogTopic", "hello"))
got = threading.Event()
consumer = PushConsumer("log-consumer-" + mode, namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
consumer.subscribe("LogTopic", "*")
consumer.register_listener(lambda msgs: (got.set(), ConsumeConcurrentlyStatus.CONSUME_SUCCESS)[1])
with consumer:
    assert got.wait(30), "no message consumed"
print("consumed")
"""


def run_app(tmp_path: Path, namesrv: str, mode: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "app.py"
    script.write_text(APP)
    base = {k: v for k, v in os.environ.items() if k != "ROCKETMESH_LOG_LEVEL"}
    result = subprocess.run([sys.executable, str(script), namesrv, mode], capture_output=True, text=True,
                            timeout=90, env={**base, **(env or {})})
    assert result.returncode == 0 and "consumed" in result.stdout, result.stderr
    return result


@pytest.fixture
def mesh(namesrv, broker) -> str:
    return namesrv.addr


def test_nothing_below_warning_by_default(tmp_path: Path, mesh: str) -> None:
    err = run_app(tmp_path, mesh, "plain").stderr
    assert "INFO" not in err and '"level"' not in err, err


def test_the_applications_logging_config_applies(tmp_path: Path, mesh: str) -> None:
    err = run_app(tmp_path, mesh, "app-config").stderr
    ours = [line for line in err.splitlines() if line.startswith("APP INFO rocketmesh.client:")]
    assert ours, err
    assert any("queue_assigned" in line and "group=log-consumer-app-config" in line for line in ours), err
    assert not any(line.lstrip().startswith("{") for line in err.splitlines()), err


def test_rocketmesh_log_level_shows_the_sdks_info_lines(tmp_path: Path, mesh: str) -> None:
    err = run_app(tmp_path, mesh, "plain", env={"ROCKETMESH_LOG_LEVEL": "INFO"}).stderr
    assert any(" INFO rocketmesh.client: " in line for line in err.splitlines()), err


def test_services_log_json_lines(broker) -> None:
    lines = [line for line in broker.stderr_text().splitlines() if line.strip()]
    assert lines, broker.output()
    events = [json.loads(line) for line in lines]
    assert any(e["event"] == "broker_started" and e["level"] == "info" and e["service"] == "broker" for e in events)
