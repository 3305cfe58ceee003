"""What the README and the documentation site (docs/) tell a new user holds: their snippets run as
shown, every python example is either run here or said not to be, the README's links stay inside the
repository, every admin command is documented, the commands share option names, and the package ships
what it says."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from functools import partial
from pathlib import Path

from procs import run_cli, wait_for
from rocketmesh import Admin, Message, MessageExt, MQClientError, Producer
from rocketmesh.acl import SessionCredentials

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
#: What a user reads: the README (the front page) and the site's pages. The site shows the README's
#: quickstart by including it, so each example is written once, in one of these files.
PAGES = {"README.md": README} | {f"docs/{p.name}": p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}

#: Each python example the tests below run, by a string only it contains.
RUN_HERE = ("quickstart-producer", "quickstart-consumer", "deliver_at_ms=", "access_key=", "TracerProvider(",
            "SelectMessageQueueByHash()", "pull-example", "orders-tx", "compress_level=9")
#: docs/asyncio-pull.md's examples, run by test_aio_pull_consumer.py and test_aio_admin.py.
RUN_HERE += ("async-orders-reader", "aio-admin-example")
#: docs/asyncio.md's and the README's asyncio examples.
RUN_HERE += ("aio-readme-producer", "aio-guide-consumer", "aio-tx-example")
#: Examples that are not run as shown, and why.
NOT_RUN = {"rocketmesh.spark.register(": "needs Spark, a JVM and the caller's DataFrame; tests/mesh/test_spark.py "
                                         "runs the data source",
           "docs/examples/fastapi_orders.py": "a web service: tests/mesh/test_aio_fastapi_example.py serves it with "
                                              "uvicorn",
           "def handle_orders(": "an application's module: tests/mesh/test_testing_kit.py runs it under pytest",
           "rocketmesh_mesh.wait_for_zero_lag(": "a pytest file: tests/mesh/test_testing_kit.py runs it with pytest",
           "def rocketmesh_mesh_options(": "a conftest.py: tests/mesh/test_testing_kit.py runs pytest with it"}


def fenced_blocks(language: str) -> list[tuple[str, str]]:
    """Every ```language block of the README and the docs, as (file, code)."""
    return [(name, block) for name, text in PAGES.items()
            for block in re.findall(rf"```{language}\n(.*?)```", text, re.S)]


def python_block(containing: str) -> str:
    """The one ```python block of the README or the docs that contains ``containing``."""
    blocks = [b for _, b in fenced_blocks("python") if containing in b]
    assert len(blocks) == 1, f"{len(blocks)} python blocks contain {containing!r}"
    return blocks[0]


def on_mesh(code: str, namesrv: str) -> str:
    return code.replace("127.0.0.1:9876", namesrv)


def run_example(containing: str, namesrv: str, **env: str) -> subprocess.CompletedProcess:
    """The example that contains ``containing``, run as a script against ``namesrv``."""
    return subprocess.run([sys.executable, "-c", on_mesh(python_block(containing), namesrv)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **env})


def test_every_python_example_is_run_here_or_said_not_to_be() -> None:
    markers = (*RUN_HERE, *NOT_RUN)
    for name, block in fenced_blocks("python"):
        found = [m for m in markers if m in block]
        assert len(found) == 1, f"a python example in {name} is matched by {found or 'no marker'}:\n{block}"
    for marker in markers:
        python_block(marker)  # each marker finds exactly one example


def test_the_quickstart_producer_and_consumer_run_as_shown_and_stop_cleanly(tmp_path: Path, namesrv, broker) -> None:
    producer = run_example("quickstart-producer", namesrv.addr)
    assert producer.returncode == 0 and producer.stdout.count("SendStatus.SEND_OK") == 10, producer.stderr
    out = tmp_path / "consumer.out"
    with open(out, "w") as sink:
        # Ctrl-C's SIGINT at its default even when this test runs in a background job, whose shell
        # ignores SIGINT for it (an ignored signal stays ignored across exec, and Python then never
        # raises KeyboardInterrupt).
        consumer = subprocess.Popen([sys.executable, "-c", on_mesh(python_block("quickstart-consumer"), namesrv.addr)],
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


def test_the_compression_example_stores_the_report_compressed_and_reads_it_back(namesrv, broker) -> None:
    out = run_example("compress_level=9", namesrv.addr)
    assert out.returncode == 0, out.stderr
    flag, size, same = out.stdout.split()
    assert flag == "1" and int(size) < 1024 and same == "True"


def test_the_acl_file_and_client_example_work_together(tmp_path: Path, start_namesrv, start_broker) -> None:
    """The docs' plain_acl.yml, checked by a name server and a broker, and their signed producer, as shown."""
    [acl_yaml] = [b for _, b in fenced_blocks("yaml") if "accessKey: orders-app" in b]
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
    out = run_example("TracerProvider(", namesrv.addr, **otlp_receiver.env())
    assert out.returncode == 0, out.stderr
    [send] = otlp_receiver.wait_for(lambda s: s.name == "send TopicTest")
    assert send.service == "orders-app" and send.attributes["messaging.system"] == "rocketmq"


