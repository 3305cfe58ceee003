"""A raw peer of a live RocketMQ TCP door for the fuzz targets, and the bytes it writes: requests as RocketMQ's
clients write them (JSON headers whose ``extFields`` hold strings, numbers, booleans, nulls or nested values;
ROCKETMQ binary headers) and input that is not a frame at all.

A request owed an answer must get it in its own serialize type, within the bound (livefuzz.ReplyBook). Bytes that
are not a frame must make the door close the connection they came on: the peer then connects again.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import strategies as st
from livefuzz import REPLY_BOUND_S, ReplyBook, hostile_ext

from rocketmesh.remoting import RemotingCommand, split_addr
from rocketmesh.remoting.errors import WireFormatError
from rocketmesh.remoting.protocol.command import ONEWAY_FLAG, RESPONSE_FLAG
from rocketmesh.remoting.protocol.rocketmq_wire import (
    MAX_FRAME_SIZE,
    FrameDecoder,
    LanguageCode,
    SerializeType,
    encode,
)
from rocketmesh.remoting.transport.options import DEFAULT_MAX_MESSAGE_SIZE
from rocketmesh.remoting.transport.tcp_door import door_frame_size

#: The largest frame the live services' doors take: their maxMessageSize plus headers (never over 16 MiB).
DOOR_FRAME_LIMIT = door_frame_size(DEFAULT_MAX_MESSAGE_SIZE)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT16_MIN, INT16_MAX = -(2**15), 2**15 - 1
_PREFIX = struct.Struct(">iI")


def framed(header: bytes, body: bytes = b"", kind: int = SerializeType.JSON, header_size: int | None = None,
           total: int | None = None) -> bytes:
    """A frame laid out by hand (the length fields as given, or the true ones), so that it can lie about them."""
    size = len(header) if header_size is None else header_size
    return _PREFIX.pack(4 + len(header) + len(body) if total is None else total, kind << 24 | size) + header + body


def json_request(code: int, opaque: int, flag: int, remark: str | None, language: Any, version: int,
                 ext: dict[str, Any], body: bytes) -> bytes:
    """A request with a JSON header written as a client may write it: ``extFields`` values of any JSON type."""
    header = {"code": code, "language": language, "version": version, "opaque": opaque, "flag": flag,
              "remark": remark, "extFields": ext, "serializeTypeCurrentRPC": "JSON"}
    return framed(orjson.dumps(header), body)


@dataclass(frozen=True)
class Request:
    """A well-formed request: any code, flag, remark, language and version its header type can carry, a hostile
    ext and body; written in ``cuts`` pieces (none: at once)."""

    serialize_type: SerializeType
    code: int
    flag: int
    remark: str | None
    language: Any
    version: int
    ext: dict[str, Any]
    body: bytes
    cuts: tuple[int, ...]

    def frame(self, opaque: int) -> bytes:
        if self.serialize_type == SerializeType.JSON:
            return json_request(self.code, opaque, self.flag, self.remark, self.language, self.version, self.ext,
                                self.body)
        # encode writes ext values as RocketMQ's Java client does: strings.
        cmd = RemotingCommand(self.code, opaque, self.flag, self.remark, self.ext, self.body)
        return encode(cmd, SerializeType.ROCKETMQ, self.language, self.version)

    @property
    def owed(self) -> bool:
        """Whether the door owes an answer: a request that is neither oneway nor a response."""
        return not self.flag & (RESPONSE_FLAG | ONEWAY_FLAG)

    def __repr__(self) -> str:
        return (f"Request({self.serialize_type.name}, code={self.code}, flag={self.flag}, ext={self.ext!r:.160}, "
                f"body={self.body[:40]!r} ({len(self.body)} bytes))")


@dataclass(frozen=True)
class Malformed:
    """Bytes that are not a frame the door takes (``then_close``: a frame cut short, then our end's close)."""

    what: str
    data: bytes
    then_close: bool = False

    def __repr__(self) -> str:
        return f"Malformed({self.what}: {self.data[:48]!r} ({len(self.data)} bytes))"


def _cut_short(frame: bytes, keep: int) -> Malformed:
    return Malformed("a frame cut short, then closed", frame[:max(1, min(keep, len(frame) - 1))], then_close=True)


# --- strategies --------------------------------------------------------------------------------------------

_json_header = st.builds(orjson.dumps,
                         st.fixed_dictionaries({"code": st.integers(0, 400), "opaque": st.integers(1, 9)}))
_junk = st.binary(max_size=16)
#: JSON headers the decoder must refuse: not JSON, not an object, a field of the wrong type or width.
_bad_json_headers = st.sampled_from([
    b"", b"{", b"\xff\xfe", b"not json", b"[]", b"null", b"12", b'"code"', b'{"opaque":1}', b'{"code":"10"}',
    b'{"code":10.5}', b'{"code":10,"opaque":4294967296}', b'{"code":10,"flag":"0"}', b'{"code":10,"remark":5}',
    b'{"code":10,"language":[]}', b'{"code":10,"extFields":[]}', b'{"code":10,"version":1e400}',
    b'{"code":2147483648}', b'{"code":10,"extFields":{"a":1}', b'\xef\xbb\xbf{"code":10}x',
]) | st.binary(min_size=1, max_size=24).map(lambda b: b"\xff" + b)
_fixed = struct.Struct(">hbhiii")


@st.composite
def _bad_binary_header(draw: st.DrawFn) -> bytes:
    """A ROCKETMQ header the decoder must refuse: too short, a length running past it, or text not UTF-8."""
    fixed = _fixed.pack(draw(st.integers(INT16_MIN, INT16_MAX)), 0, 0, draw(st.integers(1, 9)), 0, 0)
    kind = draw(st.sampled_from(["short", "remark past", "ext past", "key past", "value past", "utf8"]))
    if kind == "short":
        return draw(st.binary(max_size=_fixed.size + 3))
    if kind == "remark past":
        return fixed[:-4] + struct.pack(">i", draw(st.integers(5, INT32_MAX) | st.integers(INT32_MIN, -1))) + b"\0" * 4
    if kind == "ext past":
        return fixed + struct.pack(">i", draw(st.integers(1, INT32_MAX) | st.integers(INT32_MIN, -1)))
    entry = struct.pack(">h", 1) + b"k" + struct.pack(">i", 1) + b"v"
    if kind == "key past":
        entry = struct.pack(">h", draw(st.integers(3, INT16_MAX) | st.integers(INT16_MIN, -1))) + entry[2:]
    elif kind == "value past":
        entry = entry[:3] + struct.pack(">i", draw(st.integers(2, INT32_MAX) | st.integers(INT32_MIN, -1))) + b"v"
    else:
        entry = struct.pack(">h", 1) + b"\xff" + struct.pack(">i", 1) + b"v"
    return fixed + struct.pack(">i", len(entry)) + entry


#: Every kind of bytes that is not a frame: the total length negative, under the 4-byte header length field,
#: over the door's limit (its maxMessageSize plus headers, and RocketMQ's 16 MiB), a header length past the
#: frame, an unknown serialize type, a header that is not JSON or not a valid ROCKETMQ header, and a frame cut
#: short by a close.
malformed_inputs = st.one_of(
    st.builds(lambda n, j: Malformed("a negative total length", struct.pack(">i", n) + j),
              st.integers(INT32_MIN, -1), _junk),
    st.builds(lambda n, j: Malformed("a total length under 4", struct.pack(">i", n) + j), st.integers(0, 3), _junk),
    st.builds(lambda n: Malformed("a total length over maxMessageSize plus headers", _PREFIX.pack(n, 10)),
              st.integers(DOOR_FRAME_LIMIT - 3, MAX_FRAME_SIZE - 4)),
    st.builds(lambda n: Malformed("a total length over 16 MiB", _PREFIX.pack(n, 10)),
              st.integers(MAX_FRAME_SIZE - 3, INT32_MAX)),
    st.builds(lambda h, extra, kind: Malformed("a header length past the frame",
                                               framed(h, kind=kind, header_size=len(h) + extra)),
              _json_header, st.integers(1, 0xFFFFFF - 64), st.sampled_from([0, 1])),
    st.builds(lambda h, kind: Malformed("an unknown serialize type", framed(h, kind=kind)),
              _json_header, st.integers(2, 255)),
    st.builds(lambda h, b: Malformed("a header that is not JSON", framed(h, b)), _bad_json_headers, _junk),
    st.builds(lambda h, b: Malformed("a header that is not a valid ROCKETMQ header",
                                     framed(h, b, kind=SerializeType.ROCKETMQ)), _bad_binary_header(), _junk),
    st.builds(_cut_short, st.builds(lambda h, b: framed(h, b), _json_header, st.binary(max_size=64)),
              st.integers(1, 200)),
)
#: The languages a JSON header may name: RocketMQ's, the C++ client's numbers, and ones RocketMQ does not list.
json_languages = st.sampled_from([None, "JAVA", "CPP", "GO", "NODE_JS", "PYTHON", "", "COBOL", 1, 13, 99, -1])
#: Flags: mostly a plain request; oneway, a response (not ours: ignored), and every bit.
door_flags = st.sampled_from([0] * 12 + [ONEWAY_FLAG, RESPONSE_FLAG, 4, ONEWAY_FLAG | 4, -1, INT32_MIN, INT32_MAX])
#: Where a write is cut into pieces (most go at once).
cuts = st.lists(st.integers(1, 64), max_size=3).map(tuple) | st.just(()) | st.just(())


def door_requests(codes: list[int], bodies: st.SearchStrategy[bytes]) -> st.SearchStrategy[Request]:
    """Well-formed requests, mostly of ``codes``, in both header types, with hostile ext and ``bodies``: ext values
    of any JSON type in JSON headers (the C++ and Node clients send numbers and booleans), strings in ROCKETMQ
    ones; any code, version and remark the header type can carry."""
    known = st.sampled_from(codes)
    json_requests = st.builds(
        Request, st.just(SerializeType.JSON), known | known | known | st.integers(INT32_MIN, INT32_MAX), door_flags,
        st.none() | st.text(max_size=8), json_languages, st.integers(INT32_MIN, INT32_MAX) | st.just(401),
        hostile_ext(), bodies, cuts)
    binary_requests = st.builds(
        Request, st.just(SerializeType.ROCKETMQ), known | known | known | st.integers(INT16_MIN, INT16_MAX),
        door_flags, st.none() | st.text(min_size=1, max_size=8), st.sampled_from(list(LanguageCode)),
        st.integers(INT16_MIN, INT16_MAX), hostile_ext(), bodies, cuts)
    return json_requests | binary_requests


def is_malformed(data: bytes, then_close: bool) -> bool:
    """Whether the door's own decoder refuses ``data`` (or, with ``then_close``, is left inside a frame)."""
    decoder = FrameDecoder(DOOR_FRAME_LIMIT)
    try:
        decoded = decoder.feed(data)
    except WireFormatError:
        return True
    return then_close and not decoded and decoder.buffered > 0


# --- the peer ----------------------------------------------------------------------------------------------


class DoorPeer(ReplyBook):
    """One TCP connection to a door at a time, writing any bytes; checks the answers it is owed (by opaque, in
    the serialize type of the request) and that bytes which are not a frame close the connection."""

    def __init__(self, addr: str) -> None:
        super().__init__()
        self.addr = addr
        #: ``ip:port`` of each connection the door closed for bad input, in order.
        self.closed_for_bad_input: list[str] = []
        self._connect()

    def _connect(self) -> None:
        self.sock = socket.create_connection(split_addr(self.addr), timeout=REPLY_BOUND_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        host, port = self.sock.getsockname()[:2]
        self.local = f"{host}:{port}"
        self.decoder = FrameDecoder()

    def close(self) -> None:
        self.sock.close()

    def _reconnect(self) -> None:
        """A new connection; answers still owed on the old one (held requests) are owed no more."""
        self.sock.close()
        for opaque, (deadline, _, _) in list(self.owed.items()):
            if deadline is None:
                del self.owed[opaque]
        self._connect()

    def _read(self, timeout_s: float) -> bool:
        """Read what comes within ``timeout_s`` and check the frames in it; raises ConnectionError at the
        connection's end."""
        if not select.select([self.sock], [], [], timeout_s)[0]:
            return False
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("the door closed the connection")
        for cmd, wire in self.decoder.feed(data):
            if not cmd.flag & RESPONSE_FLAG:
                continue  # a request of the broker's to the client we posed as (NOTIFY_CONSUMER_IDS_CHANGED ...)
            taken = self.answered(cmd.opaque, cmd.code, cmd.remark)
            if taken is not None and wire.serialize_type != taken[1]:
                self.bad.append(f"answered in {wire.serialize_type.name} to {taken[0]}")
        return True

    def _wait(self, timeout_s: float) -> bool:
        try:
            return self._read(timeout_s)
        except OSError as exc:  # ConnectionError included
            self.bad.append(f"the door dropped a connection that sent only well-formed frames: {exc}")
            self._reconnect()
            return False

    def ask(self, code: int, opaque: int) -> None:
        self.request(Request(SerializeType.JSON, code, 0, None, "JAVA", 0, {}, b"", ()), opaque, 0.0)

    def request(self, req: Request, opaque: int, hold_s: float | None) -> int | None:
        """Write ``req`` (in its pieces); returns ``opaque`` when an answer is owed within REPLY_BOUND_S +
        ``hold_s`` (``hold_s`` None: it may be held past any bound we wait)."""
        frame = req.frame(opaque)
        owed = self.owe(opaque, hold_s, repr(req), req.serialize_type) if req.owed else None
        pos = 0
        try:
            for cut in req.cuts:
                self.sock.sendall(frame[pos:pos + cut])
                pos += cut
            self.sock.sendall(frame[pos:])
        except OSError as exc:
            self.bad.append(f"the door dropped a connection that sent only well-formed frames: {exc}")
            self._reconnect()
        return owed

    def malformed(self, bad: Malformed) -> None:
        """Write ``bad`` on a connection that owes nothing more; the door must close it (only it) within the
        bound, having answered nothing. Then connect again."""
        self.settle()
        try:
            self.sock.sendall(bad.data)
            if bad.then_close:
                self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the door closed (and reset) the connection before it read all of it
        deadline = time.monotonic() + REPLY_BOUND_S
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0 or not self._read(left):
                    self.bad.append(f"the door kept the connection open after {bad!r}")
                    break
            except OSError:  # the end of the stream, or a reset
                break
        self.closed_for_bad_input.append(self.local)
        self._reconnect()
