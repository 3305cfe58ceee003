"""Replication: how fast an empty slave catches up with its master, and how fast it follows one.

    python bench/ha_bench.py                      # 1 GiB of 4 KiB messages, then an empty slave catches up
    python bench/ha_bench.py --size-mb 256 --repeat 3

Starts a name server and a master (ASYNC_MASTER, commitlog files of 256 MiB), fills the master with
``--size-mb`` of messages (batches of 64), then starts an empty slave and the ha service and times
how long the slave takes to hold the master's whole commitlog: MB/s of catch-up. Then it sends
another ``--follow-mb`` while the slave is connected and reports the slave's lag when the sends end
and how long it takes to reach zero. Each figure is the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import orjson

from benchkit import Services, free_port
from rocketmesh import Admin, Message, Producer
from rocketmesh.remoting import RemotingClient, RequestCode, request

TOPIC = "HaBench"


def end_of(client: RemotingClient, addr: str) -> int:
    resp = client.invoke_sync(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO), 5000)
    return int(orjson.loads(resp.body)["table"]["commitLogMaxOffset"])


def fill(namesrv: str, mb: int, body: bytes) -> None:
    batch = [Message(TOPIC, body) for _ in range(64)]
    rounds = mb * 1024 * 1024 // (64 * len(body))
    with Producer("ha-bench", namesrv, send_msg_timeout_ms=60_000) as p:
        window = []
        for _ in range(rounds):
            window.append(p.send_batch_async(batch))
            if len(window) >= 16:
                window.pop(0).result(60)
        for f in window:
            f.result(60)


def one_run(size_mb: int, follow_mb: int, body: bytes) -> tuple[float, float, float]:
    services = Services([f"mappedFileSizeCommitLog={256 * 1024 * 1024}"])
    try:
        with Admin(services.namesrv) as admin:
            admin.create_topic(TOPIC, 8, 8)
            admin.wait_topic_route(TOPIC)
        fill(services.namesrv, size_mb, body)
        master = f"127.0.0.1:{services.broker_port}"
        slave_port = free_port()
        with RemotingClient(name="ha-bench") as client:
            target = end_of(client, master)
            t0 = time.monotonic()
            services.start("slave", "rocketmesh.broker", "-n", services.namesrv, "--listen-port", str(slave_port),
                           "--store-dir", os.path.join(services.dir, "slave-store"), "--set", "brokerIP1=127.0.0.1",
                           "--set", "brokerId=1", "--set", "brokerRole=SLAVE",
                           "--set", f"mappedFileSizeCommitLog={256 * 1024 * 1024}")
            services.start("ha", "rocketmesh.ha", "-n", services.namesrv, "--listen-port", "0",
                           "--set", "brokerName=broker-a")
            slave = f"127.0.0.1:{slave_port}"
            while end_of(client, slave) < target:
                time.sleep(0.05)
            catch_up_s = time.monotonic() - t0
            fill(services.namesrv, follow_mb, body)
            target = end_of(client, master)
            lag = target - end_of(client, slave)
            t1 = time.monotonic()
            while end_of(client, slave) < target:
                time.sleep(0.01)
            drain_s = time.monotonic() - t1
        return size_mb / catch_up_s, lag / 1024 / 1024, drain_s
    finally:
        services.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=1024, help="MiB on the master before the slave starts")
    ap.add_argument("--follow-mb", type=int, default=128, help="MiB sent while the slave follows")
    ap.add_argument("--body", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    body = os.urandom(a.body)
    runs = [one_run(a.size_mb, a.follow_mb, body) for _ in range(a.repeat)]
    rates = [r[0] for r in runs]
    print(f"catch-up of {a.size_mb} MiB: {statistics.median(rates):,.1f} MiB/s "
          f"({a.size_mb / statistics.median(rates):.1f} s; runs {', '.join(f'{r:.1f}' for r in rates)})")
    print(f"following {a.follow_mb} MiB of sends: lag at their end {statistics.median(r[1] for r in runs):.1f} MiB, "
          f"zero {statistics.median(r[2] for r in runs) * 1000:.0f} ms later")
    return 0


if __name__ == "__main__":
    sys.exit(main())
