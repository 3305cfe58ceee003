"""rocketmesh.testing, as an application's tests use it: LocalMesh starts real processes, serves, stops without
a trace; the pytest plugin's fixtures work in a test session of a user's (``python -m pytest`` in a folder of
its own, so this repository's conftest.py is not in play) and in this one (the scheduler on request)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from procs import child_pids, wait_for
from rocketmesh import ConsumeConcurrentlyStatus, Message, Producer, PullConsumer, PushConsumer, SendStatus
from rocketmesh.model.message import MessageExt
from rocketmesh.testing import LocalMesh, ServiceProcess, ServiceStartError


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie left to an init that does not reap counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_local_mesh_serves_a_send_and_a_consume_then_stops_every_process_and_removes_its_folder(
        tmp_path: Path) -> None:
    mesh = LocalMesh(parent_dir=str(tmp_path))
    with mesh:
        folder = mesh.dir
        assert folder.parent == tmp_path and folder.is_dir()
        route = mesh.create_topic("KitOrders", queues=2)
        assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(2, 2)]
        with Producer("kit-producer", mesh.namesrv_addr) as producer:
            for i in range(10):
                assert producer.send(Message("KitOrders", f"order {i}")).send_status is SendStatus.SEND_OK
        got: list[MessageExt] = []
        with PullConsumer("kit-consumer", mesh.namesrv_addr, consume_from="CONSUME_FROM_FIRST_OFFSET") as consumer:
            consumer.subscribe("KitOrders")
            deadline = time.monotonic() + 20
            while len(got) < 10 and time.monotonic() < deadline:
                got += consumer.poll(timeout_ms=1000)
            consumer.commit()
        assert sorted(m.body for m in got) == sorted(f"order {i}".encode() for i in range(10))
        mesh.wait_for_zero_lag("kit-consumer", "KitOrders", timeout_s=10)

        services = mesh.services
        assert sorted(services) == ["broker-a", "namesrv"]
        pids = [p.pid for p in services.values() if p.pid is not None]
        pids += [child for p in services.values() for child in child_pids(p.pid or 0)]
        assert len(pids) >= 2 and all(running(pid) for pid in pids)
    assert not [pid for pid in pids if running(pid)]
    assert not folder.exists() and list(tmp_path.iterdir()) == []


def test_wait_for_zero_lag_names_the_lag_left(tmp_path: Path) -> None:
    with LocalMesh(parent_dir=str(tmp_path)) as mesh:
        mesh.create_topic("KitLag", queues=1)
        with pytest.raises(AssertionError, match="group nobody-home has no progress on the broker .* after 0.5 s"):
            mesh.wait_for_zero_lag("nobody-home", timeout_s=0.5)
        with Producer("kit-producer", mesh.namesrv_addr) as producer:
            for i in range(3):
                producer.send(Message("KitLag", f"first {i}"))
            with PullConsumer("kit-lagger", mesh.namesrv_addr,
                              consume_from="CONSUME_FROM_FIRST_OFFSET") as consumer:
                consumer.subscribe("KitLag")
                got: list[MessageExt] = []
                wait_for(lambda: got.extend(consumer.poll(timeout_ms=500)) or len(got) >= 3, 20, "3 polled")
                consumer.commit()
            for i in range(2):
                producer.send(Message("KitLag", f"second {i}"))
        with pytest.raises(AssertionError, match=r"still lags 2 message\(s\): KitLag/broker-a/0: 2 after 1 s"):
            mesh.wait_for_zero_lag("kit-lagger", "KitLag", timeout_s=1)


def test_a_service_that_does_not_come_up_fails_the_start_with_its_output_and_leaves_nothing(
        tmp_path: Path) -> None:
    mesh = LocalMesh(parent_dir=str(tmp_path), broker_config={"brokerRole": "NO_SUCH_ROLE"})
    started = time.monotonic()
    with pytest.raises(ServiceStartError) as failure:
        mesh.start()
    assert time.monotonic() - started < 20
    text = str(failure.value)
    assert "broker-a exited with 2 before it was ready" in text
    assert "NO_SUCH_ROLE" in text, text  # the broker's own complaint, from its stderr
    assert list(tmp_path.iterdir()) == []
    assert mesh.services == {}
    with pytest.raises(RuntimeError, match="not started"):
        _ = mesh.namesrv_addr


def test_the_plugins_scheduler_fixture_delivers_a_delayed_message(rocketmesh_mesh: LocalMesh,
                                                                   rocketmesh_scheduler: ServiceProcess) -> None:
    rocketmesh_mesh.create_topic("KitDelayed", queues=1)
    got: list[MessageExt] = []
    arrived = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        got.extend(msgs)
        arrived.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("kit-delayed", rocketmesh_mesh.namesrv_addr, consume_from="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe("KitDelayed")
    consumer.register_listener(listener)
    with consumer:
        with Producer("kit-producer", rocketmesh_mesh.namesrv_addr) as producer:
            sent_at = time.time()
            result = producer.send(Message("KitDelayed", b"later", delay_level=1))  # level 1: 1 s
        assert result.send_status is SendStatus.SEND_OK
        assert arrived.wait(20), "the delayed message never arrived"
        waited = time.time() - sent_at
    assert [m.body for m in got] == [b"later"]
    assert waited >= 0.9, f"delivered after {waited:.2f} s, before its delay level's 1 s"


DOCS = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def docs_block(containing: str) -> str:
    """The one python example of docs/testing.md that contains ``containing``."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S) if containing in b]
    assert len(blocks) == 1, f"{len(blocks)} examples of docs/testing.md contain {containing!r}"
    return blocks[0]


