"""CurveZMQ on the wire, black-box: real name server and broker processes with the mesh's server key pair,
clients that know (or do not know) its public key, a TCP relay that reads what crosses loopback, and the
``rocketmesh keys`` / ``rocketmesh up`` command lines."""

from __future__ import annotations

import contextlib
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq.auth

from procs import BrokerProcess, NamesrvProcess, run_cli
from rocketmesh import Message, MessageQueue, Producer, PullConsumer
from rocketmesh.cli.security import key_paths, make_keys
from rocketmesh.remoting import (
    RemotingClient,
    RemotingConnectError,
    RequestCode,
    ResponseCode,
    SocketOptions,
    request,
)
from rocketmesh.remoting.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader
from rocketmesh.remoting.transport.curve import (
    AUTHORIZED_CLIENTS_ENV,
    CLIENT_KEY_ENV,
    SECRET_KEY_ENV,
    SERVER_KEY_ENV,
    CurveConfig,
    CurveKeys,
    load_curve,
)
from rocketmesh.runtime.config import ConfigError

CANARY = b"rocketmesh-curve-canary-7f3a9c1e"


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, str]:
    """A mesh's key files (``rocketmesh keys``' layout)."""
    return make_keys(str(tmp_path / "keys"))


@pytest.fixture
def curve_mesh(keys: dict[str, str], monkeypatch: pytest.MonkeyPatch, start_namesrv: Callable[..., NamesrvProcess],
               start_broker: Callable[..., BrokerProcess]) -> tuple[NamesrvProcess, BrokerProcess]:
    """Name server and broker serving with the server key pair (the way ``up --curve-keys`` runs them); this
    process is their client with the public key only, as an application is. The broker's registration is
    waited for over CURVE, so it registered over CURVE."""
    monkeypatch.setenv(SERVER_KEY_ENV, keys["server_public"])
    env = {SECRET_KEY_ENV: keys["server_secret"]}
    ns = start_namesrv(env=env)
    return ns, start_broker(ns.addr, env=env)


def _send_request(topic: str, body: bytes):
    header = SendMessageRequestHeader("curve-producer", topic, 0, int(time.time() * 1000))
    return request(RequestCode.SEND_MESSAGE, header.to_ext(), body)


