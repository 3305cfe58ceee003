"""The TCP door against the ZeroMQ door: the same work on the same broker, in alternating runs, by RocketMQ's C++
client (PyPI ``rocketmq`` 0.4.4) through the door and by rocketmesh's SDK through ZeroMQ.

Run::

    python bench/door_bench.py                       # 3 rounds of both workloads
    python bench/door_bench.py --rounds 5 --sends 10000 --backlog 200000 --threads 4

Workloads, each client in a process of its own:
  sync     one thread sends --sends messages of --size bytes, each awaited (msg/s after a warm-up)
  drain    a push consumer of a fresh group drains a backlog of --backlog messages of --size bytes (msg/s from
           its first message to its last); the listener only counts
  rawsync  as sync, by one light loop that is the same through both doors (a request built by hand, its
           answer read): through the TCP door with RocketMQ's frames (tests/tcpkit.py), through ZeroMQ with
           the SDK's RemotingClient. What the doors cost, without either client's own work
  rawpull  the same light loop, pulling the backlog 32 messages a request, queue after queue; records counted,
           not decoded

Each run prints msg/s and the client's CPU per message; the summary gives the medians and door / ZeroMQ
ratio pair by pair. The C++ client's venv is built by tests/rmqclients.py (the tests' kit, cached under
.cache/rocketmq-clients/), so the first run needs the package index.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchkit import (  # noqa: E402
    Services,
    cpu_per_process,
    fill_backlog,
    free_port,
    process_times,
    watched_pids,
)

HERE = Path(__file__).resolve().parent
SYNC_TOPIC = "DoorBenchSync"
DRAIN_TOPIC = "DoorBenchDrain"


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- rocketmesh's SDK, in a process of its own (``door_bench.py sdk JOB``) ----------------------------------


def sdk_sync(job: dict) -> dict:
    from rocketmesh import Message, Producer

    with Producer(f"door-bench-sdk-{os.getpid()}", job["namesrv"]) as producer:
        body = b"x" * job["size"]
        for _ in range(job["warmup"]):
            producer.send(Message(job["topic"], body))
        t0, c0 = time.monotonic(), cpu_s()
        for _ in range(job["n"]):
            producer.send(Message(job["topic"], body))
        elapsed, cpu = time.monotonic() - t0, cpu_s() - c0
    return {"n": job["n"], "elapsed_s": elapsed, "client_cpu_us": cpu / job["n"] * 1e6}


def sdk_drain(job: dict) -> dict:
    from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer

    n = job["n"]
    lock = threading.Lock()
    state = {"got": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()

    def listener(msgs: list) -> ConsumeConcurrentlyStatus:
        with lock:
            state["got"] += len(msgs)
            now = time.monotonic()
            if state["got"] == len(msgs):
                state["first"] = now
            if state["got"] >= n:
                state["last"] = now
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(job["group"], job["namesrv"], consume_from="CONSUME_FROM_FIRST_OFFSET",
                            consume_thread_nums=job["threads"])
    consumer.subscribe(job["topic"])
    consumer.register_listener(listener)
    c0 = cpu_s()
    consumer.start()
    try:
        if not done.wait(job["timeout_s"]):
            return {"error": f"drain stalled at {state['got']}/{n}"}
        cpu = cpu_s() - c0
    finally:
        consumer.shutdown()
    return {"n": n, "elapsed_s": state["last"] - state["first"], "client_cpu_us": cpu / n * 1e6}


# --- one light loop through either door (``door_bench.py raw JOB``) ----------------------------------------


def raw(job: dict) -> dict:
    """``rawsync`` / ``rawpull`` through the TCP door (``job["door"]`` "tcp") or ZeroMQ ("zmq")."""
    from rocketmesh.remoting import RemotingClient, RemotingCommand, RequestCode, request
    from tcpkit import RawClient, cmd

    addr = job["broker"]
    if job["door"] == "tcp":
        client = RawClient(addr)

        def call(code: int, ext: dict, body: bytes = b"") -> tuple[int, dict, bytes]:
            resp, _ = client.call(cmd(code, 1, {k: str(v) for k, v in ext.items()}, body))
            return resp.code, resp.ext, resp.body
        close = client.close
    else:
        zclient = RemotingClient(name="door-bench")

        def call(code: int, ext: dict, body: bytes = b"") -> tuple[int, dict, bytes]:
            resp: RemotingCommand = zclient.invoke_sync(addr, request(code, ext, body), 10_000)
            return resp.code, resp.ext, resp.body
        close = zclient.close
    try:
        if job["mode"] == "rawsync":
            body = b"x" * job["size"]
            ext = {"producerGroup": "door-bench-raw", "topic": job["topic"], "defaultTopic": "TBW102",
                   "defaultTopicQueueNums": 8, "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0,
                   "properties": "", "reconsumeTimes": 0, "batch": False}
            for _ in range(job["warmup"]):
                call(RequestCode.SEND_MESSAGE, ext, body)
            t0, c0 = time.monotonic(), cpu_s()
            for i in range(job["n"]):
                ext["queueId"] = i % 8
                code, _, _ = call(RequestCode.SEND_MESSAGE, ext, body)
                if code != 0:
                    return {"error": f"send answered {code}"}
            elapsed = time.monotonic() - t0
            return {"n": job["n"], "elapsed_s": elapsed, "client_cpu_us": (cpu_s() - c0) / job["n"] * 1e6}
        got, t0, c0 = 0, time.monotonic(), cpu_s()
        for queue in range(8):
            offset = 0
            while got < job["n"]:
                pull = {"consumerGroup": "door-bench-raw", "topic": job["topic"], "queueId": queue,
                        "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0,
                        "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0, "expressionType": "TAG"}
                code, ext, body = call(RequestCode.PULL_MESSAGE, pull)
                if code != 0:
                    break  # the queue's end
                got += count_records(body)
                offset = int(ext["nextBeginOffset"])
        elapsed = time.monotonic() - t0
        return {"n": got, "elapsed_s": elapsed, "client_cpu_us": (cpu_s() - c0) / max(got, 1) * 1e6}
    finally:
        close()


def count_records(body: bytes) -> int:
    """How many commitlog records a pull's body holds (their TOTALSIZE fields, nothing decoded)."""
    n = pos = 0
    while pos < len(body):
        pos += int.from_bytes(body[pos:pos + 4], "big")
        n += 1
    return n