def three_events_of(admin: Admin, order_id: str) -> list[MessageExt]:
    """The producing example's three events of ``order_id``, once the index has all three."""
    found = [m for m in admin.query_msg_by_key("TopicTest", order_id) if m.body.startswith(order_id.encode())]
    return found if len(found) == 3 else []


def test_the_producing_example_sends_each_way_and_keeps_an_orders_events_in_one_queue(namesrv, broker) -> None:
    out = run_example("SelectMessageQueueByHash()", namesrv.addr)
    assert out.returncode == 0, out.stderr
    assert "SendStatus.SEND_OK" in out.stdout and "100 async sends stored" in out.stdout
    with Admin(namesrv.addr) as admin:
        for order_id in ("order-1", "order-2"):
            found = wait_for(partial(three_events_of, admin, order_id), 10, f"{order_id}'s three events indexed")
            assert len({(m.store_host, m.queue_id) for m in found}) == 1, f"{order_id}'s events in several queues"
            in_queue_order = [m.body.decode().split()[1] for m in sorted(found, key=lambda m: m.queue_offset)]
            assert in_queue_order == ["created", "paid", "shipped"]


def test_the_pull_consumer_example_reads_and_commits(namesrv, broker) -> None:
    with Producer("docs-pull-feed", namesrv.addr) as producer:
        for i in range(10):
            producer.send(Message("TopicTest", f"pull me {i}", tags="TagA"))
    out = run_example("pull-example", namesrv.addr)
    assert out.returncode == 0, out.stderr
    assert sum("pull me" in line for line in out.stdout.splitlines()) == 10
    with Admin(namesrv.addr) as admin:
        assert admin.consume_stats("pull-example", "TopicTest").total_diff() == 0


def test_the_transaction_example_commits_its_message(namesrv, broker) -> None:
    saved: list[object] = []
    namespace = {"save_order": saved.append, "order_saved": lambda keys: True, "order": {"id": 1}}
    exec(on_mesh(python_block("orders-tx"), namesrv.addr), namespace)
    assert saved == [{"id": 1}]
    with Admin(namesrv.addr) as admin:
        [committed] = wait_for(lambda: admin.query_msg_by_key("TopicTest", "order-1"), 10, "the committed message")
        assert committed.body == b"order 1"


def test_the_asyncio_examples_send_consume_and_settle_a_transaction(namesrv, broker) -> None:
    readme = run_example("aio-readme-producer", namesrv.addr)
    assert readme.returncode == 0 and "100 sent" in readme.stdout, readme.stderr
    guide = run_example("aio-guide-consumer", namesrv.addr)
    assert guide.returncode == 0, guide.stderr
    assert "SEND_OK" in guide.stdout and "100 more sent" in guide.stdout and "all 101 consumed" in guide.stdout
    tx = run_example("aio-tx-example", namesrv.addr)
    assert tx.returncode == 0, tx.stderr
    assert "SEND_OK" in tx.stdout and "COMMIT_MESSAGE" in tx.stdout


def test_every_admin_command_has_its_row_in_the_operations_page() -> None:
    listed = run_cli("admin", "--help", timeout=30).stdout
    commands = re.findall(r"^    ([a-z][a-z-]+)\s", listed, re.M)
    assert "update-topic" in commands and "pending-half-messages" in commands
    operations = PAGES["docs/operations.md"]
    for command in commands:
        assert f"| `{command}` |" in operations, f"docs/operations.md has no row for rocketmesh admin {command}"


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
