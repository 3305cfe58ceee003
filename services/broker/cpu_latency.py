"""A Linux PM QoS request that keeps idle CPUs quick to wake (``/dev/cpu_dma_latency``).

An idle CPU sleeps in an idle state; waking a thread on it costs that state's
exit latency. On a virtual machine the deepest state halts the vCPU, and
waking it goes through the hypervisor: tens of microseconds on every hop of a
message (client -> broker -> consumer crosses several threads). A process
that writes a latency bound in microseconds to ``/dev/cpu_dma_latency`` and
keeps the file open asks the kernel to use only idle states that exit within
that bound; 0 keeps idle CPUs polling. Closing the file (or exiting) drops
the request. This is what tuned's latency-performance profile does
(``force_latency``). The price is power: idle CPUs spin instead of sleeping.
"""

from __future__ import annotations

import os
import struct

#: The kernel's CPU latency QoS device.
DEVICE = "/dev/cpu_dma_latency"
_VALUE = struct.Struct("=i")


class CpuLatencyError(OSError):
    """The request could not be made (no such device, or not allowed: it needs root)."""


class CpuLatencyRequest:
    """One held request; ``release()`` (or exiting the process) ends it. Use ``hold()`` to make one."""

    def __init__(self, fd: int, latency_us: int) -> None:
        self._fd: int | None = fd
        self.latency_us = latency_us

    @property
    def held(self) -> bool:
        """True until released."""
        return self._fd is not None

    def release(self) -> None:
        """Drop the request (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> CpuLatencyRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def hold(latency_us: int, device: str = DEVICE) -> CpuLatencyRequest:
    """Ask that idle CPUs wake within ``latency_us`` microseconds, for as long as the result is held.

    Raises ValueError for a negative bound and CpuLatencyError when the device
    is missing or not writable.
    """
    if isinstance(latency_us, bool) or not isinstance(latency_us, int) or not 0 <= latency_us <= 2_000_000_000:
        raise ValueError(f"a CPU latency bound is 0 .. 2000000000 microseconds, got {latency_us!r}")
    try:
        fd = os.open(device, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise CpuLatencyError(exc.errno, f"cannot open {device} to request a CPU wake-up latency of "
                                         f"{latency_us} us: {exc.strerror} (it needs root on Linux)") from None
    try:
        os.write(fd, _VALUE.pack(latency_us))
    except OSError as exc:
        os.close(fd)
        raise CpuLatencyError(exc.errno, f"cannot write to {device}: {exc.strerror}") from None
    return CpuLatencyRequest(fd, latency_us)


def current_us(device: str = DEVICE) -> int | None:
    """The bound the kernel applies now (the smallest request held by anyone), or None when unreadable."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, _VALUE.size)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _VALUE.unpack(raw)[0] if len(raw) == _VALUE.size else None
