"""The console script as a user runs it: ``rocketmesh up``, ``produce``, ``admin``."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import orjson
import pytest

from otlp_receiver import OtlpReceiver
from procs import child_pids, cli_command, free_port, read_until_up, run_cli, wait_for
from rocketmesh import Message, Producer, PullConsumer
from rocketmesh.client.errors import MQBrokerError
from rocketmesh.remoting import RemotingClient, RequestCode, ResponseCode, request
from tcpkit import RawClient, cmd

run = run_cli


def http_client() -> urllib.request.OpenerDirector:
    """A browser's part for a script: keeps the dashboard's session cookie between requests."""
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def http_call(client: urllib.request.OpenerDirector, url: str, data: dict | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET ``url`` (POST ``data`` as JSON): the status and the body, an error status too."""
    body = None if data is None else orjson.dumps(data)
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json", **(headers or {})})
    try:
        with client.open(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_up_runs_a_mesh_that_takes_sends_and_stops_cleanly(tmp_path):
    ns_port, broker_port, sched_port, checker_port = free_port(), free_port(), free_port(), free_port()
    ns_door, broker_door, dash_port = free_port(), free_port(), free_port()
    receiver = OtlpReceiver().start()  # OTEL_* given to `up` reach every service it starts
    env = {**os.environ, **receiver.env(), "OTEL_SERVICE_NAME": "one-name-for-all"}
    up = subprocess.Popen([*cli_command(), "up", "--data-dir", str(tmp_path / "mesh"), "--namesrv-port", str(ns_port),
                           "--broker-port", str(broker_port), "--scheduler-port", str(sched_port),
                           "--txn-checker-port", str(checker_port), "--no-metrics",
                           "--namesrv-remoting-port", str(ns_door), "--broker-remoting-port", str(broker_door),
                           "--dashboard-port", str(dash_port),
                           "--set", "mappedFileSizeCommitLog=4194304", "--set", "maxHashSlotNum=10000",
                           "--set", "maxIndexNum=40000"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    namesrv = f"127.0.0.1:{ns_port}"
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            assert line, "rocketmesh up exited early:\n" + "".join(lines)
            lines.append(line)
            if "Stop with Ctrl-C" in line:
                break
        text = "".join(lines)
        assert f"export NAMESRV_ADDR={namesrv}" in text
        assert f"broker-a  127.0.0.1:{broker_port}  (RocketMQ clients: 127.0.0.1:{broker_door})" in text
        assert f"RocketMQ's own clients (Java, C++, Go, Node):  NAMESRV_ADDR=127.0.0.1:{ns_door}" in text

        # The web console, at the address the block gives, sees the mesh.
        dashboard = f"http://127.0.0.1:{dash_port}"
        assert f"\n  dashboard {dashboard}\n" in text
        client = http_client()
        status, body = http_call(client, dashboard + "/healthz")
        assert status == 200 and body.startswith(b"ok rocketmesh-dashboard"), (status, body)

        def overview_lists_the_broker() -> bool:
            status, body = http_call(client, dashboard + "/api/overview")
            assert status == 200, (status, body)
            return [b["addr"] for b in orjson.loads(body)["brokers"]] == [f"127.0.0.1:{broker_port}"]
        wait_for(overview_lists_the_broker, 20, "the dashboard's overview listing broker-a")

        produced = run("produce", "-n", namesrv, "-t", "CliTopic", "-c", "5")
        assert produced.returncode == 0, produced.stderr
        assert produced.stdout.count("sendStatus=SEND_OK") == 5
        # ... each under its own service name.
        spans = receiver.wait_for(lambda s: s.name == "send CliTopic", count=5)
        assert {s.service for s in spans} == {"rocketmesh-broker"}

        status = run("admin", "topic-status", "-n", namesrv, "-t", "CliTopic")
        assert status.returncode == 0, status.stderr
        total = sum(int(m.group(1)) for m in re.finditer(r"broker-a\s+\d+\s+0\s+(\d+)", status.stdout))
        assert total == 5, status.stdout

        found = run("admin", "query-msg-by-key", "-n", namesrv, "-t", "CliTopic", "-k", "KEY3")
        assert found.returncode == 0 and len(re.findall(r"^[0-9A-F]{32}", found.stdout, re.M)) == 1, found.stdout
        msg_id = re.search(r"^([0-9A-F]{32})", found.stdout, re.M).group(1)
        shown = run("admin", "query-msg-by-id", "-n", namesrv, "-i", msg_id)
        assert "Hello RocketMQ 3" in shown.stdout, shown.stdout + shown.stderr

        sent = run("admin", "send-message", "-n", namesrv, "-t", "CliTopic", "-p", "by hand", "-k", "hand")
        assert sent.returncode == 0 and "SEND_OK" in sent.stdout, sent.stderr

        # A RocketMQ client at the name server's door is routed to the broker's door.
        client = RawClient(f"127.0.0.1:{ns_door}")
        try:
            route, _ = client.call(cmd(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": "CliTopic"}))
        finally:
            client.close()
        assert orjson.loads(route.body)["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{broker_door}"}

        bad = run("admin", "topic-route", "-n", namesrv, "-t", "NoSuchTopic")
        assert bad.returncode == 1 and "TOPIC_NOT_EXIST" in bad.stderr

        clusters = run("admin", "cluster-list", "-n", namesrv)
        assert f"127.0.0.1:{broker_port}" in clusters.stdout

        # The mesh's scheduler delivers a delayed message (level 1: one second) to its topic.
        with Producer("cli-delay", namesrv) as producer:
            producer.send(Message("CliDelay", "later", delay_level=1))

        def delivered() -> bool:
            out = run("admin", "topic-status", "-n", namesrv, "-t", "CliDelay").stdout
            return sum(int(m.group(1)) for m in re.finditer(r"broker-a\s+\d+\s+0\s+(\d+)", out)) == 1
        wait_for(delivered, 20, "the delayed message in its topic")

        # The mesh's txn-checker has taken the broker's half queue.
        def checker_owns_half_queue() -> bool:
            with RemotingClient(name="probe") as client:
                resp = client.invoke_sync(f"127.0.0.1:{checker_port}",
                                          request(RequestCode.GET_CONSUMER_RUNNING_INFO), 3000)
            return "RMQ_SYS_TRANS_HALF_TOPIC@broker-a:0" in orjson.loads(resp.body)["queues"]
        wait_for(checker_owns_half_queue, 20, "the txn-checker owning the half queue")
    finally:
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)
        receiver.stop()
    assert up.returncode == 0, rest
    assert "stopped." in rest
    # Every service set up tracing under its own name (one OTEL_SERVICE_NAME for all notwithstanding).
    for name, service in (("namesrv", "namesrv"), ("broker-a", "broker"), ("scheduler", "scheduler"),
                          ("txn-checker", "txn-checker"), ("dashboard", "dashboard")):
        events = [orjson.loads(line) for line in (tmp_path / "mesh" / "logs" / f"{name}.log").read_text().splitlines()
                  if line.startswith("{")]
        assert [e["service_name"] for e in events if e.get("event") == "tracing_configured"] == \
            [f"rocketmesh-{service}"], name
    # The children are gone: nothing listens on the ports any more.
    for port in (ns_port, broker_port, sched_port, checker_port, dash_port):
        assert run_port_free(port)
    assert os.path.exists(tmp_path / "mesh" / "broker-a" / "store" / "commitlog")


def run_port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


ACL_YAML = """\
accounts:
  - accessKey: rocketmq2
    secretKey: "12345678"
    admin: true
  - accessKey: orders-app
    secretKey: orders-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - AclUp=PUB|SUB
    groupPerms:
      - acl-up-group=SUB
"""


def test_up_with_acl_serves_accounts_and_refuses_the_rest(tmp_path, reliability):
    """The issue's command, nothing more: the services take the file's admin account, through their
    environment (never an argument ``ps`` would show); the dashboard asks operators to sign in."""
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_YAML)
    ns_port, dash_port = free_port(), free_port()
    up = subprocess.Popen([*cli_command(), "up", "--no-remoting", "--data-dir", str(tmp_path / "mesh"),
                           "--namesrv-port", str(ns_port), "--dashboard-port", str(dash_port),
                           "--broker-port", str(free_port()), "--scheduler-port", str(free_port()),
                           "--txn-checker-port", str(free_port()), "--no-metrics",
                           "--set", "aclEnable=true", "--set", f"aclFile={acl_file}",
                           "--set", "mappedFileSizeCommitLog=4194304", "--set", "maxHashSlotNum=10000",
                           "--set", "maxIndexNum=40000"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    namesrv = f"127.0.0.1:{ns_port}"
    app = dict(access_key="orders-app", secret_key="orders-secret")
    try:
        read_until_up(up)
        children = child_pids(up.pid)
        assert len(children) == 5
        for pid in children:
            assert b"12345678" not in _cmdline(pid)
        # The dashboard has the admin account as its own (the sampler signs with it), in its environment too.
        (dash_pid,) = [pid for pid in children if b"rocketmesh.dashboard" in _cmdline(pid)]
        with open(f"/proc/{dash_pid}/environ", "rb") as f:
            assert {b"ROCKETMESH_ACCESS_KEY=rocketmq2", b"ROCKETMESH_SECRET_KEY=12345678"} <= set(f.read().split(b"\0"))
        dashboard, operator = f"http://127.0.0.1:{dash_port}", http_client()
        status, body = http_call(operator, dashboard + "/api/overview")
        assert status == 401, (status, body)
        status, body = http_call(operator, dashboard + "/api/session")
        session = orjson.loads(body)
        assert status == 200 and session["aclEnable"] is True and not session["signedIn"], session
        status, body = http_call(operator, dashboard + "/api/login", {"accessKey": "orders-app", "secretKey": "nope"},
                                 {"X-CSRF-Token": session["csrfToken"]})
        assert status == 403, (status, body)
        status, body = http_call(operator, dashboard + "/api/login", {"accessKey": "orders-app",
                                                                      "secretKey": "orders-secret"},
                                 {"X-CSRF-Token": session["csrfToken"]})
        assert status == 200 and orjson.loads(body)["rights"]["admin"] is False, (status, body)
        assert http_call(operator, dashboard + "/api/overview")[0] == 200

        # Admin operations: the admin account's keys on the CLI pass, none are refused.
        topic = ["admin", "update-topic", "-n", namesrv, "-t", "AclUp", "-r", "1", "-w", "1"]
        refused = run(*topic)
        assert refused.returncode != 0 and "NO_PERMISSION" in refused.stderr, refused.stderr
        reliability.security("rocketmesh admin update-topic without keys, mesh from up with aclEnable",
                             refused=refused.stderr.strip().splitlines()[-1][:160])
        created = run(*topic, "--access-key", "rocketmq2", "--secret-key", "12345678")
        assert created.returncode == 0, created.stderr

        with pytest.raises(MQBrokerError) as err:
            with Producer("acl-up-anon", namesrv) as anonymous:
                anonymous.send(Message("AclUp", b"anonymous"))
        assert err.value.response_code == ResponseCode.NO_PERMISSION, err.value
        reliability.security("send without credentials, mesh from up with aclEnable", refused=str(err.value)[:160])

        # The non-admin account sends, a delayed message too: the scheduler re-puts it with its own account.
        with Producer("acl-up-p", namesrv, **app) as producer:
            producer.send(Message("AclUp", b"now"))
            producer.send(Message("AclUp", b"later", delay_level=1))
        consumer = PullConsumer("acl-up-group", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET", **app)
        consumer.subscribe("AclUp")
        consumer.start()
        try:
            got: set[bytes] = set()
            wait_for(lambda: got.update(m.body for m in consumer.poll(500)) or {b"now", b"later"} <= got, 20,
                     "the account's message and the delayed one")
        finally:
            consumer.shutdown()
    finally:
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)
    assert up.returncode == 0, rest


def _small_up(tmp_path, *prefix: str, command: list[str] | None = None,
              options: tuple[str, ...] = ("--no-dashboard",)) -> tuple[subprocess.Popen, str]:
    """``rocketmesh up`` (run by ``prefix``, if any; ``command``: the console script) on free ports with small
    store files, no metrics and ``options``, up and serving; and what it printed until then."""
    up = subprocess.Popen([*prefix, *(command or cli_command()), "up", "--no-remoting",
                           "--data-dir", str(tmp_path / "mesh"), "--namesrv-port", str(free_port()),
                           "--broker-port", str(free_port()), "--scheduler-port", str(free_port()),
                           "--txn-checker-port", str(free_port()), "--no-metrics", *options,
                           "--set", "mappedFileSizeCommitLog=4194304", "--set", "maxHashSlotNum=10000",
                           "--set", "maxIndexNum=40000"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text = read_until_up(up)
    except BaseException:
        up.kill()
        raise
    return up, text


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by whoever adopted it, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _kill_left(pids: list[int]) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_services_stop_by_themselves_when_up_is_killed_outright(tmp_path):
    """SIGKILL (or the OOM killer) leaves ``up`` no chance to stop its services; each notices that its
    parent is gone and stops, rather than live on holding its port and store. (``--no-dashboard``: the
    four services, no dashboard.)"""
    up, text = _small_up(tmp_path)
    children = child_pids(up.pid)
    assert len(children) == 4 and not any(b"rocketmesh.dashboard" in _cmdline(pid) for pid in children)
    assert "\n  dashboard " not in text, text
    try:
        up.kill()
        up.wait(10)
        wait_for(lambda: not any(_alive(pid) for pid in children), 20, "every service of the killed up stopping")
    finally:
        _kill_left(children)


#: Runs the command after it with SIGHUP's default action, as in a terminal, whatever this test run inherited
#: (a run started under nohup ignores SIGHUP, and so would every process it starts).
AS_IN_A_TERMINAL = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
                    "os.execvp(sys.argv[1], sys.argv[1:])"]


@pytest.mark.parametrize("nohup", [False, True], ids=["in a terminal", "under nohup"])
def test_up_stops_the_mesh_when_its_terminal_hangs_up_unless_under_nohup(tmp_path, nohup):
    up, _ = _small_up(tmp_path, *AS_IN_A_TERMINAL, *(["nohup"] if nohup else []))
    children = child_pids(up.pid)
    try:
        up.send_signal(signal.SIGHUP)
        if nohup:
            time.sleep(2)
            assert up.poll() is None and all(_alive(pid) for pid in children)
            up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)
        assert up.returncode == 0 and "stopped." in rest, rest
        assert not any(_alive(pid) for pid in children)
    finally:
        if up.poll() is None:
            up.kill()
        _kill_left(children)


def test_up_reports_a_service_that_cannot_start(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run("up", "--no-remoting", "--data-dir", str(tmp_path / "mesh"), "--namesrv-port", str(port),
                     "--no-metrics", timeout=90)
    assert result.returncode == 1
    assert "namesrv" in result.stderr and "log" in result.stderr


#: ``rocketmesh up`` where the dashboard extra is not installed (``pip install '.[server]'``): its starlette
#: cannot be found.
WITHOUT_STARLETTE = [sys.executable, "-P", "-c", "import sys; sys.modules['starlette'] = None; "
                     "from rocketmesh.cli import main; sys.exit(main(sys.argv[1:]))"]


def test_up_without_the_dashboard_extra_runs_the_mesh_without_it(tmp_path):
    up, text = _small_up(tmp_path, command=WITHOUT_STARLETTE, options=())
    try:
        assert ("rocketmesh up: no dashboard: it needs the dashboard extra's dependencies (missing: starlette): "
                "pip install 'rocketmesh[dashboard]'") in text, text
        assert "\n  dashboard " not in text and len(child_pids(up.pid)) == 4, text
    finally:
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)
    assert up.returncode == 0, rest
