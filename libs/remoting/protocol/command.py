"""RemotingCommand and its wire codec (pure: no sockets here).

A command travels as one ZeroMQ frame, laid out as RocketMQ lays out its
remoting frames (less the total length, which the ZeroMQ frame carries)::

    [header length: 4 bytes, big-endian; high byte = serialize type, 0 = JSON][header][body]

One frame, not a multipart message: libzmq aborts the process when a
connection with ZMQ_IMMEDIATE (every client socket here) drops while a
multipart message is half read (``!_more`` in fq.cpp), and a single frame
is read whole or not at all.

``header`` is a JSON object (orjson)::

    {"code": int, "opaque": int, "flag": int, "remark": str | null,
     "ext": {name: JSON value, ...}, "traceparent": str}    # traceparent optional

``body`` is raw bytes (a message body, a batch encoding, or a JSON document
where RocketMQ sends a JSON body). ``flag`` bit 0 marks a response and bit 1
a oneway request, as RocketMQ's RPC_TYPE and RPC_ONEWAY bits do. ``opaque``
is chosen by the requester and echoed in the response. On the server side a
ROUTER socket adds the sender's identity frame in front; that frame is the
connection layer's business, not this module's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from rocketmesh.remoting.errors import ProtocolError

#: ``flag`` bit 0: this command is a response (RocketMQ's RPC_TYPE bit).
RESPONSE_FLAG = 0x1
#: ``flag`` bit 1: this request wants no response (RocketMQ's RPC_ONEWAY bit).
ONEWAY_FLAG = 0x2

#: The largest header ``decode`` accepts, in bytes.
MAX_HEADER_SIZE = 256 * 1024

_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError
#: The header length field: RocketMQ's, whose high byte is the header's serialize type (0: JSON).
_HEADER_LENGTH = struct.Struct(">I")
_pack_length = _HEADER_LENGTH.pack
_unpack_length = _HEADER_LENGTH.unpack_from


@dataclass(slots=True)
class RemotingCommand:
    """One request or response.

    ``code`` is a RequestCode for requests and a ResponseCode for responses;
    decoded commands carry plain ints, which compare equal to the enums.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""
    traceparent: str | None = None

    @property
    def is_response(self) -> bool:
        """True for a response, False for a request."""
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        """True for a request that wants no response."""
        return bool(self.flag & ONEWAY_FLAG)

    def mark_oneway(self) -> RemotingCommand:
        """Set the oneway bit and return self."""
        self.flag |= ONEWAY_FLAG
        return self

    def encode(self) -> list[bytes]:
        """The one frame ``[length][header][body]`` (in a list, as the socket helpers send lists); raises
        ProtocolError when ext is not JSON-serialisable."""
        header = {
            "code": self.code,
            "opaque": self.opaque,
            "flag": self.flag,
            "remark": self.remark,
            "ext": self.ext,
        }
        if self.traceparent is not None:
            header["traceparent"] = self.traceparent
        try:
            encoded = _dumps(header)
        except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
            raise ProtocolError(f"cannot encode header: {exc}", self.opaque, self.flag) from exc
        return [pack_frame(encoded, self.body)]


def request(
    code: int,
    ext: dict[str, Any] | None = None,
    body: bytes = b"",
    oneway: bool = False,
    traceparent: str | None = None,
) -> RemotingCommand:
    """A new request; the client fills in ``opaque`` when it sends it."""
    return RemotingCommand(
        code,
        0,
        ONEWAY_FLAG if oneway else 0,
        None,
        {} if ext is None else ext,
        body,
        traceparent,
    )


def response_to(
    req: RemotingCommand,
    code: int,
    remark: str | None = None,
    ext: dict[str, Any] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """A response to ``req``: same opaque, response bit set."""
    return RemotingCommand(code, req.opaque, RESPONSE_FLAG, remark, {} if ext is None else ext, body, None)


def is_response(cmd: RemotingCommand) -> bool:
    """True when ``cmd`` is a response."""
    return bool(cmd.flag & RESPONSE_FLAG)


def is_oneway(cmd: RemotingCommand) -> bool:
    """True when ``cmd`` is a oneway request."""
    return bool(cmd.flag & ONEWAY_FLAG)


def encode(cmd: RemotingCommand) -> list[bytes]:
    """The frames of ``cmd`` (same as ``cmd.encode()``)."""
    return cmd.encode()


def pack_frame(header: bytes, body: bytes = b"") -> bytes:
    """The wire frame of an encoded JSON ``header`` and a ``body``: ``[length][header][body]``."""
    return b"".join((_pack_length(len(header)), header, body))


def _as_bytes(frame: Any, what: str) -> bytes:
    # Anything with the buffer protocol (bytearray, memoryview, zmq.Frame) is
    # accepted; bytes(obj) alone would also turn an int into a zero-filled buffer.
    try:
        return bytes(memoryview(frame))
    except TypeError:
        raise ProtocolError(f"{what} frame is not bytes") from None


def decode(frames: Sequence[Any], max_header_size: int = MAX_HEADER_SIZE) -> RemotingCommand:
    """Parse the one frame ``[length][header][body]`` into a command; anything malformed raises ProtocolError."""
    try:
        n = len(frames)
    except TypeError:
        raise ProtocolError("frames must be a sequence") from None
    if n != 1:
        raise ProtocolError(f"expected 1 frame [length][header][body], got {n}")
    frame = frames[0]
    if type(frame) is not bytes:
        frame = _as_bytes(frame, "the")
    if len(frame) < 4:
        raise ProtocolError(f"a frame of {len(frame)} bytes has no 4-byte header length")
    size = _unpack_length(frame)[0]
    if size >> 24:
        raise ProtocolError(f"header serialize type {size >> 24} is not supported (JSON, 0, only)")
    if size > max_header_size:
        raise ProtocolError(f"header of {size} bytes exceeds {max_header_size}")
    end = 4 + size
    if end > len(frame):
        raise ProtocolError(f"header length {size} runs past the frame's {len(frame) - 4} bytes")
    header = frame[4:end]
    body = frame[end:]
    try:
        h = _loads(header)
    except _JSONDecodeError as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    if type(h) is not dict:
        raise ProtocolError(f"header is a JSON {type(h).__name__}, not an object")
    opaque = h.get("opaque")
    if type(opaque) is not int:
        raise ProtocolError("header has no integer 'opaque'")
    flag = h.get("flag", 0)
    if type(flag) is not int:
        raise ProtocolError("header 'flag' is not an integer", opaque)
    code = h.get("code")
    if type(code) is not int:
        raise ProtocolError("header has no integer 'code'", opaque, flag)
    remark = h.get("remark")
    if remark is not None and type(remark) is not str:
        raise ProtocolError("header 'remark' is not a string", opaque, flag)
    ext = h.get("ext")
    if ext is None:
        ext = {}
    elif type(ext) is not dict:
        raise ProtocolError("header 'ext' is not an object", opaque, flag)
    traceparent = h.get("traceparent")
    if traceparent is not None and type(traceparent) is not str:
        raise ProtocolError("header 'traceparent' is not a string", opaque, flag)
    return RemotingCommand(code, opaque, flag, remark, ext, body, traceparent)
