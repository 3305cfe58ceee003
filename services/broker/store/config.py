"""MessageStoreConfig: the store's settings under RocketMQ's key names."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum


class FlushDiskType(Enum):
    """When a put is acknowledged relative to fsync."""

    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class BrokerRole(Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


@dataclass
class MessageStoreConfig:
    """The store's settings. Field names are RocketMQ's keys in snake_case.

    Sizes are bytes, intervals milliseconds, ``file_reserved_time`` hours
    (fractions allowed, which RocketMQ does not), ``delete_when`` one or more
    hours of the day separated by ``;`` ("04" is 4 am).
    """

    store_path_root_dir: str = os.path.join(os.path.expanduser("~"), "store")
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    #: 300,000 entries of 20 bytes.
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    sync_flush_timeout: int = 5000
    max_message_size: int = 4 * 1024 * 1024
    file_reserved_time: float = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    #: Past this disk use (percent) even unexpired commitlog files go, oldest first (unless
    #: ``clean_file_forcibly_enable`` is off).
    disk_space_clean_forcibly_ratio: int = 85
    clean_file_forcibly_enable: bool = True
    #: Past this disk use (percent) of the store's partition the store takes no writes (sends are answered
    #: SERVICE_NOT_AVAILABLE) until use falls below it again; reads go on. Checked every cleanResourceInterval.
    disk_space_warning_level_ratio: int = 90
    clean_resource_interval: int = 10_000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    message_index_enable: bool = True
    #: Check each record's BODYCRC over the commitlog's last three files when a cleanly stopped store
    #: starts (a crashed one is always checked): a damaged record is cut, not served.
    check_crc_on_recover: bool = True
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 5_000_000 * 4
    max_msgs_num_batch: int = 64
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    #: A record more than this percentage of the machine's memory behind the commitlog's end counts as
    #: read from disk, no longer from the page cache.
    access_message_in_memory_max_ratio: int = 40
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    #: SYNC_MASTER: with no slave within this many bytes of the master's end, a send is answered
    #: SLAVE_NOT_AVAILABLE at once instead of waiting.
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    #: A slave whose ha service has not asked for bytes this long (ms) counts as gone.
    ha_housekeeping_interval: int = 20_000
    #: The most commitlog bytes one replication request carries.
    ha_transfer_batch_size: int = 32 * 1024
    #: A slave: its master's address for metadata sync; empty: the one the name servers name.
    ha_master_address: str = ""
    #: ip:port written into each record's STOREHOST (the broker's address).
    store_host: str = "127.0.0.1:10911"

    @property
    def store_path_commit_log(self) -> str:
        return os.path.join(self.store_path_root_dir, "commitlog")

    @property
    def store_path_consume_queue(self) -> str:
        return os.path.join(self.store_path_root_dir, "consumequeue")

    @property
    def store_path_index(self) -> str:
        return os.path.join(self.store_path_root_dir, "index")

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "checkpoint")

    @property
    def abort_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "abort")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.store_path_root_dir, "lock")
