"""Consumer offsets: where each group is in each queue, saved in consumerOffset.json.

The table is RocketMQ's ConsumerOffsetManager one, keyed ``"topic@group"``,
then by queue id. It lives in memory; consumers commit into it and
:class:`OffsetPersister` writes it out every ``flushConsumerOffsetInterval`` ms
when it changed. Before the file is replaced the previous one is kept as
``consumerOffset.json.bak``, which ``load`` falls back to when the main file
is missing or unreadable.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from rocketmesh.runtime.jsonfile import read_json, write_json_atomic
from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.service_thread import ServiceThread

log = get_logger("broker", component="consumer_offsets")

TOPIC_GROUP_SEPARATOR = "@"
#: RocketMQ's BrokerConfig.flushConsumerOffsetInterval (ms).
DEFAULT_FLUSH_CONSUMER_OFFSET_INTERVAL = 5000


class OffsetFileError(ValueError):
    """The offsets file and its backup are both unreadable."""


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"the {kind} name must be a non-empty string, got {name!r}")
    if TOPIC_GROUP_SEPARATOR in name:
        raise ValueError(f"the {kind} name {name!r} contains {TOPIC_GROUP_SEPARATOR!r}, "
                         "which separates topic from group in the offset table")


def _key(group: str, topic: str) -> str:
    _check_name("group", group)
    _check_name("topic", topic)
    return topic + TOPIC_GROUP_SEPARATOR + group


def _split(key: str) -> tuple[str, str] | None:
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    return (parts[0], parts[1]) if len(parts) == 2 else None


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} is a boolean, not an integer")  # noqa: TRY004 - bad data
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    raise ValueError(f"{what} is not an integer: {value!r}")


def _decode(data: Any) -> dict[str, dict[int, int]]:
    """The offset table of a consumerOffset.json document; ValueError if it is not one."""
    if not isinstance(data, dict):
        raise ValueError("the document is not a JSON object")  # noqa: TRY004 - bad data
    raw = data.get("offsetTable", {})
    if not isinstance(raw, dict):
        raise ValueError("offsetTable is not an object")  # noqa: TRY004 - bad data
    table: dict[str, dict[int, int]] = {}
    for key, queues in raw.items():
        if not isinstance(queues, dict):
            raise ValueError(f"offsetTable[{key!r}] is not an object")  # noqa: TRY004 - bad data
        table[key] = {_int(q, f"queue id {q!r} of {key!r}"): _int(o, f"offset of {key!r} queue {q}")
                      for q, o in queues.items()}
    return table


class ConsumerOffsetManager:
    """The committed offset of every (group, topic, queue); thread-safe.

    Group and topic names containing ``@`` are rejected with ValueError, since
    they would make the ``"topic@group"`` key ambiguous.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.bak_path = path + ".bak"
        self._table: dict[str, dict[int, int]] = {}
        self._last_commit_ms: dict[tuple[str, str, int], int] = {}
        self._lock = threading.Lock()
        # Serialises writers, so an older snapshot never lands on disk after a newer one;
        # it is held across the file write, the table lock only while copying.
        self._persist_lock = threading.Lock()
        self._version = 0
        self._persisted_version = 0

    # -- updates ---------------------------------------------------------------------------------

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` has consumed ``topic``'s queue ``queue_id`` up to ``offset``.

        A commit below the stored offset is accepted (a consumer may rewind)
        but logged, as RocketMQ does.
        """
        key = _key(group, topic)
        now_ms = int(time.time() * 1000)
        with self._lock:
            queues = self._table.setdefault(key, {})
            previous = queues.get(queue_id)
            queues[queue_id] = offset
            self._last_commit_ms[(group, topic, queue_id)] = now_ms
            self._version += 1
        if previous is not None and offset < previous:
            log.warning("commit_offset_less_than_stored", client_host=client_host, key=key, queue_id=queue_id,
                        offset=offset, stored=previous)

    def merge_from_master(self, table: dict[str, dict[int, int]]) -> int:
        """A slave takes its master's offsets (``{"topic@group": {queue id: offset}}``), keeping its own
        where they are ahead: offsets consumers committed here while the master was gone stay until the
        master has them too. Returns how many offsets moved."""
        moved = 0
        with self._lock:
            for key, queues in table.items():
                mine = self._table.setdefault(key, {})
                for qid, offset in queues.items():
                    qid, offset = _int(qid, "queue id"), _int(offset, "offset")
                    if mine.get(qid, -1) < offset:
                        mine[qid] = offset
                        moved += 1
            if moved:
                self._version += 1
        return moved

    def reset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Set ``group``'s offsets of the given queues of ``topic`` (an admin reset).

        Queues not in ``offsets`` keep theirs.
        """
        key = _key(group, topic)
        clean = {_int(q, "queue id"): _int(o, f"offset of queue {q}") for q, o in offsets.items()}
        with self._lock:
            self._table.setdefault(key, {}).update(clean)
            self._version += 1
        log.info("consumer_offset_reset", group=group, topic=topic, offsets=clean)

    def remove_group(self, group: str) -> None:
        """Forget every offset of ``group`` (the group was deleted)."""
        _check_name("group", group)
        self._remove(lambda topic, g: g == group)

    def remove_topic(self, topic: str) -> None:
        """Forget every group's offsets of ``topic`` (the topic was deleted)."""
        _check_name("topic", topic)
        self._remove(lambda t, group: t == topic)

    def _remove(self, doomed: Callable[[str, str], bool]) -> None:
        """Forget the offsets of every (topic, group) ``doomed`` says yes to."""
        with self._lock:
            gone = [k for k in self._table if (pair := _split(k)) is not None and doomed(*pair)]
            for k in gone:
                del self._table[k]
            # Keys here are (group, topic, queue id).
            self._last_commit_ms = {k: v for k, v in self._last_commit_ms.items() if not doomed(k[1], k[0])}
            if gone:
                self._version += 1
        for k in gone:
            log.info("consumer_offset_removed", key=k)

    # -- queries ---------------------------------------------------------------------------------

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when ``group`` never committed one for this queue."""
        key = _key(group, topic)
        with self._lock:
            return self._table.get(key, {}).get(queue_id, -1)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        """``{queue_id: offset}`` of ``group`` in ``topic`` (a copy; empty when none)."""
        key = _key(group, topic)
        with self._lock:
            return dict(self._table.get(key, {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        """The groups with offsets in ``topic`` (RocketMQ's whichGroupByTopic)."""
        with self._lock:
            pairs = [_split(k) for k in self._table]
        return {p[1] for p in pairs if p is not None and p[0] == topic}

    def topics_of_group(self, group: str) -> set[str]:
        """The topics ``group`` has offsets in (RocketMQ's whichTopicByConsumer)."""
        with self._lock:
            pairs = [_split(k) for k in self._table]
        return {p[0] for p in pairs if p is not None and p[1] == group}

    def by_group(self) -> dict[str, dict[str, dict[int, int]]]:
        """A copy of the whole table by group, ``{group: {topic: {queue_id: offset}}}``: one pass for a
        question about every group (a per-group :meth:`topics_of_group` reads the whole table each time)."""
        with self._lock:
            table = {k: dict(v) for k, v in self._table.items()}
        out: dict[str, dict[str, dict[int, int]]] = {}
        for key, queues in table.items():
            pair = _split(key)
            if pair is not None:
                out.setdefault(pair[1], {})[pair[0]] = queues
        return out

    def table_snapshot(self) -> dict[str, dict[int, int]]:
        """A copy of the whole table, ``{"topic@group": {queue_id: offset}}``."""
        with self._lock:
            return {k: dict(v) for k, v in self._table.items()}

    def last_commit_ms(self, group: str, topic: str, queue_id: int) -> int | None:
        """Wall-clock ms of the last commit for this queue since start-up (not persisted), or None."""
        with self._lock:
            return self._last_commit_ms.get((group, topic, queue_id))

    @property
    def dirty(self) -> bool:
        """Whether the table changed since it was last written or loaded."""
        with self._lock:
            return self._version != self._persisted_version

    # -- file ------------------------------------------------------------------------------------

    def load(self) -> None:
        """Replace the table with the file's; a missing or corrupt file falls back to the ``.bak``.

        A corrupt main file is renamed to ``<path>.corrupt`` (so the next
        persist does not back it up over the good ``.bak``). Raises
        :class:`OffsetFileError` when the main file is corrupt and there is no
        usable backup; a missing main file and missing backup give an empty table.
        """
        main_error: Exception | None = None
        table: dict[str, dict[int, int]] | None = None
        try:
            data = read_json(self.path)
            if data is not None:
                table = _decode(data)
        except ValueError as exc:
            main_error = exc
        if table is None:
            table = self._load_bak(main_error)
            if main_error is not None:
                try:
                    os.replace(self.path, self.path + ".corrupt")
                except OSError:
                    log.exception("consumer_offset_corrupt_rename_failed", path=self.path)
        with self._lock:
            self._table = table
            self._version += 1
            self._persisted_version = self._version
        log.info("consumer_offset_loaded", path=self.path, keys=len(table))

    def _load_bak(self, main_error: Exception | None) -> dict[str, dict[int, int]]:
        try:
            data = read_json(self.bak_path)
            bak = None if data is None else _decode(data)
        except ValueError as exc:
            if main_error is None:
                raise OffsetFileError(f"{self.path} is missing and its backup {self.bak_path} "
                                      f"is unreadable: {exc}") from exc
            raise OffsetFileError(f"{self.path} is unreadable ({main_error}) and so is its backup "
                                  f"{self.bak_path}: {exc}") from exc
        if bak is None:
            if main_error is not None:
                raise OffsetFileError(f"{self.path} is unreadable and there is no backup "
                                      f"{self.bak_path}: {main_error}") from main_error
            return {}
        log.warning("consumer_offset_loaded_from_backup", path=self.bak_path,
                    reason=str(main_error) if main_error else "main file missing")
        return bak

    def persist(self) -> None:
        """Write the table now (write-then-rename), keeping the previous file as ``.bak``."""
        self._write(force=True)

    def persist_if_dirty(self) -> bool:
        """Write the table if it changed since the last write; returns whether it wrote."""
        return self._write(force=False)

    def _write(self, force: bool) -> bool:
        with self._persist_lock:
            with self._lock:
                if not force and self._version == self._persisted_version:
                    return False
                version = self._version
                doc = {"offsetTable": {k: {str(q): o for q, o in sorted(v.items())}
                                       for k, v in self._table.items()}}
            self._backup_current()
            write_json_atomic(self.path, doc)
            with self._lock:
                self._persisted_version = max(self._persisted_version, version)
            return True

    def _backup_current(self) -> None:
        # A hard link keeps the main file in place, so at every moment the main file holds the
        # old table or the new one; the rename then makes the backup appear whole.
        if not os.path.exists(self.path):
            return
        tmp = self.bak_path + ".tmp"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        try:
            os.link(self.path, tmp)
        except OSError:
            # No hard links on this file system: move the file aside instead, as RocketMQ 5
            # does; until the new file is in place, load finds the table in the backup.
            os.replace(self.path, self.bak_path)
            return
        try:
            os.replace(tmp, self.bak_path)
        except OSError:
            os.unlink(tmp)
            raise


class OffsetPersister(ServiceThread):
    """Writes the offset table every ``flush_consumer_offset_interval`` ms when it changed, and on stop."""

    def __init__(self, manager: ConsumerOffsetManager,
                 flush_consumer_offset_interval: int = DEFAULT_FLUSH_CONSUMER_OFFSET_INTERVAL,
                 also: tuple = ()) -> None:
        super().__init__("ConsumerOffsetPersister", flush_consumer_offset_interval / 1000)
        self.manager = manager
        #: Other progress tables written on the same beat (each has ``persist_if_dirty()``).
        self.also = also

    def run_once(self) -> None:
        self.manager.persist_if_dirty()
        for table in self.also:
            table.persist_if_dirty()

    def on_stop(self) -> None:
        self.run_once()
