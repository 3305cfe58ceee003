"""What the README tells a new user holds: its snippets run as shown, its links stay inside the
repository, its commands share option names, and the package ships what it says."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

from procs import run_cli, wait_for

from rocketmesh import Admin, MQClientError, Message, Producer
from rocketmesh.acl import SessionCredentials

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def python_block(containing: str) -> str:
    """The README's ```python block that contains ``containing``."""
    blocks = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if containing in b]
    assert len(blocks) == 1, f"{len(blocks)} python blocks contain {containing!r}"
    return blocks[0]


def on_mesh(code: str, namesrv: str) -> str:
    return code.replace("127.0.0.1:9876", namesrv)


def test_the_quickstart_producer_and_consumer_run_as_shown_and_stop_cleanly(tmp_path: Path, namesrv, broker) -> None:
    producer = subprocess.run([sys.executable, "-c", on_mesh(python_block("quickstart-producer"), namesrv.addr)],
                              capture_output=True, text=True, timeout=60)
    assert producer.returncode == 0 and producer.stdout.count("SendStatus.SEND_OK") == 10, producer.stderr
    out = tmp_path / "consumer.out"
    with open(out, "w") as sink:
        # Ctrl-C's SIGINT at its default even when this test runs in a background job, whose shell
        # ignores SIGINT for it (an ignored signal stays ignored across exec, and Python then never
        # raises KeyboardInterrupt).
        consumer = subprocess.Popen([sys.executable, "-c", on_mesh(python_block("PushConsumer("), namesrv.addr)],
                                    stdout=sink, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: out.read_text().count("Hello RocketMQ") == 10, 60, "the 10 messages printed")
    finally:
        consumer.send_signal(signal.SIGINT)
        _, err = consumer.communicate(timeout=30)
    assert consumer.returncode == 0, err
    with Admin(namesrv.addr) as admin:
        assert admin.consume_stats("quickstart-consumer", "TopicTest").total_diff() == 0
        try:
            admin.consumer_connection("quickstart-consumer")
            raise AssertionError("the stopped consumer is still registered")
        except MQClientError as exc:
            assert "not online" in str(exc)


def test_the_delay_and_timer_examples_are_accepted(namesrv, broker) -> None:
    with Producer("readme-delays", namesrv.addr) as producer:
        namespace = {"producer": producer, "Message": Message}
        exec(python_block("deliver_at_ms="), namespace)  # each send raises if the broker refuses it


def test_the_acl_file_and_client_example_work_together(tmp_path: Path, start_namesrv, start_broker) -> None:
    """The README's plain_acl.yml, checked by a name server and a broker, and its signed producer, as shown."""
    [acl_yaml] = [b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if "accessKey: orders-app" in b]
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(acl_yaml)
    acl = dict(aclEnable="true", aclFile=str(acl_file))
    ns = start_namesrv(**acl)
    start_broker(ns.addr, credentials=SessionCredentials("rocketmq2", "12345678"), **acl)
    with Admin(ns.addr, access_key="rocketmq2", secret_key="12345678") as admin:
        admin.create_topic("orders")
        admin.wait_topic_route("orders")
    exec(on_mesh(python_block("access_key="), ns.addr), {})  # the send raises if the broker refuses it


def test_the_tracing_example_exports_the_send_span(namesrv, broker, otlp_receiver) -> None:
    out = subprocess.run([sys.executable, "-c", on_mesh(python_block("TracerProvider("), namesrv.addr)],
                         capture_output=True, text=True, timeout=60, env={**os.environ, **otlp_receiver.env()})
    assert out.returncode == 0, out.stderr
    [send] = otlp_receiver.wait_for(lambda s: s.name == "send TopicTest")
    assert send.service == "orders-app" and send.attributes["messaging.system"] == "rocketmq"


def test_links_stay_inside_the_repository() -> None:
    assert "../shared" not in README
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README links to {target}, which is not in the repository"
    assert (ROOT / "docs" / "architecture.md").exists()


def test_produce_and_consume_share_option_names() -> None:
    helps = {cmd: run_cli(cmd, "--help", timeout=30).stdout for cmd in ("produce", "consume")}
    for option in ("-n NAMESRV, --namesrv NAMESRV", "-t TOPIC, --topic TOPIC", "-g GROUP, --group GROUP",
                   "-c COUNT, --count COUNT"):
        for cmd, text in helps.items():
            assert option in text, f"{cmd} lacks {option}"


def test_the_default_data_dir_is_ignored_by_git() -> None:
    probe = subprocess.run(["git", "check-ignore", "-q", "rocketmesh-data/broker-a/store/commitlog"], cwd=ROOT)
    if probe.returncode == 128:  # not a git checkout (an unpacked sdist): read the file itself
        assert "/rocketmesh-data/" in (ROOT / ".gitignore").read_text().splitlines()
    else:
        assert probe.returncode == 0, "rocketmesh up's default data dir is not in .gitignore"


def test_the_wheel_ships_type_hints_and_the_apache_license(tmp_path: Path) -> None:
    # Built from a copy: setuptools leaves a build/ folder in the tree it builds.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__",
                                                                 "rocketmesh-data", ".pytest_cache"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("rocketmesh-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert "rocketmesh/py.typed" in names
        licenses = [n for n in names if n.endswith("/LICENSE") and ".dist-info/" in n]
        assert licenses and "Apache License" in z.read(licenses[0]).decode()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        assert "License: Apache-2.0" in metadata
