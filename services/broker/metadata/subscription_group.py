"""Subscription groups: the consumer groups this broker knows, persisted in subscriptionGroup.json.

RocketMQ's SubscriptionGroupManager: a group's config says whether it may
consume, how many retry queues it has and how often a message is retried
before it goes to the dead-letter queue. Groups are auto-created on first use
when ``autoCreateSubscriptionGroup`` is on (the default), and always for
RocketMQ's system groups (``CID_RMQ_SYS_*``).
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, fields
from typing import Any

from rocketmesh.broker.metadata.table_file import TableFile
from rocketmesh.broker.metadata.topic_config import DataVersion
from rocketmesh.model.topics import SYSTEM_GROUPS, is_sys_consumer_group
from rocketmesh.runtime.jsonfile import read_json
from rocketmesh.runtime.log import get_logger

log = get_logger("broker", component="subscription_group")

#: RocketMQ's MixAll.MASTER_ID.
MASTER_ID = 0

GROUP_NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
#: RocketMQ 4.x's Validators.CHARACTER_MAX_LENGTH, the limit on group names.
GROUP_MAX_LENGTH = 255


def validate_group_name(group: str) -> str | None:
    """None when ``group`` is a legal consumer group name, else why not (RocketMQ's rules)."""
    if not isinstance(group, str) or not group.strip():
        return "the group name is blank"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the group name is longer than {GROUP_MAX_LENGTH} characters"
    if not GROUP_NAME_PATTERN.match(group):
        return f"the group name {group!r} contains characters outside {GROUP_NAME_PATTERN.pattern}"
    return None


# Python field -> (JSON key, type). Booleans are checked before ints, since bool is an int.
_JSON_KEYS: dict[str, tuple[str, type]] = {
    "group_name": ("groupName", str),
    "consume_enable": ("consumeEnable", bool),
    "consume_from_min_enable": ("consumeFromMinEnable", bool),
    "consume_broadcast_enable": ("consumeBroadcastEnable", bool),
    "retry_queue_nums": ("retryQueueNums", int),
    "retry_max_times": ("retryMaxTimes", int),
    "broker_id": ("brokerId", int),
    "which_broker_when_consume_slowly": ("whichBrokerWhenConsumeSlowly", int),
    "notify_consumer_ids_changed_enable": ("notifyConsumerIdsChangedEnable", bool),
}


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """RocketMQ's SubscriptionGroupConfig; field names in JSON are its camelCase ones."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = MASTER_ID
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        """The config as RocketMQ's JSON object (groupName, consumeEnable, ...)."""
        return {_JSON_KEYS[f.name][0]: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        """Parse RocketMQ's JSON object; missing keys take defaults, unknown keys are ignored.

        Raises ValueError naming the key when a value has the wrong type or
        groupName is missing.
        """
        if not isinstance(d, dict):
            got = type(d).__name__
            raise ValueError(f"a subscription group config must be a JSON object, got {got}")  # noqa: TRY004 - bad data
        if "groupName" not in d:
            raise ValueError("groupName is missing")
        kwargs: dict[str, Any] = {}
        for name, (key, typ) in _JSON_KEYS.items():
            if key not in d:
                continue
            value = d[key]
            ok = isinstance(value, bool) if typ is bool else (
                isinstance(value, typ) and not isinstance(value, bool))
            if not ok:
                raise ValueError(f"{key} must be {typ.__name__}, got {type(value).__name__} {value!r}")
            kwargs[name] = value
        return cls(**kwargs)


class SubscriptionGroupManager:
    """The subscription group table; every change is saved atomically and bumps the data version."""

    def __init__(self, path: str, auto_create: bool = True, persist_in: Executor | None = None) -> None:
        self.path = path
        self.auto_create = auto_create
        #: A group created on demand is saved through ``persist_in``: a request that finds its group missing
        #: is handled on the remoting I/O thread.
        self.file = TableFile(path, self.snapshot, log, "subscription_group_persist_failed", persist_in)
        self.table: dict[str, SubscriptionGroupConfig] = {g: SubscriptionGroupConfig(g) for g in SYSTEM_GROUPS}
        self.data_version = DataVersion()
        self._lock = threading.Lock()

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """``group``'s config (immutable: changes go through :meth:`update`), auto-creating a default one
        when allowed; None otherwise.

        Creation happens when ``auto_create`` is on or ``group`` is a system
        group (``CID_RMQ_SYS_*``), as RocketMQ's findSubscriptionGroupConfig;
        an illegal name is then refused with ValueError.
        """
        with self._lock:
            cfg = self.table.get(group)
            if cfg is not None:
                return cfg
            if not (self.auto_create or is_sys_consumer_group(group)):
                return None
            why = validate_group_name(group)
            if why is not None:
                raise ValueError(why)
            cfg = self.table[group] = SubscriptionGroupConfig(group)
            self.data_version.next()
        log.info("subscription_group_auto_created", group=group)
        self.file.save_soon()
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        """Create or replace ``cfg.group_name``'s config; ValueError for an illegal name."""
        why = validate_group_name(cfg.group_name)
        if why is not None:
            raise ValueError(why)
        with self._lock:
            old = self.table.get(cfg.group_name)
            self.table[cfg.group_name] = cfg
            self.data_version.next()
        if old is None:
            log.info("subscription_group_created", **asdict(cfg))
        else:
            log.info("subscription_group_updated", **asdict(cfg))
        self.file.save_logged()

    def delete(self, group: str) -> bool:
        """Remove ``group``'s config; returns whether there was one."""
        with self._lock:
            existed = self.table.pop(group, None) is not None
            if existed:
                self.data_version.next()
        if existed:
            log.info("subscription_group_deleted", group=group)
            self.file.save_logged()
        else:
            log.warning("subscription_group_delete_missing", group=group)
        return existed

    def replace_all(self, doc: dict[str, Any]) -> bool:
        """A slave takes its master's table (a :meth:`snapshot` document) when its data version differs;
        returns whether it did."""
        version = DataVersion.of(doc)
        table = {name: SubscriptionGroupConfig.from_json(d)
                 for name, d in (doc.get("subscriptionGroupTable") or {}).items()}
        with self._lock:
            if version == self.data_version:
                return False
            self.table = table
            self.data_version = version
        self.file.save_logged()
        return True

    def all(self) -> list[SubscriptionGroupConfig]:
        """Every config (copies), sorted by group name."""
        with self._lock:
            return [self.table[g] for g in sorted(self.table)]

    def load(self) -> None:
        """Merge the file's groups into the table (system groups stay unless the file overrides them).

        A missing file leaves the table as it is; an unreadable one raises ValueError.
        """
        data = read_json(self.path)
        if data is None:
            return
        if not isinstance(data, dict):
            raise ValueError(f"{self.path}: the document is not a JSON object")  # noqa: TRY004 - bad data
        raw = data.get("subscriptionGroupTable", {})
        if not isinstance(raw, dict):
            raise ValueError(f"{self.path}: subscriptionGroupTable is not an object")  # noqa: TRY004 - bad data
        loaded = {}
        for name, d in raw.items():
            try:
                loaded[name] = SubscriptionGroupConfig.from_json(d)
            except ValueError as exc:
                raise ValueError(f"{self.path}: group {name!r}: {exc}") from exc
        with self._lock:
            self.table.update(loaded)
            self.data_version = DataVersion.of(data)
        log.info("subscription_groups_loaded", path=self.path, groups=len(loaded))

    def persist(self) -> None:
        """Write the table as RocketMQ's subscriptionGroup.json (write-then-rename)."""
        self.file.save()

    def snapshot(self) -> dict[str, Any]:
        """``{"subscriptionGroupTable": {...}, "dataVersion": {...}}``."""
        with self._lock:
            return {"subscriptionGroupTable": {g: c.to_json() for g, c in self.table.items()},
                    "dataVersion": asdict(self.data_version)}

