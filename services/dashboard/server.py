"""Serving the application with uvicorn on a thread, so the process runs as every service does
(ready line, SIGTERM, stop when the supervisor is gone)."""

from __future__ import annotations

import socket
import sys
import threading

import uvicorn

from rocketmesh.remoting.addr import is_loopback_host, join_addr
from rocketmesh.runtime.log import get_logger

from .app import create_app
from .config import DashboardConfig

log = get_logger("dashboard")


def exposure_warning(config: DashboardConfig) -> str | None:
    """What the dashboard warns about when it serves other hosts with ACL off (None: nothing to say)."""
    if is_loopback_host(config.listen_address) or config.acl_enable:
        return None
    return (f"warning: the dashboard listens on {config.listen_address}:{config.listen_port}, beyond this host, and "
            "ACL is off: anyone who reaches it can create and delete topics, reset offsets and read messages.\n"
            "  Turn ACL on (brokers: aclEnable=true with a plain_acl.yml; dashboard: --set aclEnable=true), or "
            "listen on 127.0.0.1 and reach it through an SSH tunnel")


class DashboardServer:
    """The HTTP server on a thread of its own; :meth:`start` returns once it accepts connections."""

    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.app, self.dash = create_app(config)
        self._sock: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Bind, start sampling and serving; the URL it serves on."""
        warning = exposure_warning(self.config)
        if warning:
            print(warning, file=sys.stderr, flush=True)
        host = self.config.listen_address
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on a socket that says it is TCP, and
        # with Nagle on an answer on a kept-alive connection waits ~40 ms for the client's delayed ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), self.config.listen_port))
        sock.listen(128)
        self._sock = sock
        port = sock.getsockname()[1]
        server = self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", access_log=False,
                                                              lifespan="on", timeout_graceful_shutdown=5))
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="dashboard-http",
                                        daemon=True)
        self._thread.start()
        self.dash.collector.start()
        ready = threading.Event()
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the HTTP server stopped while starting (see the log above)")
            ready.wait(0.02)
        url = f"http://{join_addr(host, port)}"
        log.info("dashboard_started", url=url, namesrv=self.dash.namesrv, acl=self.config.acl_enable)
        return url

    def stop(self) -> None:
        """Stop serving (bounded), then sampling."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.dash.close()
        if self._sock is not None:
            self._sock.close()
