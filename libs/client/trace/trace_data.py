"""Message trace records and their wire text (RocketMQ's TraceContext / TraceBean / TraceDataEncoder).

A trace message's body is a run of records, each ended by FIELD_SPLITOR
(chr(2)), its fields separated by CONTENT_SPLITOR (chr(1)), in RocketMQ 4.x's
field order, so a trace written here reads in RocketMQ's tools and back:

- ``Pub``: type, time, region, producer group, topic, msgId, tags, keys, store host,
  body length, cost ms, message type (ordinal), offsetMsgId, success
  (RocketMQ's decoder also takes a 15th field, the client host);
- ``SubBefore``: type, time, region, consumer group, request id, msgId, retry times, keys;
- ``SubAfter``: type, request id, msgId, cost ms, success, keys, context code, time;
- ``EndTransaction``: type, time, region, producer group, topic, msgId, tags, keys, store
  host, message type, transaction id, transaction state, from a check.

A SubBefore and its SubAfter share the request id of one listener call. An
absent string field is written as ``null``, as Java's StringBuilder writes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum, IntEnum

from rocketmesh.client.errors import MQClientError

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
#: The region a record names when the broker gives none (RocketMQ's MixAll.DEFAULT_TRACE_REGION_ID).
DEFAULT_REGION_ID = "DefaultRegion"
_NULL = "null"


class TraceType(Enum):
    """What a record is of (RocketMQ's TraceType)."""

    Pub = "Pub"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class TraceMessageType(IntEnum):
    """The kind of message sent, by ordinal (RocketMQ's MessageType)."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3
    Order_Msg = 4


class ConsumeReturnType(IntEnum):
    """How a listener call ended, by ordinal: a SubAfter's context code (RocketMQ's ConsumeReturnType)."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


class TraceDecodeError(MQClientError):
    """A trace record that is not in RocketMQ's trace format."""


@dataclass(slots=True)
class TraceRecord:
    """One trace record: the fields of RocketMQ's TraceContext and its one TraceBean, flattened.

    Each type uses the fields its wire form has (see the module docstring); the
    rest keep their defaults. ``client_host`` and ``store_host`` of a decoded
    record may be filled in from the trace message (its born and store host),
    as RocketMQ's TraceView does.
    """

    type: TraceType
    msg_id: str
    timestamp: int = 0
    region_id: str = DEFAULT_REGION_ID
    group: str = ""
    topic: str = ""
    tags: str | None = None
    keys: str | None = None
    store_host: str = ""
    body_length: int = 0
    cost_ms: int = 0
    msg_type: TraceMessageType = TraceMessageType.Normal_Msg
    offset_msg_id: str = ""
    success: bool = True
    client_host: str = ""
    request_id: str = ""
    retry_times: int = 0
    context_code: ConsumeReturnType = ConsumeReturnType.SUCCESS
    transaction_id: str = ""
    transaction_state: str = ""
    from_transaction_check: bool = False


def _s(value: object | None) -> str:
    return _NULL if value is None or value == "" else str(value)


def _b(value: bool) -> str:
    return "true" if value else "false"


def _opt(text: str) -> str | None:
    return None if text == _NULL or text == "" else text


def encode_record(r: TraceRecord) -> str:
    """``r`` in RocketMQ's wire text, FIELD_SPLITOR included."""
    t = r.type
    if t is TraceType.Pub:
        fields = [t.value, str(r.timestamp), _s(r.region_id), _s(r.group), _s(r.topic), _s(r.msg_id), _s(r.tags),
                  _s(r.keys), _s(r.store_host), str(r.body_length), str(r.cost_ms), str(int(r.msg_type)),
                  _s(r.offset_msg_id), _b(r.success)]
    elif t is TraceType.SubBefore:
        fields = [t.value, str(r.timestamp), _s(r.region_id), _s(r.group), _s(r.request_id), _s(r.msg_id),
                  str(r.retry_times), _s(r.keys)]
    elif t is TraceType.SubAfter:
        fields = [t.value, _s(r.request_id), _s(r.msg_id), str(r.cost_ms), _b(r.success), _s(r.keys),
                  str(int(r.context_code)), str(r.timestamp)]
    else:
        fields = [t.value, str(r.timestamp), _s(r.region_id), _s(r.group), _s(r.topic), _s(r.msg_id), _s(r.tags),
                  _s(r.keys), _s(r.store_host), str(int(r.msg_type)), _s(r.transaction_id),
                  _s(r.transaction_state), _b(r.from_transaction_check)]
    return CONTENT_SPLITOR.join(fields) + FIELD_SPLITOR


def encode(records: Iterable[TraceRecord]) -> str:
    """A trace message's body text: the records one after another."""
    return "".join([encode_record(r) for r in records])


def _decode_one(line: list[str]) -> TraceRecord:
    kind = TraceType(line[0])
    if kind is TraceType.Pub:
        r = TraceRecord(kind, line[5], int(line[1]), line[2], line[3], line[4], _opt(line[6]), _opt(line[7]),
                        line[8], int(line[9]), int(line[10]), TraceMessageType(int(line[11])))
        if len(line) == 13:
            r.success = line[12] == "true"
        elif len(line) >= 14:
            r.offset_msg_id = _opt(line[12]) or ""
            r.success = line[13] == "true"
        if len(line) >= 15:
            r.client_host = _opt(line[14]) or ""
        return r
    if kind is TraceType.SubBefore:
        return TraceRecord(kind, line[5], int(line[1]), line[2], line[3], keys=_opt(line[7]), request_id=line[4],
                           retry_times=int(line[6]))
    if kind is TraceType.SubAfter:
        r = TraceRecord(kind, line[2], cost_ms=int(line[3]), success=line[4] == "true", keys=_opt(line[5]),
                        request_id=line[1])
        if len(line) >= 7:
            r.context_code = ConsumeReturnType(int(line[6]))
        if len(line) >= 8:
            r.timestamp = int(line[7])
        return r
    return TraceRecord(kind, line[5], int(line[1]), line[2], line[3], line[4], _opt(line[6]), _opt(line[7]), line[8],
                       msg_type=TraceMessageType(int(line[9])), transaction_id=_opt(line[10]) or "",
                       transaction_state=line[11], from_transaction_check=line[12] == "true")


def decode(text: str) -> list[TraceRecord]:
    """The records of a trace message's body text; TraceDecodeError for one that is not a trace record."""
    out: list[TraceRecord] = []
    for chunk in text.split(FIELD_SPLITOR):
        if not chunk:
            continue
        line = chunk.split(CONTENT_SPLITOR)
        try:
            out.append(_decode_one(line))
        except (ValueError, IndexError) as exc:
            raise TraceDecodeError(f"not a trace record ({exc}): {chunk[:80]!r}") from None
    return out


def trace_keys(r: TraceRecord) -> list[str]:
    """The keys a trace message holding ``r`` is indexed by: the traced message's id and its keys (RocketMQ's
    TraceTransferBean keys), and for a Pub also its offset id, so either id finds the trace."""
    keys = [r.msg_id]
    if r.offset_msg_id:
        keys.append(r.offset_msg_id)
    if r.keys:
        keys.append(r.keys)
    return keys
