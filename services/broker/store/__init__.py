"""The broker's store engine: CommitLog, ConsumeQueue, IndexFile, flush, recovery, expiry."""

from rocketmesh.broker.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from rocketmesh.broker.store.inner_message import MessageExtBatch, MessageExtBrokerInner
from rocketmesh.broker.store.message_store import MessageFilter, MessageStore, StoreLockedError
from rocketmesh.broker.store.results import (
    AppendResult,
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from rocketmesh.model.delay_levels import parse_delay_levels

__all__ = [
    "AppendResult", "BrokerRole", "FlushDiskType", "GetMessageResult", "GetMessageStatus",
    "MessageExtBatch", "MessageExtBrokerInner", "MessageFilter", "MessageStore", "MessageStoreConfig",
    "PutMessageResult", "PutMessageStatus", "QueryMessageResult", "StoreLockedError", "parse_delay_levels",
]
