"""Fixtures of the fault suite: simulated hosts (netkit.py) and the services a test runs in them."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest
from netkit import Host, Net, NetkitUnavailable

from aptkit import apt_install, can_install, unavailable
from procs import ServiceProcess

P = TypeVar("P", bound=ServiceProcess)


def _unavailable(why: str) -> NoReturn:
    unavailable(f"simulated hosts (network namespaces) unavailable: {why}")


@pytest.fixture
def make_net() -> Iterator[Callable[..., Net]]:
    """Factory: ``make_net("ns1", "master", "slave")`` makes those hosts (netkit.Net, opened) on one private
    bridge, this process a host on it too; each is removed at teardown, also after a failure. ``relayed=[...]``
    names the hosts whose link may be delayed (``Net.delay``). Where network namespaces cannot be made the test
    fails saying why; a missing ``nft`` is installed from Debian's nftables where this process may."""
    nets: list[Net] = []

    def make(*hosts: str, relayed: Sequence[str] = ()) -> Net:
        if shutil.which("nft") is None and can_install():
            apt_install("nftables")
        if shutil.which("nft") is None:
            _unavailable("no nft (Debian's nftables) for the faults, and no root with apt-get to install it")
        try:
            net = Net(hosts, relayed=relayed).open()
        except NetkitUnavailable as exc:
            _unavailable(str(exc))
        nets.append(net)
        return net

    yield make
    for net in nets:
        net.close()


@pytest.fixture
def start_on(tmp_path: Path, make_net: Callable[..., Net]) -> Iterator[Callable[..., ServiceProcess]]:
    """Factory: ``start_on(host, BrokerProcess, namesrv_addr, name="broker-a", brokerRole="SLAVE")`` starts a
    process of tests/procs.py in a simulated host (its address the service's, its namespace the process's) and
    waits until it is ready; ``launch=True`` starts it without waiting (``wait_ready()`` it later). All stop at
    teardown, last started first, before the hosts go (it depends on ``make_net``)."""
    started: list[ServiceProcess] = []

    def start(host: Host, cls: type[P], *args: object, name: str, launch: bool = False, **config: object) -> P:
        proc = cls(tmp_path / f"{host.name}-{name}", *args, name=name, **host.place, **config)
        started.append(proc)
        if launch:
            proc.launch()
        else:
            proc.start(timeout_s=30)
        return proc

    yield start
    for proc in reversed(started):
        proc.stop()
