"""Simulated hosts on this machine: Linux network namespaces on a private bridge, and faults between them.

``Net(["ns1", "master", "slave"])`` makes one network namespace per host, each with ``lo`` up and an
``eth0`` (one end of a veth pair) addressed in a /24 of 10.77.0.0/16 that exists only inside the test; the
other ends hang on a bridge in a namespace of its own. The namespace this process runs in gets a leg on
that bridge too (the address ``.254``, its route that /24 alone), so the test process is a host of the
network: it probes the services in the hosts and its clients talk to them over the bridge. Nothing is
routed beyond the bridge: traffic never leaves these namespaces.

    with Net(["ns1", "broker"]) as net:
        broker = net["broker"]                  # Host: .name, .netns, .addr
        BrokerProcess(..., host=broker.addr, netns=broker.netns)   # tests/procs.py runs it there
        with net.partition("ns1", "broker"):    # a Fault; leaving the block heals it
            ...

Faults use what this kernel has (no ``sch_netem`` is assumed; :func:`netem_available` says whether it is
there): nftables rules in the receiving host's input hook for partitions (symmetric or one-way: packets
leave and vanish, as on a cut link, so senders time out rather than hear an error) and for random loss
(``numgen random mod 100 < N``); rules in one host's input and output hooks both where the other side
has no namespace to hold rules (:meth:`Net.cut_off`, :meth:`Net.mute`: this process's leg); a tbf qdisc
on a host's egress for bandwidth; and the host's cable pulled (its port on the bridge down) for a link
down. Each returns a :class:`Fault` whose ``heal()`` takes it back.

Names: every namespace is ``rmk-<pid>-<subnet>-<host>`` and the one interface in this process's namespace
``rmk<pid>-<subnet>`` (15 characters at most), so two pytest workers never collide (the /24 is chosen
under a machine-wide lock among those no live run and no route of this namespace uses), and what a run
killed before its teardown left is found and removed by the next run (its pid is dead).

Needs root and ``ip`` (iproute2); ``nft`` for the partitions and loss, ``tc`` for bandwidth.
:class:`NetkitUnavailable` says why a net cannot be made here.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["PREFIX", "Fault", "Host", "Net", "NetkitUnavailable", "netem_available", "reap_leftovers"]

#: Every namespace this kit makes starts with it (and the interface in this process's namespace).
PREFIX = "rmk"
#: The /24s are taken from here.
SPACE = ipaddress.ip_network("10.77.0.0/16")
#: Held while a net is made or leftovers removed: two workers never pick the same /24.
LOCK = "/tmp/rocketmesh-netkit.lock"
#: The nftables table of the faults, in each host's namespace.
TABLE = "rmk_faults"
#: The host part of this process's leg on the bridge.
ROOT_HOST = 254

_NAME = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-")
_HANDLE = re.compile(r"# handle (\d+)")


class NetkitUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no ``ip``, a kernel without them); says why."""


