"""MessageExtBrokerInner: a message as the broker hands it to the store."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rocketmesh.model.codec import decode_properties, encode_host, encode_properties
from rocketmesh.model.message import MessageConst

_LOCAL_HOST = encode_host("127.0.0.1", 0)


@dataclass(slots=True)
class MessageExtBrokerInner:
    """What a put needs: the message's fields, with properties already encoded.

    ``properties`` is the wire form (``name\\x01value\\x02`` ...) so that a send
    passes through the broker without decoding and re-encoding it.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: bytes = b""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = _LOCAL_HOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    _props_cache: dict[str, str] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, topic: str, body: bytes, queue_id: int = 0, properties: dict[str, str] | None = None,
           tags: str | None = None, keys: str | None = None, **kw) -> MessageExtBrokerInner:
        """Build one from decoded parts (convenient for tests and internal re-puts)."""
        props = dict(properties or {})
        if tags:
            props[MessageConst.TAGS] = tags
        if keys:
            props[MessageConst.KEYS] = keys
        kw.setdefault("born_timestamp", int(time.time() * 1000))
        return cls(topic=topic, body=body, queue_id=queue_id, properties=encode_properties(props), **kw)

    @property
    def property_map(self) -> dict[str, str]:
        if self._props_cache is None:
            self._props_cache = decode_properties(self.properties)
        return self._props_cache


@dataclass(slots=True)
class MessageExtBatch:
    """A SEND_BATCH_MESSAGE as the broker hands it to the store: one topic and queue, the items raw.

    ``body`` is the batch as the producer encoded it (RocketMQ's
    ``MessageDecoder.encodeMessages`` layout, see ``rocketmesh.model.codec``):
    the store turns each item into a commitlog record without building a
    message object per item.
    """

    topic: str
    queue_id: int
    body: bytes
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = _LOCAL_HOST
    reconsume_times: int = 0
