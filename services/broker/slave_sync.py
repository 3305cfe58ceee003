"""A slave copies its master's metadata (RocketMQ's SlaveSynchronize).

Every ``slaveSyncIntervalMills`` (10 s) a slave asks its master for the topic
configs, the consumer offsets, the scheduler's re-put memory (RocketMQ's delay
offsets) and the subscription groups, so consumers that move to the slave when
the master is gone resume near where they were. The master's address is the
one the name servers name when the slave registers (``haMasterAddress``
overrides it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from rocketmesh.remoting import RemotingError, RequestCode, ResponseCode, request
from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.service_thread import ServiceThread

if TYPE_CHECKING:
    from rocketmesh.broker.parts import BrokerParts
    from rocketmesh.broker.processor.delivery import DeliveryProcessor
    from rocketmesh.broker.registration import NamesrvRegistration

log = get_logger("broker", component="slave_sync")

_TIMEOUT_MS = 3000


class SlaveSynchronize(ServiceThread):
    """Runs on a slave: one sync per interval, from whichever address is the master now."""

    def __init__(self, broker: BrokerParts, delivery: DeliveryProcessor, registration: NamesrvRegistration,
                 interval_ms: int) -> None:
        super().__init__("SlaveSynchronize", interval_ms / 1000)
        self.broker = broker
        self.delivery = delivery
        self.registration = registration
        self.synced_from: str | None = None
        self.syncs = 0

    def master_addr(self) -> str | None:
        """The master to copy from: ``haMasterAddress``, else what the name servers said it is."""
        configured = self.broker.store_config.ha_master_address
        if configured:
            return configured
        answers = list(self.registration.answers.values())
        return next((a.master_addr for a in answers if a.master_addr), None)

    def run_once(self) -> None:
        addr = self.master_addr()
        if addr is None:
            return
        b = self.broker
        try:
            topics = self._get(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
            offsets = self._get(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
            delay = self._get(addr, RequestCode.GET_ALL_DELAY_OFFSET)
            groups = self._get(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        except (RemotingError, ValueError) as exc:
            log.warning("slave_sync_failed", master=addr, error=str(exc))
            return
        changed_topics = b.topics.replace_all(topics)
        moved = b.offsets.merge_from_master(offsets.get("offsetTable") or {})
        self.delivery.replace_all(delay)
        changed_groups = b.subscription_groups.replace_all(groups)
        if changed_topics or moved or changed_groups or self.synced_from != addr:
            log.info("slave_synced", master=addr, topics=changed_topics, offsets_moved=moved,
                     groups=changed_groups)
        self.synced_from = addr
        self.syncs += 1

    def _get(self, addr: str, code: int) -> dict[str, Any]:
        resp = self.broker.client.invoke_sync(addr, request(code), _TIMEOUT_MS)
        if resp.code != ResponseCode.SUCCESS:
            raise ValueError(f"{RequestCode(code).name} answered {resp.code}: {resp.remark}")
        doc = orjson.loads(resp.body or b"{}")
        if not isinstance(doc, dict):
            raise ValueError(f"{RequestCode(code).name} answered a body that is not a JSON object")
        return doc
