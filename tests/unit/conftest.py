"""tests/unit holds unit tests: no process started, no TCP socket bound or connected (ZeroMQ's included). A test
that needs either belongs with the suites that run real processes and sockets (tests/mesh, tests/store, ...);
here it fails at once, naming what it tried."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

import pytest
import zmq


def _refuse(what: str) -> Any:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError(f"a unit test {what}: move it to a suite that runs real processes and sockets")
    return refused


@pytest.fixture(autouse=True)
def no_processes_or_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse subprocesses, TCP binds and connects, and ZeroMQ binds and connects for the test's duration (a UDP
    socket "connected" to learn the host's address sends nothing and stays allowed)."""
    real_bind, real_connect = socket.socket.bind, socket.socket.connect

    def tcp_only(real: Any, what: str) -> Any:
        def call(sock: socket.socket, *args: Any) -> Any:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                _refuse(what)()
            return real(sock, *args)
        return call

    monkeypatch.setattr(socket.socket, "bind", tcp_only(real_bind, "bound a TCP socket"))
    monkeypatch.setattr(socket.socket, "connect", tcp_only(real_connect, "connected a TCP socket"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a process"))
    monkeypatch.setattr(zmq.Socket, "bind", _refuse("bound a ZeroMQ socket"))
    monkeypatch.setattr(zmq.Socket, "connect", _refuse("connected a ZeroMQ socket"))
