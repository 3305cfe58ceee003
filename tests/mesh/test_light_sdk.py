"""``pip install rocketmesh`` without extras is the SDK and the CLI: in a fresh virtualenv with nothing else, an
application's producer and push consumer work against a mesh, the CLI's admin commands work, none of the
services' dependencies is installed, and a service started there says in one line which extra to install (the
dashboard: its own extra)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from procs import BrokerProcess, NamesrvProcess
from rocketmesh import Admin

ROOT = Path(__file__).resolve().parents[2]
#: What the checkout's wheel is built from (as the Dockerfile copies it).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "libs", "services", "spark")
#: Distributions only the services need: the server extra's, and what the SDK no longer uses.
SERVER_ONLY = ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http", "opentelemetry-exporter-prometheus",
               "prometheus-client", "pyyaml", "zlib-ng", "structlog", "grpcio")


def extra_hint(extra: str) -> str:
    """What a command started without ``extra`` says, less the modules it lists as missing."""
    return f"needs the {extra} extra's dependencies (missing: "


def install_hint(extra: str) -> str:
    """The command that line ends with."""
    return f"pip install 'rocketmesh[{extra}]'"


@pytest.fixture(scope="session")
def light_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv (no system site packages) with the checkout installed as ``pip install rocketmesh`` does."""
    base = tmp_path_factory.mktemp("light-sdk")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, src / name)
    venv = base / "venv"
    # No pip of its own (making one costs half a minute): this environment's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                          str(src)], capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv


def run_in(venv: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``argv`` with the venv's executables, from a folder that holds no checkout."""
    exe = venv / "bin" / argv[0]
    return subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, timeout=timeout, cwd=venv)


def test_the_sdk_installs_without_the_services_dependencies(light_venv: Path) -> None:
    listed = run_in(light_venv, "python", "-c", textwrap.dedent("""
        import importlib.metadata as md, json, rocketmesh
        print(json.dumps({"dists": sorted(d.metadata["Name"].lower().replace("_", "-") for d in md.distributions()),
                          "file": rocketmesh.__file__}))
    """))
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert found["file"].startswith(str(light_venv)), found["file"]  # the installed package, not the checkout
    assert {"rocketmesh", "pyzmq", "orjson", "opentelemetry-api"} <= set(found["dists"])
    assert not set(SERVER_ONLY) & set(found["dists"]), found["dists"]


#: Commands that need an extra, and which.
NEEDS_EXTRA = [
    (("rocketmesh", "broker"), "server"),
    (("rocketmesh", "namesrv", "-p", "0"), "server"),
    (("rocketmesh", "up", "--no-metrics"), "server"),
    (("python", "-m", "rocketmesh.broker"), "server"),
    (("python", "-m", "rocketmesh.scheduler"), "server"),
    (("rocketmesh", "dashboard"), "dashboard"),
    (("python", "-m", "rocketmesh.dashboard"), "dashboard"),
]


@pytest.mark.parametrize(("command", "extra"), [pytest.param(c, e, id=" ".join(c)) for c, e in NEEDS_EXTRA])
def test_a_service_without_its_extra_names_it_and_exits(light_venv: Path, command: tuple[str, ...],
                                                         extra: str) -> None:
    done = run_in(light_venv, *command)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and extra_hint(extra) in lines[0] and lines[0].endswith(install_hint(extra)), done.stderr
    assert "Traceback" not in done.stderr + done.stdout


PRODUCER = """
import json, sys
from rocketmesh import Message, Producer

namesrv, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Producer("light-producer", namesrv=namesrv) as producer:
    ids = [producer.send(Message(topic, f"light {i}".encode(), tags="TagA")).msg_id for i in range(count)]
print(json.dumps(ids))
"""

CONSUMER = """
import sys, threading
from rocketmesh import ConsumeConcurrentlyStatus, PushConsumer

namesrv, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
bodies, lock, done = set(), threading.Lock(), threading.Event()

def on_messages(msgs):
    with lock:
        bodies.update(m.body.decode() for m in msgs)
        if len(bodies) >= count:
            done.set()
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

consumer = PushConsumer("light-consumer", namesrv=namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET")
consumer.subscribe(topic, "TagA")
consumer.register_listener(on_messages)
with consumer:
    done.wait(30)
print("\\n".join(sorted(bodies)))
"""


def test_a_producer_and_a_consumer_of_the_light_sdk_work_against_a_mesh(
        light_venv: Path, namesrv: NamesrvProcess, broker: BrokerProcess, admin: Admin, tmp_path: Path) -> None:
    topic, count = "LightSdkTopic", 20
    admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    admin.wait_topic_route(topic)
    (tmp_path / "produce.py").write_text(PRODUCER)
    (tmp_path / "consume.py").write_text(CONSUMER)

    sent = run_in(light_venv, "python", str(tmp_path / "produce.py"), namesrv.addr, topic, str(count))
    assert sent.returncode == 0, sent.stderr
    assert len(set(json.loads(sent.stdout))) == count

    got = run_in(light_venv, "python", str(tmp_path / "consume.py"), namesrv.addr, topic, str(count))
    assert got.returncode == 0, got.stderr
    assert got.stdout.split("\n")[:-1] == sorted(f"light {i}" for i in range(count))

    # The CLI's admin commands are the SDK's too.
    listed = run_in(light_venv, "rocketmesh", "admin", "topic-list", "-n", namesrv.addr)
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()
