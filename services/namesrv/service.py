"""NamesrvService: the remoting server, the tables and the liveness checks, wired together.

A broker is dropped from the routes when the connection it registered over
closes (at once: RocketMQ's BrokerHousekeepingService), or, when it hangs
with its connection open, once it has been silent for brokerChannelExpiredTime
(the scan).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from rocketmesh.acl.config import resolve_acl_file
from rocketmesh.acl.validator import PlainAccessValidator
from rocketmesh.namesrv.config import NamesrvConfig
from rocketmesh.namesrv.kv_config import KVConfigManager
from rocketmesh.namesrv.processor import NamesrvProcessor
from rocketmesh.namesrv.route_info import RouteInfoManager
from rocketmesh.remoting import RemotingServer, SocketOptions
from rocketmesh.remoting.addr import join_addr
from rocketmesh.remoting.transport.tcp_door import TcpDoor, door_frame_size
from rocketmesh.runtime.log import get_logger
from rocketmesh.server.metrics import service_metrics


class NamesrvService:
    """One name server. ``start()`` binds and starts the scan; ``stop()`` undoes it.

    Name servers share nothing: run as many as you like side by side and let
    brokers register with each.
    """

    def __init__(self, config: NamesrvConfig) -> None:
        self.config = config
        self.routes = RouteInfoManager()
        self.kv = KVConfigManager(config.kv_config_path)
        self.processor = NamesrvProcessor(config, self.routes, self.kv)
        self.server = RemotingServer(
            join_addr(config.listen_address, config.listen_port),
            "namesrv",
            options=SocketOptions(max_message_size=config.max_message_size),
        )
        #: RocketMQ's own clients' door (their remoting protocol over TCP), when remotingListenPort is set.
        self.door = (TcpDoor(self.server, join_addr(config.listen_address, config.remoting_listen_port),
                             max_frame_size=door_frame_size(config.max_message_size))
                     if config.remoting_listen_port else None)
        # Writes (registrations, KV changes with their fsync) stay off the I/O thread.
        self._writer = ThreadPoolExecutor(2, thread_name_prefix="namesrv-write")
        self._stop = threading.Event()
        self._scanner = threading.Thread(target=self._scan_loop, name="namesrv-scan", daemon=True)
        self._log = get_logger("namesrv")
        self.metrics = service_metrics("namesrv", config, self.server, join_addr(config.listen_address,
                                                                                   config.listen_port))
        self.metrics.gauge("rocketmq_namesrv_topics", "Topics the name server routes",
                           lambda: [(len(self.routes.all_topics()), {})])

    @property
    def address(self) -> str:
        """``host:port`` as bound."""
        return self.server.address

    def start(self) -> NamesrvService:
        """Load the KV config, bind, start the liveness scan."""
        if self.config.acl_enable:
            # A file that cannot be used stops the start with its reason.
            path = resolve_acl_file(self.config.acl_file, os.path.dirname(os.path.abspath(self.config.kv_config_path)))
            self.server.request_hook = PlainAccessValidator(
                path, "namesrv", self.config.acl_reload_interval_ms / 1000).server_hook()
        self.kv.load()
        self.processor.register_with(self.server, self._writer)
        self.server.on_disconnect(self._channel_closed)
        self.server.start()
        if self.door is not None:
            self.door.start()
            self._log.info("remoting_door_open", address=self.door.address)
        self.metrics.start()
        self._scanner.start()
        return self

    def stop(self) -> None:
        """Stop the scan, the server and the writer pool."""
        self._stop.set()
        if self.door is not None:
            self.door.stop()
        self.server.stop()
        self.metrics.shutdown()
        self._writer.shutdown(wait=True, cancel_futures=True)
        if self._scanner.is_alive():
            self._scanner.join(5)

    def _channel_closed(self, identity: bytes) -> None:
        """A client's last connection closed: the brokers that registered over it are gone."""
        for addr in self.routes.on_channel_destroy(identity):
            self._log.warning("broker_connection_closed", addr=addr)

    def _scan_loop(self) -> None:
        interval = self.config.scan_not_active_broker_interval / 1000.0
        while not self._stop.wait(interval):
            try:
                removed = self.routes.scan_not_active_broker(self.config.broker_channel_expired_time)
            except Exception:  # the scan must outlive a bug in one round
                self._log.exception("broker_liveness_scan_failed")
                continue
            for addr in removed:
                self._log.warning(
                    "broker_expired",
                    addr=addr,
                    silent_ms_over=self.config.broker_channel_expired_time,
                )