def run_pytest_as_a_user(project: Path) -> subprocess.CompletedProcess[str]:
    """``python -m pytest`` in ``project`` as a user runs it: none of this session's pytest or xdist settings, the
    plugin found by its entry point, ``project`` the rootdir (this repository's conftest.py is not in play)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(project)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=180)


def test_the_docs_consumer_test_passes_with_only_the_plugins_fixtures(tmp_path: Path) -> None:
    """docs/testing.md's example: an application's listener, and its test file using only the plugin's fixtures
    (a topic created, orders sent with Producer, consumed by a PushConsumer, zero lag waited for)."""
    (tmp_path / "orders.py").write_text(docs_block("def handle_orders("))
    (tmp_path / "test_orders.py").write_text(docs_block("rocketmesh_mesh.wait_for_zero_lag("))
    run = run_pytest_as_a_user(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout, run.stdout
    assert not (tmp_path / "conftest.py").exists()


#: A test of the docs' conftest.py: the mesh runs what its options asked for, with the broker's setting.
CONFIGURED = """
import os

import pytest
from rocketmesh import Message, MQError, Producer


def test_the_options_shape_the_mesh(rocketmesh_mesh, rocketmesh_namesrv):
    assert sorted(rocketmesh_mesh.services) == ["broker-a", "namesrv", "scheduler", "txn-checker"]
    rocketmesh_mesh.create_topic("Big", queues=1)
    with Producer("big-producer", rocketmesh_namesrv, retry_times_when_send_failed=0) as producer:
        producer.send(Message("Big", os.urandom(60_000)))  # random: no compression
        with pytest.raises(MQError, match="65536"):
            producer.send(Message("Big", os.urandom(70_000)))
"""


def test_the_docs_conftest_configures_the_sessions_mesh(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(docs_block("def rocketmesh_mesh_options("))
    (tmp_path / "test_configured.py").write_text(CONFIGURED)
    run = run_pytest_as_a_user(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout, run.stdout


#: What importing the plugin loads, in a fresh interpreter that has pytest loaded already (as pytest loads it).
LOADED_BY_THE_PLUGIN = """
import json, sys
import pytest
before = set(sys.modules)
import rocketmesh.testing.plugin
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_the_plugin_loads_cheaply_and_without_the_server_extra() -> None:
    """Every pytest session of a Python with rocketmesh installed loads it (its pytest11 entry point)."""
    from importlib.metadata import entry_points

    [entry] = [ep for ep in entry_points(group="pytest11") if ep.name == "rocketmesh"]
    assert entry.value == "rocketmesh.testing.plugin"
    run = subprocess.run([sys.executable, "-P", "-c", LOADED_BY_THE_PLUGIN], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout)
    assert [m for m in loaded if m.split(".")[0] == "rocketmesh"] == [
        "rocketmesh", "rocketmesh.testing", "rocketmesh.testing.plugin"]
    assert [m for m in loaded if m.split(".")[0] in ("zmq", "orjson", "opentelemetry", "structlog", "yaml")] == []