class Relay:
    """A TCP forwarder on loopback in front of ``target`` that keeps every byte it forwards, both ways."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.seen = bytearray()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._socks: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            up = socket.create_connection(self.target)
            self._socks += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        # A connection either side closed ends the pump (OSError); then both are shut down.
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                with self._lock:
                    self.seen += data
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for s in self._socks:
            s.close()


@pytest.fixture
def relay() -> Iterator[Callable[[str], Relay]]:
    made: list[Relay] = []

    def make(addr: str) -> Relay:
        host, _, port = addr.rpartition(":")
        made.append(Relay((host, int(port))))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_produce_and_consume_through_namesrv_and_broker_over_curve(curve_mesh) -> None:
    ns, broker = curve_mesh
    with Producer("curve-producer", ns.addr) as producer:
        sent = producer.send(Message("CurveTopic", CANARY))
    assert sent.send_status.name == "SEND_OK"
    consumer = PullConsumer("curve-consumer", ns.addr, consume_from="CONSUME_FROM_FIRST_OFFSET")
    consumer.assign([MessageQueue("CurveTopic", broker.broker_name, sent.message_queue.queue_id)])
    consumer.start()
    try:
        got: list = []
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            got = consumer.poll(timeout_ms=1000)
    finally:
        consumer.shutdown()
    assert [m.body for m in got] == [CANARY]


def test_a_client_without_the_server_key_cannot_connect(curve_mesh, keys, tmp_path: Path, reliability) -> None:
    ns, broker = curve_mesh
    other = make_keys(str(tmp_path / "other-keys"))
    cases = {
        "request to a CURVE broker from a client without a server key (plain ZMTP)": SocketOptions(curve=None),
        "request to a CURVE broker from a client with another mesh's server key":
            SocketOptions(curve=CurveKeys.for_client(other["server_public"])),
    }
    for check, options in cases.items():
        with RemotingClient(name="outsider", options=options) as client:
            started = time.monotonic()
            with pytest.raises(RemotingConnectError) as err:
                client.invoke_sync(broker.addr, _send_request("CurveTopic", CANARY), 1000)
            took = time.monotonic() - started
            assert took < 3, took
            with pytest.raises(RemotingConnectError):
                client.invoke_async(ns.addr, request(RequestCode.GET_BROKER_CLUSTER_INFO), 1000).result(5)
        if options.curve is not None:
            assert "CURVE is on" in str(err.value)
        reliability.security(check, refused=f"RemotingConnectError after {took:.1f} s: {err.value}",
                             note="the CURVE handshake never completes; nothing reaches a handler")
    # The right key on the same mesh: served.
    with RemotingClient(name="insider", options=SocketOptions(curve=CurveKeys.for_client(keys["server_public"]))) as c:
        assert c.invoke_sync(ns.addr, request(RequestCode.GET_BROKER_CLUSTER_INFO), 3000).code == ResponseCode.SUCCESS


@pytest.mark.parametrize("curve", [True, False], ids=["curve", "plain"])
def test_a_reader_on_loopback_sees_a_body_only_without_curve(curve: bool, keys, monkeypatch: pytest.MonkeyPatch,
                                                            start_namesrv, start_broker, relay, reliability) -> None:
    env = {SECRET_KEY_ENV: keys["server_secret"]} if curve else {}
    if curve:
        monkeypatch.setenv(SERVER_KEY_ENV, keys["server_public"])
    ns = start_namesrv(env=env)
    broker = start_broker(ns.addr, env=env)
    wire = relay(broker.addr)
    with RemotingClient(name="relayed") as client:
        resp = client.invoke_sync(wire.addr, _send_request("RelayTopic", CANARY), 5000)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        pull = PullMessageRequestHeader("relay-group", "RelayTopic", 0, 0, suspend_timeout_millis=0)
        pulled = client.invoke_sync(wire.addr, request(RequestCode.PULL_MESSAGE, pull.to_ext()), 5000)
    assert pulled.code == ResponseCode.SUCCESS and CANARY in (pulled.body or b""), pulled.remark
    assert len(wire.seen) > 2 * len(CANARY)  # the relay did carry the traffic
    if curve:
        assert CANARY not in wire.seen
        reliability.security("read a message body off loopback between client and broker (CURVE on)",
                             refused=f"body absent from the {len(wire.seen)} bytes relayed (send and pull)",
                             note="the same relay sees the body in plain text when CURVE is off")
    else:
        assert CANARY in wire.seen


def test_a_server_told_of_curve_without_a_secret_key_refuses_to_start(keys) -> None:
    from rocketmesh.remoting import RemotingServer

    server = RemotingServer("127.0.0.1:0", "half-configured",
                            options=SocketOptions(curve=CurveKeys.for_client(keys["server_public"])))
    with pytest.raises(ConfigError, match=SECRET_KEY_ENV):
        server.start()
    with pytest.raises(ConfigError, match="not the public half"):
        other = make_keys(str(Path(keys["server_public"]).parent.parent / "third"))
        load_curve(CurveConfig(curve_secret_key_file=keys["server_secret"],
                               curve_server_key_file=other["server_public"]))


def test_keys_makes_the_key_files_and_refuses_to_overwrite_them(tmp_path: Path, reliability) -> None:
    target = tmp_path / "mesh-keys"
    made = run_cli("keys", str(target))
    assert made.returncode == 0, made.stderr
    paths = key_paths(str(target))
    assert f"up --curve-keys {target}" in made.stdout
    assert f"{SERVER_KEY_ENV}={paths['server_public']}" in made.stdout
    assert f"{SECRET_KEY_ENV}={paths['server_secret']}" in made.stdout
    keys = load_curve(CurveConfig(curve_secret_key_file=paths["server_secret"]))
    assert keys is not None and keys.server_secret is not None
    before = Path(paths["server_secret"]).read_bytes()
    again = run_cli("keys", str(target))
    assert again.returncode != 0 and "--force" in again.stderr
    assert Path(paths["server_secret"]).read_bytes() == before
    reliability.security("rocketmesh keys over existing keys", refused=f"exit {again.returncode}: "
                         f"{again.stderr.strip()[:120]}", note="--force replaces them")
    forced = run_cli("keys", str(target), "--force")
    assert forced.returncode == 0 and Path(paths["server_secret"]).read_bytes() != before


def test_a_server_admitting_listed_clients_only_serves_them_and_no_other(keys, tmp_path: Path, start_namesrv,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       reliability) -> None:
    # A client key the user adds to authorized_clients/ survives `rocketmesh keys --force`, which replaces the
    # mesh's own keys (so the old server key is admitted no longer).
    zmq.auth.create_certificates(str(tmp_path), "alice")
    authorized = Path(keys["authorized"])
    shutil.copy(tmp_path / "alice.key", authorized)
    old_server_key = Path(keys["server_public"]).read_bytes()
    forced = run_cli("keys", str(authorized.parent), "--force")
    assert forced.returncode == 0, forced.stderr
    assert sorted(p.name for p in authorized.iterdir()) == ["alice.key", "client.key", "server.key"]
    assert (authorized / "server.key").read_bytes() == Path(keys["server_public"]).read_bytes() != old_server_key

    # This process's own clients (the readiness probe) use the listed client key.
    monkeypatch.setenv(SERVER_KEY_ENV, keys["server_public"])
    monkeypatch.setenv(CLIENT_KEY_ENV, keys["client_secret"])
    ns = start_namesrv(env={SECRET_KEY_ENV: keys["server_secret"], AUTHORIZED_CLIENTS_ENV: keys["authorized"]})
    cluster_info = request(RequestCode.GET_BROKER_CLUSTER_INFO)
    for listed in (str(tmp_path / "alice.key_secret"), keys["client_secret"]):
        admitted = load_curve(CurveConfig(curve_server_key_file=keys["server_public"], curve_client_key_file=listed))
        with RemotingClient(name="listed", options=SocketOptions(curve=admitted)) as client:
            assert client.invoke_sync(ns.addr, cluster_info, 3000).code == ResponseCode.SUCCESS
    # The server key is right, the client key is not listed: the ZAP handler turns the handshake down.
    with RemotingClient(name="unlisted", options=SocketOptions(curve=CurveKeys.for_client(keys["server_public"]))) as c:
        started = time.monotonic()
        with pytest.raises(RemotingConnectError, match="admits listed clients only"):
            c.invoke_sync(ns.addr, cluster_info, 1000)
        took = time.monotonic() - started
    assert took < 3, took
    reliability.security("request from a client whose key is not in authorized_clients/ (ZAP)",
                         refused=f"RemotingConnectError after {took:.1f} s", note="listed client keys are served")


def test_up_on_a_wildcard_without_acl_warns(tmp_path: Path, reliability) -> None:
    # Port -1 cannot be bound: `up` says what it has to say and stops at the name server, exposing nothing.
    def up(*extra: str):
        return run_cli("up", "--data-dir", str(tmp_path / "mesh"), "--namesrv-port", "-1", "--no-metrics", *extra,
                       "--no-remoting", timeout=60)

    wide = up("--host", "0.0.0.0")
    assert "warning: --host 0.0.0.0" in wide.stderr and "aclEnable=true" in wide.stderr, wide.stderr
    assert "--curve-keys" in wide.stderr
    assert "dashboard 8082" in wide.stderr, wide.stderr  # the web console's port is as open as the rest
    assert "warning" not in up().stderr
    assert "warning" not in up("--host", "0.0.0.0", "--set", "aclEnable=true").stderr
    reliability.security("rocketmesh up --host 0.0.0.0 without aclEnable", refused="warned on stderr: "
                         + wide.stderr.splitlines()[0][:100] + " ...", note="loopback, or ACL on: no warning")
    missing = up("--curve-keys", str(tmp_path / "no-such-keys"))
    assert missing.returncode == 2 and "rocketmesh keys" in missing.stderr
