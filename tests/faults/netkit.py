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
on a host's egress for bandwidth; the host's cable pulled (its port on the bridge down) for a link down;
and for delay, jitter and reordering (``net.delay(host, 50, jitter_ms=20)``: every packet to and from
the host held 30 to 70 ms, each drawn on its own, so later packets overtake earlier ones) a netem qdisc
at both ends of the host's cable where the kernel has netem, else the host's relay. Each returns a
:class:`Fault` whose ``heal()`` takes it back.

The relay: a host named in ``Net(hosts, relayed=[...])`` may be delayed. Without netem its cable runs
through a namespace of its own, ``...-<host>.relay``: the host's eth0 is paired with ``r0`` there, and
``r1`` there with the host's port on the bridge. A small process of this module (``python netkit.py r0
r1``) moves every frame between the two with AF_PACKET sockets, holding each for its delay (a heap by
due time; none set, it forwards at once). The sockets carry a virtio-net header (PACKET_VNET_HDR), so a
TCP segment the veth hands over unsegmented (TSO/GSO, up to 64 KiB, its checksum left to the "hardware")
goes on as it is, checksum and segmentation still to do: nothing larger than the MTU has to be sent
whole, no offload needs turning off (no ethtool needed). The test process sets the delay through the
relay's stdin; when that closes (the net closed, or the test process died) the relay exits, and deleting
its namespace kills it in any case. Hosts not named pay nothing.

Names: every namespace is ``rmk-<pid>-<subnet>-<host>`` and the one interface in this process's namespace
``rmk<pid>-<subnet>`` (15 characters at most), so two pytest workers never collide (the /24 is chosen
under a machine-wide lock among those no live run and no route of this namespace uses), and what a run
killed before its teardown left is found and removed by the next run (its pid is dead).

Needs root and ``ip`` (iproute2); ``nft`` for the partitions and loss, ``tc`` for bandwidth (and for delay
where the kernel has netem).
:class:`NetkitUnavailable` says why a net cannot be made here.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import heapq
import ipaddress
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["PREFIX", "Fault", "Host", "Net", "NetkitUnavailable", "Relay", "netem_available",
           "reap_leftovers"]

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
#: A relay holds at most this many bytes of frames; beyond, it drops what comes (a router's full queue).
RELAY_HOLD_BYTES = 64 << 20

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

    def __init__(self, hosts: Iterable[str], relayed: Iterable[str] = ()) -> None:
        self.names = list(hosts)
        if len(set(self.names)) != len(self.names) or not self.names or len(self.names) >= ROOT_HOST:
            raise ValueError(f"host names must be distinct, 1 to {ROOT_HOST - 1} of them: {self.names}")
        #: The hosts :meth:`delay` may slow down (each gets a relay where the kernel has no netem).
        self.relayed = list(relayed)
        if not set(self.relayed) <= set(self.names):
            raise ValueError(f"relayed hosts must be hosts of the net: {self.relayed} (hosts {self.names})")
        #: Whether delays are netem qdiscs (the kernel has netem) rather than relays; known once open.
        self.netem = False
        #: The relay of each relayed host (none where netem does the delaying).
        self.relays: dict[str, Relay] = {}
        self._delayed: set[str] = set()
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
        self.netem = bool(self.relayed) and _netem_on(br, "br0")
        for i, name in enumerate(self.names, start=1):
            netns = self._namespace(f"{base}-{name}")
            port = f"h{i}"
            if name in self.relayed and not self.netem:
                self.relays[name] = self._relay(f"{base}-{name}.relay", netns, port)
            else:
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

    def _relay(self, relay_ns: str, host_ns: str, port: str) -> Relay:
        """The cable of the host in ``host_ns`` through a relay namespace: its eth0 paired with r0 there, r1
        with ``port`` (left in the bridge's namespace, not yet on the bridge), the relay moving frames between
        r0 and r1."""
        self._namespace(relay_ns)
        _run(["ip", "-n", relay_ns, "link", "add", "r0", "type", "veth", "peer", "name", "eth0", "netns", host_ns])
        _run(["ip", "-n", self.bridge_ns, "link", "add", port, "type", "veth", "peer", "name", "r1",
              "netns", relay_ns])
        for dev in ("r0", "r1"):
            _run(["ip", "-n", relay_ns, "link", "set", dev, "up"])
        return Relay(relay_ns)

    def close(self) -> None:
        """Remove everything this net made (its relays stopped, the processes still running in its hosts
        killed first). Safe to call twice."""
        atexit.unregister(self.close)
        for relay in self.relays.values():
            relay.stop()
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

    def delay(self, host: str, ms: float, jitter_ms: float = 0) -> Fault:
        """Every packet to and from ``host`` is held ``ms`` +/- ``jitter_ms`` (uniform, drawn for each packet on
        its own, so packets overtake each other: reordering; a round trip with an undelayed host takes twice
        ``ms`` on average). A netem qdisc at each end of the host's cable where the kernel has netem, else the
        host's relay (``host`` must be among ``relayed``). One delay per host at a time."""
        if not 0 <= jitter_ms <= ms:
            raise ValueError(f"delay needs 0 <= jitter_ms <= ms: {ms} ms +/- {jitter_ms} ms")
        if host not in self.relayed:
            raise ValueError(f"{host} is not relayed: Net(..., relayed=[{host!r}]) may delay it")
        if host in self._delayed:
            raise ValueError(f"{host} is delayed already: heal that first")
        h = self[host]
        if self.netem:
            ends = [(h.netns, "eth0"), (self.bridge_ns, h.port)]  # what the host sends, what comes to it
            for netns, dev in ends:
                _run(_in(netns, "tc", "qdisc", "replace", "dev", dev, "root", "netem", "limit", "100000",
                         "delay", f"{ms}ms", f"{jitter_ms}ms"))

            def undo() -> None:
                for netns, dev in ends:
                    _run(_in(netns, "tc", "qdisc", "del", "dev", dev, "root"))
        else:
            relay = self.relays[host]
            relay.set(ms, jitter_ms)

            def undo() -> None:
                relay.set(0, 0)
        self._delayed.add(host)

        def heal() -> None:
            self._delayed.discard(host)
            undo()
        return self._fault(f"{host} delayed {ms} ms +/- {jitter_ms} ms", [heal])


