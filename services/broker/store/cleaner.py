"""Expiry: delete commitlog files past fileReservedTime, then the queue and index files they orphan."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

from rocketmesh.broker.store.commitlog import CommitLog
from rocketmesh.broker.store.config import MessageStoreConfig
from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.service_thread import ServiceThread

log = get_logger("broker", component="cleaner")

#: Files deleted per turn, as RocketMQ's deleteFileBatchMax.
DELETE_FILES_BATCH_MAX = 10


def disk_used_ratio(path: str) -> float:
    """Fraction of the partition holding ``path`` that is in use."""
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


class CleanService(ServiceThread):
    """RocketMQ's CleanCommitLogService + CleanConsumeQueueService, one turn every cleanResourceInterval.

    Commitlog files older than ``fileReservedTime`` hours go when the hour is one
    of ``deleteWhen``, when disk use passes ``diskMaxUsedSpaceRatio``, or on a manual
    request; past ``diskSpaceCleanForciblyRatio`` even unexpired files go. Each turn
    also tells the store the disk use, which stops writes past ``diskSpaceWarningLevelRatio``. The
    newest file always stays. Consume queue and index files that point only
    below the commitlog's new start go after it, and queue min offsets move up.
    """

    def __init__(self, config: MessageStoreConfig, commitlog: CommitLog, check_disk_space: Callable[[float], None],
                 clean_logics: Callable[[], None]) -> None:
        """``check_disk_space(used_percent)`` tells the store the disk use; ``clean_logics()`` drops the queue
        and index files below the commitlog's start (both the store's)."""
        super().__init__("CleanService", config.clean_resource_interval / 1000)
        self.config = config
        self.commitlog = commitlog
        self._check_disk_space = check_disk_space
        self._clean_logics = clean_logics
        self.manual_delete_requests = 0

    def request_delete_now(self) -> None:
        """Delete expired files on the next turn whatever the hour (mqadmin deleteExpiredCommitLog)."""
        self.manual_delete_requests = 1
        self.wakeup()

    def is_time_to_delete(self) -> bool:
        hour = time.localtime().tm_hour
        for h in self.config.delete_when.split(";"):
            h = h.strip()
            if h.isdigit() and int(h) == hour:
                return True
        return False

    def run_once(self) -> None:
        self.clean_once()

    def clean_once(self) -> int:
        """One round: expired commitlog files, then the queues and index entries they held; how many
        commitlog files went."""
        deleted = self.clean_commitlog()
        self.clean_logics()
        return deleted

    def clean_commitlog(self) -> int:
        cfg = self.config
        ratio = disk_used_ratio(cfg.store_path_root_dir) * 100
        self._check_disk_space(ratio)
        space_full = ratio > cfg.disk_max_used_space_ratio
        forcibly = cfg.clean_file_forcibly_enable and ratio > min(cfg.disk_space_clean_forcibly_ratio,
                                                                   cfg.disk_space_warning_level_ratio)
        manual = self.manual_delete_requests > 0
        if not (self.is_time_to_delete() or space_full or manual):
            return 0
        self.manual_delete_requests = 0
        deleted = self.commitlog.queue.delete_expired_by_time(
            cfg.file_reserved_time * 3_600_000, cfg.delete_commit_log_files_interval,
            DELETE_FILES_BATCH_MAX, force=forcibly)
        if deleted:
            log.info("commitlog_files_deleted", count=deleted, disk_ratio=round(ratio, 1),
                     forcibly=forcibly, min_offset=self.commitlog.min_offset)
        return deleted

    def clean_logics(self) -> None:
        self._clean_logics()
