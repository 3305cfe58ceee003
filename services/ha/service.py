"""HaService: the replication loop of one slave, as a service of its own.

It finds the group's master and slave (by broker name through the name
servers, or from fixed addresses), asks the slave where its commitlog ends
(HA_APPEND with no bytes), then loops:

- HA_TRANSFER to the master from that offset. The request is the slave's
  acknowledgement (the master releases SYNC_MASTER sends below it) and a long
  poll: the master answers as soon as bytes are written, at most
  ``haTransferBatchSize`` of them, within one commitlog file.
- HA_APPEND of those bytes to the slave at the same offset. The slave refuses a
  chunk that does not start where its commitlog ends, naming where it does;
  the loop goes on from there (a re-sync), so nothing is skipped or doubled.

Any failure (a broker down, a timeout, an answer that makes no sense) ends the
round: the service waits (100 ms doubling up to ``retryMaxDelayMillis``),
looks the addresses up again and starts over from the slave's real end.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from rocketmesh.acl.signer import signer_for
from rocketmesh.client import Admin
from rocketmesh.client.api import ClientAPI
from rocketmesh.client.errors import MQBrokerError, MQError
from rocketmesh.ha.config import HaConfig
from rocketmesh.model.route import MASTER_ID
from rocketmesh.remoting import RemotingClient
from rocketmesh.remoting.protocol.headers import (
    HaAppendRequestHeader,
    HaTransferRequestHeader,
    HaTransferResponseHeader,
)
from rocketmesh.runtime.log import get_logger
from rocketmesh.server.metrics import service_metrics
from rocketmesh.server.service_identity import instance_name_of, status_server

log = get_logger("ha")


class HaRoundError(Exception):
    """A replication round cannot go on (the service waits and starts a new one)."""


class HaService:
    """See the module docstring: ``start()``, then ``shutdown()``."""

    def __init__(self, config: HaConfig) -> None:
        if bool(config.master_address) != bool(config.slave_address):
            raise ValueError("set masterAddress and slaveAddress together, or neither (then they are "
                             "looked up by brokerName through the name servers)")
        if not config.master_address and not config.namesrv_addr:
            if not os.environ.get("NAMESRV_ADDR"):
                raise ValueError("no name server to look the broker group up in: give -n/namesrvAddr, "
                                 "or masterAddress and slaveAddress")
        self.config = config
        self.instance_name = instance_name_of(config, "ha")
        # HA_TRANSFER and HA_APPEND need an admin account where the brokers check ACL.
        self.client = RemotingClient(name=self.instance_name,
                                     rpc_hook=signer_for(config.access_key, config.secret_key))
        self.api = ClientAPI(self.client, timeout_ms=config.request_timeout_millis)
        self.admin: Admin | None = None if config.master_address else Admin(
            config.namesrv_addr or None, instance_name=f"{self.instance_name}-admin",
            access_key=config.access_key or None, secret_key=config.secret_key or None)
        self.server = status_server(config, "ha", self.status)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="HaService", daemon=True)
        self.master: str | None = None
        self.slave: str | None = None
        self.slave_offset = -1
        self.master_max_offset = -1
        self.transferred_bytes = 0
        self.rounds = 0
        self.resyncs = 0
        self.errors = 0
        self.last_error = ""
        self.metrics = service_metrics("ha", config, self.server, self.instance_name)
        self.metrics.gauge("rocketmq_replication_lag_bytes", "Commitlog bytes of the master the slave does not have",
                           self._lag)
        self.metrics.counter_of("rocketmq_replication_transferred_bytes_total", "Commitlog bytes copied to the slave",
                                lambda: [(self.transferred_bytes, {"broker_name": self.config.broker_name})])

    @property
    def address(self) -> str:
        return self.server.address

    def start(self) -> None:
        self.server.start()
        self.metrics.start()
        self._thread.start()
        log.info("ha_started", broker_name=self.config.broker_name, slave_broker_id=self.config.slave_broker_id,
                 master=self.config.master_address or "(from the name servers)",
                 slave=self.config.slave_address or "(from the name servers)")

    def shutdown(self) -> None:
        self._stopped.set()
        # A transfer the master holds ends within its suspend time; then the loop sees the stop.
        self._thread.join(self.config.ha_transfer_suspend_millis / 1000 + self.config.request_timeout_millis / 1000 + 1)
        self.client.close()
        self.server.stop(grace_s=0.5)
        self.metrics.shutdown()
        if self.admin is not None:
            self.admin.close()

    def _lag(self) -> list[tuple[float, dict[str, Any]]]:
        if self.slave_offset < 0 or self.master_max_offset < 0:
            return []
        return [(max(0, self.master_max_offset - self.slave_offset),
                 {"broker_name": self.config.broker_name, "slave": self.slave or ""})]

    def status(self) -> dict[str, Any]:
        """What the status port answers: where replication stands."""
        known = self.slave_offset >= 0 and self.master_max_offset >= 0
        lag = self.master_max_offset - self.slave_offset if known else -1
        return {"instanceName": self.instance_name, "brokerName": self.config.broker_name,
                "master": self.master or "", "slave": self.slave or "", "slaveOffset": self.slave_offset,
                "masterMaxOffset": self.master_max_offset, "lagBytes": lag,
                "transferredBytes": self.transferred_bytes, "rounds": self.rounds, "resyncs": self.resyncs,
                "errors": self.errors, "lastError": self.last_error}

    # --- the loop ---

    def _run(self) -> None:
        delay = 0.1
        while not self._stopped.is_set():
            try:
                self._round()
                delay = 0.1
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one bad round
                self.errors += 1
                self.last_error = str(exc)
                if isinstance(exc, (HaRoundError, MQError, ValueError)):
                    log.warning("ha_round_failed", error=str(exc), retry_in_s=round(delay, 2))
                else:
                    log.exception("ha_round_crashed")
                self._stopped.wait(delay)
                delay = min(delay * 2, self.config.retry_max_delay_millis / 1000)

    def _round(self) -> None:
        """Replicate until something fails or the group's addresses change."""
        master, slave = self._addresses()
        if (master, slave) != (self.master, self.slave):
            log.info("ha_group", master=master, slave=slave)
        self.master, self.slave = master, slave
        self.rounds += 1
        offset = self._append(slave, 0, b"", 0)  # where the slave's commitlog ends
        self.slave_offset = offset
        check_at = time.monotonic() + self.config.address_check_interval_millis / 1000
        while not self._stopped.is_set():
            behind = self.master_max_offset - offset > self.config.ha_transfer_batch_size
            header, data = self._transfer(master, slave, offset, behind)
            self.master_max_offset = header.master_max_offset
            if data:
                start = header.offset
                if offset and start != offset:
                    raise HaRoundError(f"the master {master} sent bytes from {start}, asked for {offset}")
                offset = self._append(slave, start, data, header.file_size)
                self.transferred_bytes += len(data)
                self.slave_offset = offset
            if time.monotonic() >= check_at:
                check_at = time.monotonic() + self.config.address_check_interval_millis / 1000
                if self._addresses() != (master, slave):
                    return

    def _addresses(self) -> tuple[str, str]:
        cfg = self.config
        if cfg.master_address:
            return cfg.master_address, cfg.slave_address
        assert self.admin is not None
        bd = self.admin.cluster_info().broker_addr_table.get(cfg.broker_name)
        addrs = bd.broker_addrs if bd is not None else {}
        master, slave = addrs.get(MASTER_ID), addrs.get(cfg.slave_broker_id)
        if master is None or slave is None:
            raise HaRoundError(f"the name servers list no {'master' if master is None else 'slave'} "
                               f"(brokerId {MASTER_ID if master is None else cfg.slave_broker_id}) "
                               f"of {cfg.broker_name}: waiting for it to register")
        return master, slave

    def _transfer(self, master: str, slave: str, offset: int, catching_up: bool
                  ) -> tuple[HaTransferResponseHeader, bytes]:
        cfg = self.config
        size = cfg.ha_transfer_batch_size
        if catching_up:
            size = max(size, cfg.ha_catch_up_batch_size)
        header = HaTransferRequestHeader(offset, slave, size, cfg.ha_transfer_suspend_millis)
        try:
            return self.api.ha_transfer(master, header, cfg.ha_transfer_suspend_millis + cfg.request_timeout_millis)
        except MQBrokerError as exc:
            raise HaRoundError(f"the master {master} refused HA_TRANSFER from {offset}: {exc.remark}") from None

    def _append(self, slave: str, offset: int, data: bytes, file_size: int) -> int:
        """Hand ``data`` to the slave; returns where its commitlog ends now (after a refused chunk: where
        it really ends, to go on from)."""
        try:
            answer = self.api.ha_append(slave, HaAppendRequestHeader(offset, file_size), data,
                                        self.config.request_timeout_millis)
        except MQBrokerError as exc:
            raise HaRoundError(f"the slave {slave} refused HA_APPEND at {offset}: {exc.remark}") from None
        if answer.accepted and answer.offset is not None:
            return answer.offset
        if data and answer.offset is not None:
            self.resyncs += 1
            log.warning("ha_resync", slave=slave, sent_from=offset, slave_end=answer.offset, reason=answer.remark)
            return answer.offset
        raise HaRoundError(f"the slave {slave} refused HA_APPEND at {offset}: {answer.remark}")
