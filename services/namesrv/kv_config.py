"""KVConfigManager: namespace -> key -> value, kept in a JSON file.

The file holds ``{"configTable": {namespace: {key: value}}}`` (RocketMQ's
KVConfigSerializeWrapper) and is replaced atomically on every change: written
to a temporary file in the same folder, fsynced, then renamed over the old
one, so a crash leaves either the old or the new table, never half of one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import orjson

from rocketmesh.runtime.jsonfile import write_json_atomic
from rocketmesh.runtime.log import get_logger

#: The namespace whose entries hold the order config of topics (RocketMQ's NAMESPACE_ORDER_TOPIC_CONFIG).
NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    """Thread-safe namespaced key/value settings, persisted to ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._table: dict[str, dict[str, str]] = {}
        self._log = get_logger("namesrv")

    def load(self) -> None:
        """Read the file if there is one (a missing file is an empty table)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        data = orjson.loads(raw) if raw.strip() else {}
        table = data.get("configTable", {}) if isinstance(data, dict) else {}
        with self._lock:
            self._table = {
                str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items() if isinstance(kv, dict)
            }
        self._log.info("kv_config_loaded", path=str(self.path), namespaces=len(self._table))

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set ``namespace/key`` to ``value`` and persist."""
        with self._lock:
            self._table.setdefault(namespace, {})[key] = value
            self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        """The value of ``namespace/key``, or None."""
        with self._lock:
            return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove ``namespace/key``; True when it existed."""
        with self._lock:
            kv = self._table.get(namespace)
            if kv is None or key not in kv:
                return False
            del kv[key]
            if not kv:
                del self._table[namespace]
            self._persist()
            return True

    def namespace(self, namespace: str) -> dict[str, str]:
        """A copy of every key/value of ``namespace`` (empty when there is none)."""
        with self._lock:
            return dict(self._table.get(namespace, {}))

    def _persist(self) -> None:
        write_json_atomic(self.path, {"configTable": self._table}, sort_keys=True)
