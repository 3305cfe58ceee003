"""What store operations answer: put and get statuses and results."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class PutMessageStatus(Enum):
    """Outcome of a put (RocketMQ's PutMessageStatus)."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """The message is in the commitlog (possibly not yet on disk or on the slave)."""
        return self.value in _STORED


_STORED = frozenset({"PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"})


@dataclass(slots=True)
class AppendResult:
    """Where one message, or one batch, went in the commitlog.

    A batch is one result, as in RocketMQ: its records start at
    ``wrote_offset`` and span ``wrote_bytes``, ``msg_id`` lists the offset
    message ids comma separated, ``queue_offset`` is the first message's and
    ``msg_num`` counts them.
    """

    wrote_offset: int
    wrote_bytes: int
    msg_id: str
    store_timestamp: int
    queue_offset: int
    msg_num: int = 1


@dataclass(slots=True)
class PutMessageResult:
    """Answer to a put: a status and, when stored, where each message went."""

    status: PutMessageStatus
    appended: list[AppendResult] = field(default_factory=list)
    remark: str = ""

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def first(self) -> AppendResult | None:
        return self.appended[0] if self.appended else None


class GetMessageStatus(Enum):
    """Outcome of reading a consume queue (RocketMQ's GetMessageStatus)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    """Raw records read for one queue, with the offsets a puller needs next."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: Each stored record's bytes, in queue order.
    records: list[bytes] = field(default_factory=list)
    #: Queue offset of each record in ``records``.
    queue_offsets: list[int] = field(default_factory=list)
    #: The commitlog still holds this many bytes the consumer has not read yet.
    behind_bytes: int = 0

    @property
    def message_count(self) -> int:
        return len(self.records)

    @property
    def buffer_total_size(self) -> int:
        return sum(len(r) for r in self.records)


@dataclass(slots=True)
class QueryMessageResult:
    """Records found by key through the index."""

    records: list[bytes]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int
