"""The console script as a user runs it: ``rocketmesh up``, ``produce``, ``admin``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import orjson
from otlp_receiver import OtlpReceiver
from procs import cli_command, free_port, run_cli, wait_for
from rocketmesh import Message, Producer
from rocketmesh.remoting import RemotingClient, RequestCode, request

run = run_cli


def test_up_runs_a_mesh_that_takes_sends_and_stops_cleanly(tmp_path):
    ns_port, broker_port, sched_port, checker_port = free_port(), free_port(), free_port(), free_port()
    receiver = OtlpReceiver().start()  # OTEL_* given to `up` reach every service it starts
    env = {**os.environ, **receiver.env(), "OTEL_SERVICE_NAME": "one-name-for-all"}
    up = subprocess.Popen([*cli_command(), "up", "--data-dir", str(tmp_path / "mesh"), "--namesrv-port", str(ns_port),
                           "--broker-port", str(broker_port), "--scheduler-port", str(sched_port),
                           "--txn-checker-port", str(checker_port), "--set", "mappedFileSizeCommitLog=4194304",
                           "--set", "maxHashSlotNum=10000", "--set", "maxIndexNum=40000"],
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
        assert f"broker-a  127.0.0.1:{broker_port}" in text

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
    # The children are gone: nothing listens on the ports any more.
    for port in (ns_port, broker_port, sched_port, checker_port):
        assert run_port_free(port)
    assert os.path.exists(tmp_path / "mesh" / "broker-a" / "store" / "commitlog")


def run_port_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_up_reports_a_service_that_cannot_start(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run("up", "--data-dir", str(tmp_path / "mesh"), "--namesrv-port", str(port), timeout=90)
    assert result.returncode == 1
    assert "namesrv" in result.stderr and "log" in result.stderr
