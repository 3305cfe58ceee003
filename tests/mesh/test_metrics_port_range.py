"""rocketmesh.server.metrics' Prometheus port taken from a range, on real loopback sockets: replicas of a
service sharing one network namespace each take the next free port of the range."""

from __future__ import annotations

import socket
import urllib.request
from contextlib import ExitStack

from rocketmesh.server.metrics import MetricsConfig, MetricsExporterType, PortRange, ServiceMetrics


def free_run(n: int) -> int:
    """The first of ``n`` consecutive ports free on 127.0.0.1 (bound and released to check)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            low = s.getsockname()[1]
        if low + n > 65535:
            continue
        try:
            with ExitStack() as stack:
                for port in range(low, low + n):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return low
        except OSError:
            continue
    raise AssertionError(f"no {n} consecutive free ports")


def served(port_range: str) -> ServiceMetrics:
    m = ServiceMetrics("scheduler", MetricsConfig(MetricsExporterType.PROM, "127.0.0.1", PortRange(port_range)))
    m.counter("rocketmq_timer_dequeue_total", "delivered", ()).add((), 1)
    return m


def test_replicas_take_the_next_free_port_of_the_range_and_the_last_one_goes_without():
    low = free_run(3)
    with socket.socket() as taken:  # something else holds the first port
        taken.bind(("127.0.0.1", low))
        taken.listen()
        first, second, third = (served(f"{low}-{low + 2}") for _ in range(3))
        try:
            assert first.start() == f"http://127.0.0.1:{low + 1}/metrics"
            assert second.start() == f"http://127.0.0.1:{low + 2}/metrics"
            assert third.start() == "" and third.port == 0  # the range is full: the replica serves without
            for m in (first, second):
                with urllib.request.urlopen(m.url, timeout=5) as resp:
                    assert "rocketmq_timer_dequeue_total" in resp.read().decode()
        finally:
            for m in (first, second, third):
                m.shutdown()
    again = served(f"{low}-{low + 2}")  # freed ports are taken again, from the first
    try:
        assert again.start() == f"http://127.0.0.1:{low}/metrics"
    finally:
        again.shutdown()
