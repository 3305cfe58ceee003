"""Registration with every name server: on start, every registerNameServerPeriod, on topic changes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

import orjson

from rocketmesh.remoting import RemotingClient, RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.headers import (
    HeaderError,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
)
from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.service_thread import ServiceThread

log = get_logger("broker", component="registration")


class NamesrvRegistration(ServiceThread):
    """RocketMQ's BrokerOuterAPI.registerBrokerAll, run on a timer and on demand.

    Every namesrv gets the registration in parallel; one that is down is
    logged and retried on the next turn, it never holds the others up.
    """

    def __init__(self, client: RemotingClient, namesrvs: list[str], period_ms: int, timeout_ms: int,
                 header: Callable[[], RegisterBrokerRequestHeader], body: Callable[[], dict]) -> None:
        super().__init__("NamesrvRegistration", period_ms / 1000)
        self.client = client
        self.namesrvs = namesrvs
        self.timeout_ms = timeout_ms
        self.header = header
        self.body = body
        self.registered = threading.Event()
        #: namesrv -> its last answer (for a slave: its master's HA and broker addresses).
        self.answers: dict[str, RegisterBrokerResponseHeader] = {}

    def run_once(self) -> None:
        self.register_all()

    def register_all(self) -> int:
        """Register with every namesrv; returns how many accepted."""
        if not self.namesrvs:
            return 0
        body = orjson.dumps(self.body())
        header = self.header()
        futures: list[tuple[str, Future]] = []
        for addr in self.namesrvs:
            futures.append((addr, self.client.invoke_async(
                addr, request(RequestCode.REGISTER_BROKER, header.to_ext(), body), self.timeout_ms)))
        ok = 0
        for addr, fut in futures:
            try:
                resp = fut.result(self.timeout_ms / 1000 + 1)
            except Exception as exc:  # noqa: BLE001 - one namesrv down must not stop the rest
                log.warning("register_broker_failed", namesrv=addr, error=str(exc))
                continue
            if resp.code == ResponseCode.SUCCESS:
                try:
                    self.answers[addr] = RegisterBrokerResponseHeader.from_ext(resp.ext)
                except HeaderError as exc:
                    log.warning("register_broker_answer_malformed", namesrv=addr, error=str(exc))
                    continue
                ok += 1
            else:
                log.warning("register_broker_refused", namesrv=addr, code=resp.code, remark=resp.remark)
        if ok:
            self.registered.set()
        return ok

    def unregister_all(self) -> None:
        h = self.header()
        ext = UnRegisterBrokerRequestHeader(h.broker_name, h.broker_addr, h.cluster_name, h.broker_id).to_ext()
        futures = [(a, self.client.invoke_async(a, request(RequestCode.UNREGISTER_BROKER, dict(ext)), 3000))
                   for a in self.namesrvs]
        for addr, fut in futures:
            try:
                fut.result(4)
            except Exception as exc:  # noqa: BLE001
                log.warning("unregister_broker_failed", namesrv=addr, error=str(exc))
