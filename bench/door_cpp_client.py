"""The C++ client's side of door_bench.py, run by the Python of PyPI ``rocketmq`` 0.4.4's venv (it cannot import
rocketmesh). One JSON job on argv; one JSON line of figures on stdout; ``os._exit`` at the end, as the C++ push
consumer can crash when it shuts down.

    {"mode": "sync", "namesrv": ..., "topic": ..., "n": 5000, "size": 1024, "warmup": 200}
    {"mode": "drain", "namesrv": ..., "topic": ..., "group": ..., "n": 200000, "threads": 4, "timeout_s": 300}
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sync(job: dict) -> dict:
    producer = Producer(f"door-bench-p-{os.getpid()}")
    producer.set_namesrv_addr(job["namesrv"])
    producer.start()
    body = "x" * job["size"]  # the library's set_body stops at a NUL byte: a body of text

    def one() -> None:
        m = Message(job["topic"])
        m.set_body(body)
        producer.send_sync(m)

    for _ in range(job["warmup"]):
        one()
    t0, c0 = time.monotonic(), cpu_s()
    for _ in range(job["n"]):
        one()
    elapsed, cpu = time.monotonic() - t0, cpu_s() - c0
    return {"n": job["n"], "elapsed_s": elapsed, "client_cpu_us": cpu / job["n"] * 1e6}


def drain(job: dict) -> dict:
    n = job["n"]
    lock = threading.Lock()
    state = {"got": 0, "first": 0.0, "last": 0.0}
    done = threading.Event()

    def on_message(_msg: object) -> None:
        with lock:
            state["got"] += 1
            now = time.monotonic()
            if state["got"] == 1:
                state["first"] = now
            if state["got"] >= n:
                state["last"] = now
                done.set()

    consumer = PushConsumer(job["group"])
    consumer.set_namesrv_addr(job["namesrv"])
    consumer.set_thread_count(job["threads"])
    consumer.subscribe(job["topic"], on_message, "*")
    c0 = cpu_s()
    consumer.start()
    if not done.wait(job["timeout_s"]):
        return {"error": f"drain stalled at {state['got']}/{n}"}
    cpu = cpu_s() - c0
    return {"n": n, "elapsed_s": state["last"] - state["first"], "client_cpu_us": cpu / n * 1e6}


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    try:
        out = sync(job) if job["mode"] == "sync" else drain(job)
    except Exception as exc:  # noqa: BLE001 - reported to the bench, which names it
        out = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)
    os._exit(0)