# --- the bench ------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sends", type=int, default=5000)
    ap.add_argument("--backlog", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=4, help="consume threads of both push consumers")
    ap.add_argument("--workloads", default="sync,drain")
    a = ap.parse_args()
    workloads = a.workloads.split(",")

    from rmqclients import CPP_044, installed

    cpp = installed(CPP_044)
    door_ns, door_broker = free_port(), free_port()
    services = Services(["flushDiskType=ASYNC_FLUSH", f"remotingListenPort={door_broker}"],
                        namesrv_sets=[f"remotingListenPort={door_ns}"])
    zmq_ns, tcp_ns = services.namesrv, f"127.0.0.1:{door_ns}"
    watched = {pid: label for pid, label in watched_pids(services).items() if label != "client"}
    results: dict[str, list[dict]] = {}
    env = {**os.environ, "HOME": services.dir}  # the C++ client's logs and offset snapshots stay in the run's folder
    try:
        # A first put makes the store create (and warm) its first commitlog file: done here, not in a run.
        fill_backlog(zmq_ns, 100, a.size, 8, SYNC_TOPIC)
        services_broker = f"127.0.0.1:{services.broker_port}"
        if "drain" in workloads or "rawpull" in workloads:
            fill_backlog(zmq_ns, a.backlog, a.size, 8, DRAIN_TOPIC)
        for r in range(a.rounds):
            for workload in workloads:
                for door in ("tcp", "zmq"):
                    if workload in ("rawsync", "rawpull"):
                        job = {"mode": workload, "door": door, "topic": SYNC_TOPIC if workload == "rawsync"
                               else DRAIN_TOPIC, "n": a.sends if workload == "rawsync" else a.backlog,
                               "size": a.size, "warmup": 200,
                               "broker": f"127.0.0.1:{door_broker}" if door == "tcp" else services_broker}
                        argv = [sys.executable, str(Path(__file__).resolve()), "raw", json.dumps(job)]
                    elif workload == "sync":
                        job = {"mode": "sync", "topic": SYNC_TOPIC, "n": a.sends, "size": a.size, "warmup": 200}
                    else:
                        job = {"mode": "drain", "topic": DRAIN_TOPIC, "n": a.backlog, "threads": a.threads,
                               "group": f"door-bench-{door}-{time.time_ns()}", "timeout_s": 600}
                    if workload.startswith("raw"):
                        pass
                    elif door == "tcp":
                        argv = [str(cpp.python), str(HERE / "door_cpp_client.py"), json.dumps({**job,
                                                                                            "namesrv": tcp_ns})]
                    else:
                        argv = [sys.executable, str(Path(__file__).resolve()), "sdk",
                                json.dumps({**job, "namesrv": zmq_ns})]
                    before = process_times(list(watched))
                    figures = subprocess_run(argv, env)
                    # The services' CPU over the whole run (warm-up, start and shut-down included) per message.
                    per = cpu_per_process(before, process_times(list(watched)), figures["n"], watched)
                    rate = figures["n"] / figures["elapsed_s"]
                    results.setdefault(f"{workload}/{door}", []).append({**figures, "rate": rate})
                    who = {"tcp": "C++ client, TCP door", "zmq": "SDK, ZeroMQ"}[door]
                    if workload.startswith("raw"):
                        who = {"tcp": "raw loop, TCP door", "zmq": "raw loop, ZeroMQ"}[door]
                    print(f"round {r + 1} {workload:7} {who:21}"
                          f" {rate:>9,.0f} msg/s  CPU us/msg: client {figures['client_cpu_us']:.0f}, broker "
                          f"{per.get('broker', 0):.0f}, namesrv {per.get('namesrv', 0):.1f}", flush=True)
    finally:
        services.stop()
    print("\nsummary (medians; ratio = TCP door / ZeroMQ, pair by pair)")
    for workload in workloads:
        tcp = [x["rate"] for x in results[f"{workload}/tcp"]]
        zmq = [x["rate"] for x in results[f"{workload}/zmq"]]
        ratios = sorted(t / z for t, z in zip(tcp, zmq, strict=True))
        print(f"  {workload:7} TCP door {statistics.median(tcp):>9,.0f} msg/s, ZeroMQ {statistics.median(zmq):>9,.0f} "
              f"msg/s, ratio {statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})")
    return 0


def subprocess_run(argv: list[str], env: dict[str, str]) -> dict:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=HERE, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"a client printed nothing:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    figures = json.loads(lines[-1])
    if "error" in figures:
        raise SystemExit(f"a client failed: {figures['error']}")
    return figures


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "raw":
        print(json.dumps(raw(json.loads(sys.argv[2]))), flush=True)
        sys.exit(0)
    if len(sys.argv) == 3 and sys.argv[1] == "sdk":
        job = json.loads(sys.argv[2])
        print(json.dumps(sdk_sync(job) if job["mode"] == "sync" else sdk_drain(job)), flush=True)
        sys.exit(0)
    sys.exit(main())
