"""Where a metadata table (topics, subscription groups) is saved: its JSON file, written the same way for both."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from rocketmesh.runtime.jsonfile import write_json_atomic
from rocketmesh.runtime.log import EventLogger


class TableFile:
    """Saves ``snapshot()`` to ``path`` by write-then-rename, so a crash leaves the old file or the new one.

    Saves run one at a time from snapshot to rename, so an older table never lands after a newer one. A
    failed write is logged on ``log`` as ``failed_event``. ``persist_in``: where :meth:`save_soon` saves
    (None: at once, by the caller). A table changed by a request on the remoting I/O thread saves there,
    since a write's fsync can take a disk stall's hundreds of milliseconds, which would hold up every other
    request.
    """

    def __init__(self, path: str, snapshot: Callable[[], dict[str, Any]], log: EventLogger, failed_event: str,
                 persist_in: Executor | None = None) -> None:
        self.path = path
        self.snapshot = snapshot
        self.log = log
        self.failed_event = failed_event
        self.persist_in = persist_in
        self._lock = threading.Lock()

    def save(self) -> None:
        """Write the table now (OSError when that fails)."""
        with self._lock:
            write_json_atomic(self.path, self.snapshot())

    def save_logged(self) -> None:
        """Write the table now; a failure is logged and the change stands in memory (RocketMQ's ConfigManager)."""
        try:
            self.save()
        except OSError:
            self.log.exception(self.failed_event, path=self.path)

    def save_soon(self) -> None:
        """:meth:`save_logged` on ``persist_in``, or at once without one."""
        if self.persist_in is None:
            self.save_logged()
        else:
            self.persist_in.submit(self.save_logged)
