"""Transactional messages: send rate, commit-to-visible latency, and the txn-checker's check-back rate.

Run::

    python bench/txn_bench.py                                  # all modes, services started here
    python bench/txn_bench.py --modes send --count 5000 --threads 8
    python bench/txn_bench.py --modes visible --rate 200 --duration 10
    python bench/txn_bench.py --modes check --count 2000
    python bench/txn_bench.py --namesrv 127.0.0.1:9876        # running services (send and visible modes)

Modes:
  send     --threads threads each run transactions (half message, local transaction that commits at once,
           END_TRANSACTION) back to back: transactions/s; the same threads doing plain sync sends for comparison
  visible  one thread runs --rate transactions/s; a PushConsumer measures the time from the local
           transaction returning COMMIT to the listener receiving the message (p50/p99)
  check    --count transactions left UNKNOW, their producer gone; a stand-in producer of the group
           answers COMMIT to every check; a txn-checker (transactionTimeOut=0) decides them all:
           time from the checker's ready line to the last message visible, and checks/s
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from benchkit import Services, free_port, make_topic, percentile
from rocketmesh import LocalTransactionState, Message, Producer, TransactionProducer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer

COMMIT = LocalTransactionState.COMMIT_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


class TxnServices(Services):
    """Name server and broker (benchkit's), plus a txn-checker on demand."""

    def start_checker(self, *sets: str) -> None:
        self.start("txn-checker", "rocketmesh.txn_checker", "-n", self.namesrv, "--listen-port", str(free_port()),
                   "--set", "listenAddress=127.0.0.1", *(a for item in sets for a in ("--set", item)))


class Decide:
    """A transaction listener: a fixed outcome, the time each local transaction ended (by key)."""

    def __init__(self, outcome: LocalTransactionState) -> None:
        self.outcome = outcome
        self.ended: dict[str, int] = {}

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        self.ended[msg.keys or ""] = time.time_ns()
        return self.outcome

    def check_local_transaction(self, msg) -> LocalTransactionState:
        return COMMIT



def run_threads(threads: int, count: int, work) -> float:
    """``work(i)`` for i in range(count) on ``threads`` threads; items per second."""
    next_i = iter(range(count))
    lock = threading.Lock()

    def loop() -> None:
        while True:
            with lock:
                i = next(next_i, None)
            if i is None:
                return
            work(i)
    ts = [threading.Thread(target=loop) for _ in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return count / (time.monotonic() - t0)


def bench_send(namesrv: str, count: int, threads: int, size: int) -> tuple[float, float]:
    topic = "TxnBenchSend"
    make_topic(namesrv, topic)
    body = b"x" * size
    with TransactionProducer("txn-bench-send", namesrv, Decide(COMMIT)) as p:
        run_threads(threads, min(500, count), lambda i: p.send_message_in_transaction(Message(topic, body)))  # warm-up
        tx = run_threads(threads, count, lambda i: p.send_message_in_transaction(Message(topic, body, keys=str(i))))
    with Producer("txn-bench-plain", namesrv) as p:
        run_threads(threads, min(500, count), lambda i: p.send(Message(topic, body)))  # warm-up
        plain = run_threads(threads, count, lambda i: p.send(Message(topic, body)))
    return tx, plain


def bench_visible(namesrv: str, rate: int, duration: float, size: int) -> tuple[float, float, int]:
    topic = "TxnBenchVisible"
    make_topic(namesrv, topic)
    listener = Decide(COMMIT)
    lat: list[float] = []
    lock = threading.Lock()

    def on(msgs):
        now = time.time_ns()
        with lock:
            for m in msgs:
                ended = listener.ended.get(m.keys or "")
                if ended is not None:
                    lat.append((now - ended) / 1e6)
        return SUCCESS

    c = PushConsumer(f"txn-bench-visible-{time.time_ns()}", namesrv, consume_from="CONSUME_FROM_LAST_OFFSET",
                     consume_thread_nums=4)
    c.subscribe(topic)
    c.register_listener(on)
    c.start()
    time.sleep(2.0)  # the consumer's queues assigned, its pulls held
    body = b"x" * size
    n = int(rate * duration)
    try:
        with TransactionProducer("txn-bench-visible", namesrv, listener) as p:
            t0 = time.monotonic()
            for i in range(n):
                due = t0 + i / rate
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                p.send_message_in_transaction(Message(topic, body, keys=str(i)))
            deadline = time.monotonic() + 30
            while len(lat) < n and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        c.shutdown()
    lat.sort()
    return percentile(lat, 0.5), percentile(lat, 0.99), len(lat)


def bench_check(count: int, size: int, interval_ms: int) -> tuple[float, float]:
    """A fresh name server, broker and txn-checker per run, so every run starts from the same state."""
    services = TxnServices([])
    try:
        return _check_run(services, count, size, interval_ms)
    finally:
        services.stop()


def _check_run(services: TxnServices, count: int, size: int, interval_ms: int) -> tuple[float, float]:
    namesrv = services.namesrv
    topic = "TxnBenchCheck"
    make_topic(namesrv, topic)
    body = b"x" * size
    with TransactionProducer("txn-bench-check", namesrv, Decide(UNKNOW), instance_name="left") as p:
        run_threads(4, count, lambda i: p.send_message_in_transaction(Message(topic, body, keys=str(i))))
    seen = {"n": 0, "last": 0.0}
    lock = threading.Lock()

    def on(msgs):
        with lock:
            seen["n"] += len(msgs)
            seen["last"] = time.monotonic()
        return SUCCESS

    c = PushConsumer(f"txn-bench-check-{time.time_ns()}", namesrv, consume_from="CONSUME_FROM_FIRST_OFFSET",
                     consume_thread_nums=4)
    c.subscribe(topic)
    c.register_listener(on)
    c.start()
    try:
        with TransactionProducer("txn-bench-check", namesrv, Decide(COMMIT), instance_name="stand-in",
                                 check_thread_pool_nums=2, heartbeat_broker_interval_ms=1000):
            time.sleep(1.5)  # the stand-in's heartbeat reached the broker
            services.start_checker("transactionTimeOut=0", f"transactionCheckInterval={interval_ms}")
            t0 = time.monotonic()  # the checker is up: its first pass is under way
            deadline = time.monotonic() + 300
            while seen["n"] < count and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        c.shutdown()
    if seen["n"] < count:
        raise SystemExit(f"check-back stalled: {seen['n']}/{count} visible")
    took = seen["last"] - t0
    return took, count / took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="send,visible,check")
    ap.add_argument("--namesrv", help="use running services (check mode starts its own, so it is skipped)")
    ap.add_argument("--count", type=int, default=3000, help="transactions per send / check run")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rate", type=int, default=200, help="transactions/s in visible mode")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--interval", type=int, default=1000, help="transactionCheckInterval of check mode (ms)")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    modes = a.modes.split(",")
    services = None if a.namesrv else TxnServices([])
    namesrv = a.namesrv or services.namesrv
    try:
        for mode in modes:
            runs = []
            for _ in range(a.repeat):
                if mode == "send":
                    tx, plain = bench_send(namesrv, a.count, a.threads, a.size)
                    runs.append(tx)
                    print(f"send: {tx:,.0f} transactions/s ({a.threads} threads); plain sync sends {plain:,.0f} msg/s",
                          flush=True)
                elif mode == "visible":
                    p50, p99, n = bench_visible(namesrv, a.rate, a.duration, a.size)
                    runs.append(p99)
                    print(f"visible: commit to listener p50 {p50:.1f} ms, p99 {p99:.1f} ms ({n} transactions at "
                          f"{a.rate}/s)", flush=True)
                elif mode == "check":
                    if services is None:
                        print("check: skipped (it starts services of its own; run it without --namesrv)")
                        break
                    took, rate = bench_check(a.count, a.size, a.interval)
                    runs.append(rate)
                    print(f"check: {a.count} undecided transactions decided through checks in {took:.1f} s "
                          f"({rate:,.0f} checks/s, transactionCheckInterval {a.interval} ms)", flush=True)
                else:
                    raise SystemExit(f"unknown mode {mode!r}")
            if len(runs) > 1:
                print(f"{mode}: median {statistics.median(runs):,.1f} of {runs}", flush=True)
    finally:
        if services is not None:
            services.stop()


if __name__ == "__main__":
    main()