def _run(argv: Sequence[str], timeout_s: float = 10.0, stdin: str | None = None) -> str:
    """Run a command to its end (``stdin``: given that text on its stdin); its stdout; RuntimeError with its
    stderr when it fails."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False,
                          input=stdin, stdin=subprocess.DEVNULL if stdin is None else None)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def _in(netns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line.strip()]


def _delete_namespace(netns: str) -> None:
    """Kill what still runs in ``netns`` (a service a failed test left; the namespace lives on while a process
    holds it) and delete it: its interfaces, their veth peers and its nftables go with it."""
    with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
        for pid in _run(["ip", "netns", "pids", netns]).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
        _run(["ip", "netns", "del", netns])


def reap_leftovers() -> list[str]:
    """Delete the namespaces of runs whose process is dead (killed before their teardown); returns their names.
    Call under :data:`LOCK`."""
    gone = [ns for ns in _namespaces() if (m := _NAME.match(ns)) and not _alive(int(m.group(1)))]
    for ns in gone:
        _delete_namespace(ns)
    return gone


def _pick_subnet() -> int:
    """The third octet of a /24 of :data:`SPACE` that no live run's namespace is named with and no route of this
    namespace overlaps (this process's pid picks where the search starts). Call under :data:`LOCK`."""
    used = {int(m.group(2)) for ns in _namespaces() if (m := _NAME.match(ns))}
    routes = []
    for line in _run(["ip", "-4", "route", "show", "table", "all"]).splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest[:1].isdigit():
            with contextlib.suppress(ValueError):
                routes.append(ipaddress.ip_network(dest, strict=False))
    start = os.getpid() % 256
    for i in range(256):
        octet = (start + i) % 256
        net = ipaddress.ip_network(f"10.77.{octet}.0/24")
        if octet not in used and not any(net.overlaps(r) and r.prefixlen > 0 for r in routes):
            return octet
    raise NetkitUnavailable(f"no free /24 left in {SPACE}")


def check_available() -> None:
    """Raise :class:`NetkitUnavailable` saying why namespaces cannot be made here (nothing when they can,
    as far as can be told without making one)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise NetkitUnavailable("network namespaces need root (this process is not)")
    if shutil.which("ip") is None:
        raise NetkitUnavailable("network namespaces need iproute2's ip (not on PATH)")
    if not os.path.exists("/proc/self/ns/net"):
        raise NetkitUnavailable("this kernel has no network namespaces (/proc/self/ns/net)")


@dataclass(frozen=True)
class Host:
    """One simulated host: its name in the test, its network namespace and its address."""

    name: str
    netns: str
    addr: str
    #: Its port on the bridge (in the bridge's namespace): down is the host's cable pulled.
    port: str

    @property
    def place(self) -> dict[str, str]:
        """``host`` and ``netns`` for a process of tests/procs.py: ``BrokerProcess(..., **host.place)``."""
        return {"host": self.addr, "netns": self.netns}

    def exec_argv(self, *argv: str) -> list[str]:
        """``argv`` run in this host (``ip netns exec``)."""
        return _in(self.netns, *argv)

    def run(self, *argv: str, timeout_s: float = 10.0, stdin: str | None = None) -> str:
        """Run ``argv`` in this host to its end; its stdout (RuntimeError when it fails)."""
        return _run(self.exec_argv(*argv), timeout_s, stdin)


@dataclass
class Fault:
    """One fault in force; :meth:`heal` takes it back (once; again is a no-op). A context manager: the block
    runs with the fault, its end heals it."""

    what: str
    _heal: Callable[[], None] = field(repr=False)
    healed: bool = False

    def heal(self) -> None:
        if not self.healed:
            self.healed = True
            self._heal()

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()


class Net:
    """``hosts`` as network namespaces on one private bridge (see the module's docstring); a context manager
    that makes them on entry and removes them on exit. ``net[name]`` is a :class:`Host`; ``net.local`` is this
    process's leg (a host without a namespace of its own)."""

    def __init__(self, hosts: Iterable[str]) -> None:
        self.names = list(hosts)
        if len(set(self.names)) != len(self.names) or not self.names or len(self.names) >= ROOT_HOST:
            raise ValueError(f"host names must be distinct, 1 to {ROOT_HOST - 1} of them: {self.names}")
        self.hosts: dict[str, Host] = {}
        self.subnet = ""
        self.bridge_ns = ""
        self.local: Host | None = None
        self._faults: list[Fault] = []
        self._tables: set[str] = set()
        self._made: list[str] = []

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    # -- making and removing -------------------------------------------------------------------------------

    def open(self) -> Net:
        """Make the namespaces, the bridge and the legs (removing leftovers of dead runs first)."""
        check_available()
        pid = os.getpid()
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                reap_leftovers()
                octet = _pick_subnet()
            except RuntimeError as exc:  # `ip netns list` refused: no namespaces for us
                raise NetkitUnavailable(f"cannot use network namespaces: {exc}") from None
            self.subnet = f"10.77.{octet}.0/24"
            base = f"{PREFIX}-{pid}-{octet}"
            atexit.register(self.close)
            try:
                self.bridge_ns = self._namespace(f"{base}-br")
            except RuntimeError as exc:
                self.close()
                raise NetkitUnavailable(f"cannot make a network namespace: {exc}") from None
            try:
                self._build(base, octet)
            except BaseException:
                self.close()
                raise
        return self

    def _namespace(self, name: str) -> str:
        _run(["ip", "netns", "add", name])
        self._made.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])
        return name

    def _build(self, base: str, octet: int) -> None:
        br = self.bridge_ns
        _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", "br0", "up"])
        for i, name in enumerate(self.names, start=1):
            netns = self._namespace(f"{base}-{name}")
            port = f"h{i}"
            _run(["ip", "-n", br, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns])
            _run(["ip", "-n", br, "link", "set", port, "master", "br0", "up"])
            addr = f"10.77.{octet}.{i}"
            _run(["ip", "-n", netns, "addr", "add", f"{addr}/24", "dev", "eth0"])
            _run(["ip", "-n", netns, "link", "set", "eth0", "up"])
            self.hosts[name] = Host(name, netns, addr, port)
        # This process's leg: made in the bridge's namespace with its peer sent here, so no interface of a
        # half-made net is ever left in this namespace under a name another run could want.
        leg = f"{PREFIX}{os.getpid()}-{octet}"
        _run(["ip", "-n", br, "link", "add", "local", "type", "veth", "peer", "name", leg, "netns", str(os.getpid())])
        _run(["ip", "-n", br, "link", "set", "local", "master", "br0", "up"])
        addr = f"10.77.{octet}.{ROOT_HOST}"
        _run(["ip", "addr", "add", f"{addr}/24", "dev", leg])
        _run(["ip", "link", "set", leg, "up"])
        self.local = Host("local", "", addr, "local")

    def close(self) -> None:
        """Remove everything this net made (the processes still running in its hosts are killed first). Safe
        to call twice."""
        atexit.unregister(self.close)
        made, self._made = self._made, []
        for netns in reversed(made):
            _delete_namespace(netns)
        self._faults.clear()

    def __enter__(self) -> Net:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults --------------------------------------------------------------------------------------------

    def _fault(self, what: str, heals: list[Callable[[], None]]) -> Fault:
        def heal() -> None:
            for h in heals:
                h()
            with contextlib.suppress(ValueError):
                self._faults.remove(fault)
        fault = Fault(what, heal)
        self._faults.append(fault)
        return fault

    def heal_all(self) -> None:
        """Heal every fault still in force."""
        for fault in list(self._faults):
            fault.heal()

    def _drop_in(self, host: Host, match: str, hook: str = "input") -> Callable[[], None]:
        """A rule in ``host``'s ``hook`` (input: what arrives; output: what it sends) dropping the packets that
        ``match``; returns what deletes it."""
        if host.netns not in self._tables:
            chains = "\n".join(f"chain {h} {{ type filter hook {h} priority 0; policy accept; }}"
                               for h in ("input", "output"))
            host.run("nft", "-f", "-", stdin=f"table inet {TABLE} {{\n{chains}\n}}\n")
            self._tables.add(host.netns)
        out = host.run("nft", "--echo", "--handle", "add", "rule", "inet", TABLE, hook, *match.split(), "drop")
        m = _HANDLE.search(out)
        if m is None:
            raise RuntimeError(f"nft gave no handle for the rule ({match}) in {host.name}: {out!r}")
        handle = m.group(1)

        def delete() -> None:
            host.run("nft", "delete", "rule", "inet", TABLE, hook, "handle", handle)
        return delete

    def partition(self, a: str, b: str) -> Fault:
        """``a`` and ``b`` cannot hear each other (each drops what comes from the other)."""
        ha, hb = self[a], self[b]
        return self._fault(f"partition {a} | {b}", [self._drop_in(ha, f"ip saddr {hb.addr}"),
                                                      self._drop_in(hb, f"ip saddr {ha.addr}")])

    def one_way(self, src: str, dst: str) -> Fault:
        """``dst`` does not hear ``src`` (drops what comes from it); ``src`` still hears ``dst``."""
        return self._fault(f"{dst} deaf to {src}", [self._drop_in(self[dst], f"ip saddr {self[src].addr}")])

    def cut_off(self, host: str, peers: Sequence[str]) -> Fault:
        """``host`` and each of ``peers`` cannot hear each other, with the rules in ``host`` alone (both ways),
        so a peer may be ``"local"``: this process's leg, which has no namespace of its own to hold rules."""
        h = self[host]
        addrs = [self.local.addr if p == "local" and self.local else self[p].addr for p in peers]
        heals = [self._drop_in(h, f"ip saddr {a}") for a in addrs] + \
                [self._drop_in(h, f"ip daddr {a}", hook="output") for a in addrs]
        return self._fault(f"{host} cut off from {', '.join(peers)}", heals)

    def mute(self, host: str, peers: Sequence[str]) -> Fault:
        """What ``host`` sends to each of ``peers`` is lost (rules in ``host``'s output hook); it still hears
        them. A peer may be ``"local"``, as for :meth:`cut_off`."""
        h = self[host]
        addrs = [self.local.addr if p == "local" and self.local else self[p].addr for p in peers]
        return self._fault(f"{', '.join(peers)} deaf to {host}",
                           [self._drop_in(h, f"ip daddr {a}", hook="output") for a in addrs])

    def loss(self, host: str, percent: int, peers: Sequence[str] = ()) -> Fault:
        """``host`` drops ``percent`` % of the packets that come to it (from ``peers``, or from anyone), at random."""
        if not 0 < percent <= 100:
            raise ValueError(f"percent must be 1 to 100: {percent}")
        target = self[host]
        matches = [f"ip saddr {self[p].addr} " for p in peers] or [""]
        return self._fault(f"{percent}% loss into {host}" + (f" from {', '.join(peers)}" if peers else ""),
                           [self._drop_in(target, f"{m}numgen random mod 100 < {percent}") for m in matches])

    def bandwidth(self, host: str, rate: str, burst: str = "32kb", latency: str = "200ms") -> Fault:
        """What ``host`` sends goes out at ``rate`` at most (tc's units: ``1mbit``), a tbf on its eth0."""
        h = self[host]
        h.run("tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", burst, "latency", latency)

        def unlimit() -> None:
            h.run("tc", "qdisc", "del", "dev", "eth0", "root")
        return self._fault(f"{host} sending at {rate}", [unlimit])

    def link_down(self, host: str) -> Fault:
        """``host``'s cable pulled: its port on the bridge down (the host keeps its address; nothing it sends
        arrives, nothing reaches it)."""
        h = self[host]

        def set_port(state: str) -> None:
            _run(["ip", "-n", self.bridge_ns, "link", "set", h.port, state])
        set_port("down")
        return self._fault(f"{host} link down", [lambda: set_port("up")])


def netem_available(host: Host) -> bool:
    """Whether this kernel has ``sch_netem`` (a netem qdisc can be put on ``host``'s eth0; it is removed again)."""
    try:
        host.run("tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "1ms")
    except RuntimeError:
        return False
    host.run("tc", "qdisc", "del", "dev", "eth0", "root")
    return True
