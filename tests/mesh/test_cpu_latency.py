"""cpuDmaLatencyUs: the broker holds a CPU wake-up latency request while it runs and drops it when it stops."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from procs import BrokerProcess, NamesrvProcess
from rocketmesh import Admin
from rocketmesh.broker import cpu_latency

#: Whether this machine lets us make the request (Linux, root); the tests check the other branch elsewhere.
CAN_REQUEST = os.access(cpu_latency.DEVICE, os.W_OK)


def test_a_request_lasts_as_long_as_it_is_held() -> None:
    if not CAN_REQUEST:
        with pytest.raises(cpu_latency.CpuLatencyError, match="needs root"):
            cpu_latency.hold(0)
        return
    before = cpu_latency.current_us()
    assert before is not None
    bound = min(before - 1, 7) if before > 0 else 0
    with cpu_latency.hold(bound) as req:
        assert req.held and cpu_latency.current_us() == bound
    assert not req.held and cpu_latency.current_us() == before
    req.release()  # twice is harmless


def test_bad_bounds_and_devices_get_clear_errors(tmp_path: Path) -> None:
    for bad in (-1, 2**31, True, 1.5):
        with pytest.raises(ValueError, match="0 .. 2000000000"):
            cpu_latency.hold(bad)  # type: ignore[arg-type]
    missing = str(tmp_path / "no-such-device")
    with pytest.raises(cpu_latency.CpuLatencyError, match="no-such-device"):
        cpu_latency.hold(0, device=missing)
    assert cpu_latency.current_us(missing) is None


def test_the_broker_holds_the_request_only_while_it_runs(
        namesrv: NamesrvProcess, start_broker: Callable[..., BrokerProcess]) -> None:
    before = cpu_latency.current_us()
    plain = start_broker(namesrv.addr, name="broker-plain")
    tuned = start_broker(namesrv.addr, name="broker-tuned", cpuDmaLatencyUs=0)
    with Admin(namesrv.addr) as admin:
        assert admin.broker_runtime_info(plain.addr)["cpuDmaLatencyUs"] in (-1, "-1")
        held = admin.broker_runtime_info(tuned.addr)["cpuDmaLatencyUs"]
    if not CAN_REQUEST:
        # Not allowed here: the broker says why and serves anyway.
        assert held in (-1, "-1")
        assert "cpu_latency_request_failed" in tuned.stdout_text()
        return
    assert held in (0, "0")
    assert cpu_latency.current_us() == 0
    tuned.stop()
    assert cpu_latency.current_us() == before