class Relay:
    """The relay process of one host's cable (see the module's docstring), started in ``netns`` between its
    ``r0`` and ``r1``; :meth:`set` changes its delay, :meth:`stop` ends it."""

    def __init__(self, netns: str, timeout_s: float = 10.0) -> None:
        self.netns = netns
        self.proc = subprocess.Popen(_in(netns, sys.executable, "-I", "-S", os.path.abspath(__file__), "r0", "r1"),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._answer("ready", timeout_s)

    @property
    def pid(self) -> int:
        """The relay's pid (``ip netns exec`` execs it: the pid started is the relay's own)."""
        return self.proc.pid

    def _answer(self, word: str, timeout_s: float) -> list[int]:
        """The figures of the relay's next line, which must start with ``word``; RuntimeError otherwise."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith(word):
            self.stop()
            raise RuntimeError(f"the relay in {self.netns} did not answer {word!r} within {timeout_s} s "
                               f"(got {line!r}, exit code {self.proc.poll()})")
        return [int(f) for f in line.split()[1:]]

    def set(self, ms: float, jitter_ms: float = 0, timeout_s: float = 10.0) -> dict[str, int]:
        """Hold every frame from now on ``ms`` +/- ``jitter_ms`` (0: forward at once); returns once the relay
        has it, with what it moved so far: frames ``forwarded``, ``dropped`` (its hold full or a send
        refused), and the most bytes it ever ``held`` at once."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{ms} {jitter_ms}\n")
        self.proc.stdin.flush()
        forwarded, dropped, held = self._answer("ok", timeout_s)
        return {"forwarded": forwarded, "dropped": dropped, "held": held}

    def stop(self) -> None:
        """End the relay: its stdin closed (it exits at that), killed if it has not within 2 s."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _netem_on(netns: str, dev: str) -> bool:
    """Whether a netem qdisc can be put on ``dev`` in ``netns`` (it is removed again)."""
    try:
        _run(_in(netns, "tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms"))
    except RuntimeError:
        return False
    _run(_in(netns, "tc", "qdisc", "del", "dev", dev, "root"))
    return True


def netem_available(host: Host) -> bool:
    """Whether this kernel has ``sch_netem`` (a netem qdisc can be put on ``host``'s eth0; it is removed again)."""
    return _netem_on(host.netns, "eth0")


# -- the relay process: ``python netkit.py IF_A IF_B`` in a relay namespace (the standard library only) -------

_SOL_PACKET = 263
_PACKET_VNET_HDR = 15
_PACKET_IGNORE_OUTGOING = 23
_ETH_P_ALL = 3


def _relay_main(a: str, b: str) -> int:
    """Move frames between interfaces ``a`` and ``b`` both ways, each held for the delay in force when it came
    (a line ``ms jitter_ms`` on stdin sets it, answered ``ok forwarded dropped most-bytes-held``); ends when
    stdin closes."""
    # Only what the hosts send crosses the cable: this namespace's own IPv6 (router solicitations, duplicate
    # address probes) is off before its interfaces could send any.
    for conf in ("all", "default", a, b):
        with contextlib.suppress(OSError), open(f"/proc/sys/net/ipv6/conf/{conf}/disable_ipv6", "w") as f:
            f.write("1")
    socks: list[socket.socket] = []
    for ifname in (a, b):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
        s.setsockopt(_SOL_PACKET, _PACKET_VNET_HDR, 1)  # offloaded frames pass whole (the module's docstring)
        s.setsockopt(_SOL_PACKET, _PACKET_IGNORE_OUTGOING, 1)  # not the frames this relay sends itself
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.bind((ifname, 0))
        socks.append(s)
    across = {socks[0].fileno(): (socks[0], socks[1]), socks[1].fileno(): (socks[1], socks[0])}
    poll = select.epoll()
    for fd in across:
        poll.register(fd, select.EPOLLIN)
    control = sys.stdin.fileno()
    poll.register(control, select.EPOLLIN)
    delay_s = jitter_s = 0.0
    held: list[tuple[float, int, socket.socket, bytes]] = []  # (due, arrival number, out, frame)
    held_bytes = most_held = forwarded = dropped = arrivals = 0
    pending = b""
    buf = bytearray(1 << 18)  # a GSO frame is 64 KiB at most, with its 10-byte header
    view = memoryview(buf)

    def send(out: socket.socket, frame: bytes) -> None:
        nonlocal forwarded, dropped
        try:
            out.send(frame)
            forwarded += 1
        except OSError:  # the other side down (a pulled cable) or its queue full: lost, as on a wire
            dropped += 1

    print("ready", flush=True)
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else -1
        for fd, _ in poll.poll(timeout):
            if fd == control:
                chunk = os.read(control, 4096)
                if not chunk:
                    return 0
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    ms, jitter_ms = (float(x) for x in line.split())
                    delay_s, jitter_s = ms / 1000, jitter_ms / 1000
                    print(f"ok {forwarded} {dropped} {most_held}", flush=True)
                continue
            sock, out = across[fd]
            for _ in range(64):  # a bounded batch, then the frames due and the other side get their turn
                try:
                    n = sock.recv_into(buf, len(buf), socket.MSG_DONTWAIT | socket.MSG_TRUNC)
                except BlockingIOError:
                    break
                if n > len(buf):  # larger than any frame a veth hands over: not sent cut short
                    dropped += 1
                    continue
                frame = bytes(view[:n])
                if not delay_s:
                    send(out, frame)
                elif held_bytes + n > RELAY_HOLD_BYTES:
                    dropped += 1
                else:
                    arrivals += 1
                    due = time.monotonic() + max(0.0, delay_s + random.uniform(-jitter_s, jitter_s))
                    heapq.heappush(held, (due, arrivals, out, frame))
                    held_bytes += n
                    most_held = max(most_held, held_bytes)
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, _, out, frame = heapq.heappop(held)
            held_bytes -= len(frame)
            send(out, frame)


if __name__ == "__main__":
    sys.exit(_relay_main(sys.argv[1], sys.argv[2]))
