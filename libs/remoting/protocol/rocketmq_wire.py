"""RocketMQ 4.x's remoting frames on a TCP stream, as RocketMQ's own clients write them (pure: no sockets here).

A frame, every integer big-endian::

    [total length: int32][serialize type: 1 byte | header length: 3 bytes][header][body]

The total length counts everything after itself. The high byte of the second field names how the header is
serialized:

- JSON (0), what the C++, Go and Node clients send and Java's by default: an object
  ``{"code", "language", "version", "opaque", "flag", "remark", "extFields", "serializeTypeCurrentRPC"}``.
  ``language`` is a LanguageCode's name (some C++ clients send its number), ``extFields`` maps names to
  strings (some clients send numbers or booleans).
- ROCKETMQ (1), RocketMQ's binary layout (``RocketMQSerializable``)::

      code int16 | language int8 | version int16 | opaque int32 | flag int32
      | remark length int32 | remark (UTF-8)
      | extFields length int32 | (key length int16 | key (UTF-8) | value length int32 | value (UTF-8))*

A decoded frame is our :class:`RemotingCommand` (``ext`` is ``extFields``, every value a string as RocketMQ
keeps them: the typed headers read ``"12"`` and ``"true"``) and a :class:`WireInfo` with what the frame
carries beyond the command: its serialize type and the peer's language and version. The connection keeps
the WireInfo of a request to answer in kind (:func:`encode` with the request's serialize type).
``traceparent`` does not travel here: RocketMQ's clients carry trace context in message properties.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

import orjson

from rocketmesh.remoting.errors import WireFormatError
from rocketmesh.remoting.protocol.command import RemotingCommand

#: The largest frame, its total length included, a decoder accepts by default (RocketMQ's
#: ``com.rocketmq.remoting.frameMaxLength``).
MAX_FRAME_SIZE = 16 * 1024 * 1024
#: The largest header the 24-bit header length can describe.
MAX_HEADER_SIZE = 0xFFFFFF
#: The ``version`` our frames carry: ``MQVersion.Version.V4_9_4.ordinal()``, the RocketMQ release whose
#: behaviour the mesh follows (clients log it; none branches on a server's version).
SERVER_VERSION = 401


class SerializeType(IntEnum):
    """How a frame's header is serialized (RocketMQ's SerializeType): the high byte of the header length."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    """The language of the peer that wrote a frame (RocketMQ's LanguageCode and its byte codes)."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


@dataclass(frozen=True, slots=True)
class WireInfo:
    """What a frame carries beside its command.

    ``language`` is None when the peer named a language RocketMQ does not list (RocketMQ serves such a
    peer too); a JSON header without one reads as JAVA, RocketMQ's default.
    """

    serialize_type: SerializeType = SerializeType.JSON
    language: LanguageCode | None = LanguageCode.JAVA
    version: int = 0


#: One decoded frame: the command and what the frame said beside it.
Decoded = tuple[RemotingCommand, WireInfo]

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT16_MIN, _INT16_MAX = -(2**15), 2**15 - 1
#: Total length, then the serialize type (high byte) and header length (low 24 bits).
_PREFIX = struct.Struct(">iI")
_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
_SHORT = struct.Struct(">h")
#: The ROCKETMQ header's fixed part: code, language, version, opaque, flag, remark length.
_FIXED = struct.Struct(">hbhiii")
#: The fixed part plus the extFields length: the shortest ROCKETMQ header.
_MIN_BINARY_HEADER = _FIXED.size + 4

_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError
_LANGUAGE_BY_NAME: dict[str, LanguageCode] = dict(LanguageCode.__members__)
_LANGUAGE_BY_CODE: dict[int, LanguageCode] = {lang.value: lang for lang in LanguageCode}
#: Enum ``.name`` is a descriptor call: the encoder reads the names from a dict.
_LANGUAGE_NAME: dict[LanguageCode, str] = {lang: lang.name for lang in LanguageCode}
_ROCKETMQ = SerializeType.ROCKETMQ


# --- decoding -------------------------------------------------------------------------------------------


def _int32_off_path(key: str, v: Any, opaque: int | None = None, flag: int | None = None) -> int:
    """A header number that is not a plain int32: null reads as 0, as RocketMQ's JSON reader leaves it."""
    if v is None:
        return 0
    raise WireFormatError(f"JSON header '{key}' is not a 32-bit integer: {v!r:.40}", opaque, flag)


_WIRE_INFOS: dict[tuple[int, str | int | None, int], WireInfo] = {}


def _wire_info(kind: int, language: str | int | None, version: int) -> WireInfo:
    """The WireInfo of a frame, from the language as the frame spelled it (a name, a number, or absent).

    Frozen, so shared: a connection sends the same one frame after frame, and the cache is keyed by plain
    str and int (an enum member hashes in Python, not in C).
    """
    key = (kind, language, version)
    info = _WIRE_INFOS.get(key)
    if info is None:
        if language is None:
            lang: LanguageCode | None = LanguageCode.JAVA  # RocketMQ's default when a header names none
        elif isinstance(language, str):
            lang = _LANGUAGE_BY_NAME.get(language)
        else:
            lang = _LANGUAGE_BY_CODE.get(language)
        info = WireInfo(SerializeType(kind), lang, version)
        if len(_WIRE_INFOS) < 1024:  # bounded: versions and language names come from peers
            _WIRE_INFOS[key] = info
    return info


def _ext_text(v: Any) -> str | None:
    """An extFields value as RocketMQ keeps it, a string (None: the field is absent)."""
    if type(v) is str:
        return v
    if v is None:
        return None
    if isinstance(v, Enum):  # our own (str, Enum) and IntEnum codes: their value, not their repr
        v = v.value
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (dict, list, tuple)):
        # A nested JSON value reads as its JSON text, as RocketMQ's fastjson reads one into a String field.
        try:
            return _dumps(v).decode()
        except TypeError as exc:
            raise WireFormatError(f"extFields value cannot be written as JSON: {exc}") from None
    raise WireFormatError(f"extFields value of type {type(v).__name__} cannot be written as a string")


def _json_ext(ext: Any, opaque: int, flag: int) -> dict[str, str]:
    if ext is None:
        return {}
    if type(ext) is not dict:
        raise WireFormatError(f"JSON header 'extFields' is a {type(ext).__name__}, not an object", opaque, flag)
    for v in ext.values():
        if type(v) is not str:
            break
    else:
        return ext  # the usual case: every value a string already
    out = {}
    for k, v in ext.items():
        text = _ext_text(v)
        if text is not None:
            out[k] = text
    return out


def _decode_json(header: bytes, body: bytes) -> Decoded:
    try:
        h = _loads(header)
    except _JSONDecodeError as exc:
        raise WireFormatError(f"JSON header is not valid JSON: {exc}") from None
    if type(h) is not dict:
        raise WireFormatError(f"JSON header is a {type(h).__name__}, not an object")
    # Absent numbers are 0, as RocketMQ's JSON reader leaves them.
    opaque = h.get("opaque", 0)
    if type(opaque) is not int or not _INT32_MIN <= opaque <= _INT32_MAX:
        opaque = _int32_off_path("opaque", opaque)
    flag = h.get("flag", 0)
    if type(flag) is not int or not _INT32_MIN <= flag <= _INT32_MAX:
        flag = _int32_off_path("flag", flag, opaque)
    code = h.get("code")
    if type(code) is not int or not _INT32_MIN <= code <= _INT32_MAX:
        raise WireFormatError(f"JSON header has no 32-bit integer 'code': {code!r:.40}", opaque, flag)
    version = h.get("version", 0)
    if type(version) is not int or not _INT32_MIN <= version <= _INT32_MAX:
        version = _int32_off_path("version", version, opaque, flag)
    remark = h.get("remark")
    if remark is not None and type(remark) is not str:
        raise WireFormatError(f"JSON header 'remark' is a {type(remark).__name__}, not a string", opaque, flag)
    lang = h.get("language")
    # A name, or the C++ client's enum as a number.
    if lang is not None and type(lang) is not str and type(lang) is not int:
        raise WireFormatError(f"JSON header 'language' is a {type(lang).__name__}, not a name or a number",
                              opaque, flag)
    ext = _json_ext(h.get("extFields"), opaque, flag)
    # serializeTypeCurrentRPC is informational: the frame's high byte says how the header was written.
    return RemotingCommand(code, opaque, flag, remark, ext, body), _wire_info(0, lang, version)


def _decode_binary(header: bytes, body: bytes) -> Decoded:
    n = len(header)
    if n < _MIN_BINARY_HEADER:
        raise WireFormatError(f"ROCKETMQ header of {n} bytes is shorter than its fixed {_MIN_BINARY_HEADER}")
    code, lang, version, opaque, flag, remark_size = _FIXED.unpack_from(header)
    pos = _FIXED.size
    # The extFields length follows the remark, so the remark must leave 4 bytes.
    if not 0 <= remark_size <= n - pos - 4:
        raise WireFormatError(f"ROCKETMQ header remark length {remark_size} does not fit its {n} bytes",
                              opaque, flag)
    ext: dict[str, str] = {}
    what = "remark"
    try:
        # A zero-length remark is RocketMQ's null remark.
        remark = header[pos:pos + remark_size].decode() if remark_size else None
        pos += remark_size
        ext_size = _INT.unpack_from(header, pos)[0]
        pos += 4
        if not 0 <= ext_size <= n - pos:
            raise WireFormatError(f"ROCKETMQ header extFields length {ext_size} does not fit its {n} bytes",
                                  opaque, flag)
        end = pos + ext_size
        while pos < end:
            if end - pos < 2:
                raise WireFormatError("ROCKETMQ header extFields end inside a key length", opaque, flag)
            key_size = _SHORT.unpack_from(header, pos)[0]
            pos += 2
            if not 0 <= key_size <= end - pos - 4:
                raise WireFormatError(f"ROCKETMQ header extFields key length {key_size} runs past the map",
                                      opaque, flag)
            what = "extFields key"
            key = header[pos:pos + key_size].decode()
            pos += key_size
            value_size = _INT.unpack_from(header, pos)[0]
            pos += 4
            if not 0 <= value_size <= end - pos:
                raise WireFormatError(f"ROCKETMQ header extFields value length {value_size} of {key!r:.40} runs "
                                      f"past the map", opaque, flag)
            what = "extFields value"
            ext[key] = header[pos:pos + value_size].decode()
            pos += value_size
    except UnicodeDecodeError as exc:
        raise WireFormatError(f"ROCKETMQ header {what} is not UTF-8: {exc.reason}", opaque, flag) from None
    # Bytes after extFields are ignored, as RocketMQ's decoder ignores them.
    command = RemotingCommand(code, opaque, flag, remark, ext, body)
    return command, _wire_info(1, lang, version)


class FrameDecoder:
    """Cuts a TCP byte stream into commands: :meth:`feed` it what the socket read, get the whole frames back.

    A frame cut short waits in the decoder for the rest. Bytes that are not a frame (a negative total length
    or one over ``max_frame_size``, a header length past the frame, an unknown serialize type, a header that
    does not decode) raise WireFormatError; the stream has then lost its framing, so the caller closes the
    connection, and every later ``feed`` raises the same error. Commands that were whole ahead of the bad
    bytes in the same chunk are not returned: a peer that writes garbage is not served further.
    """

    __slots__ = ("_buf", "_error", "_need", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        # How many bytes the held frame needs before it is worth looking at again: a frame arriving in
        # many reads is appended to, not re-parsed (and copied) at every read.
        self._need = 0
        self._error: WireFormatError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet whole."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Decoded]:
        """The commands whole once ``data`` is added to what was held, in stream order."""
        if self._error is not None:
            raise self._error
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return []
            view = bytes(buf)
            buf.clear()
        else:
            view = data if type(data) is bytes else bytes(data)
        out: list[Decoded] = []
        pos, n = 0, len(view)
        try:
            while True:
                if n - pos < 4:
                    self._need = 4
                    break
                total = _INT.unpack_from(view, pos)[0]
                if total < 4:
                    raise WireFormatError(f"frame length {total} is less than the 4-byte header length field")
                # The maximum counts the length field too, as RocketMQ's frame decoder counts it.
                if total > self.max_frame_size - 4:
                    raise WireFormatError(f"frame of {total + 4} bytes exceeds the maximum {self.max_frame_size}")
                if n - pos < 8:
                    self._need = 8
                    break
                # Refuse a bad serialize type or header length before waiting for the rest of the frame.
                size = _PREFIX.unpack_from(view, pos)[1]
                if size >> 24 > 1:
                    raise WireFormatError(f"unknown header serialize type {size >> 24} (JSON 0 and ROCKETMQ 1 "
                                          f"are known)")
                if size & MAX_HEADER_SIZE > total - 4:
                    raise WireFormatError(f"header length {size & MAX_HEADER_SIZE} runs past the frame's "
                                          f"{total - 4} bytes")
                end = pos + 4 + total
                if end > n:
                    self._need = 4 + total
                    break
                start = pos + 8 + (size & MAX_HEADER_SIZE)
                decode_header = _decode_binary if size >> 24 else _decode_json
                out.append(decode_header(view[pos + 8:start], view[start:end]))
                pos = end
        except WireFormatError as exc:
            self._error = exc
            self._buf = bytearray()
            raise
        if pos < n:
            buf += memoryview(view)[pos:]
        return out


# --- encoding -------------------------------------------------------------------------------------------


def _ext_out(ext: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in ext.items():
        if type(k) is not str:
            raise WireFormatError(f"extFields key {k!r:.40} is not a string")
        text = _ext_text(v)
        if text is not None:
            out[k] = text
    return out


def _check_range(value: int, low: int, high: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise WireFormatError(f"{what} {value!r:.40} does not fit the wire's {high.bit_length() + 1}-bit field")


def _encode_json(cmd: RemotingCommand, ext: dict[str, str], language: LanguageCode, version: int) -> bytes:
    # RocketMQ's own order (fastjson sorts the fields); null fields and an empty extFields are left out.
    header: dict[str, Any] = {"code": int(cmd.code)}
    if ext:
        header["extFields"] = ext
    header["flag"] = cmd.flag
    header["language"] = _LANGUAGE_NAME[language]
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = version
    try:
        return _dumps(header)
    except TypeError as exc:  # a remark that is not text
        raise WireFormatError(f"cannot encode JSON header: {exc}", cmd.opaque, cmd.flag) from None


def _encode_binary(cmd: RemotingCommand, ext: dict[str, str], language: LanguageCode, version: int) -> bytes:
    _check_range(cmd.code, _INT16_MIN, _INT16_MAX, "code")
    _check_range(version, _INT16_MIN, _INT16_MAX, "version")
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = [_FIXED.pack(int(cmd.code), int(language), version, cmd.opaque, cmd.flag, len(remark)), remark, b""]
    size = 0
    for k, v in ext.items():
        key, value = k.encode(), v.encode()
        if len(key) > _INT16_MAX:
            raise WireFormatError(f"extFields key of {len(key)} bytes is longer than {_INT16_MAX}")
        parts += (_SHORT.pack(len(key)), key, _INT.pack(len(value)), value)
        size += 6 + len(key) + len(value)
    parts[2] = _INT.pack(size)
    return b"".join(parts)


def encode(
    cmd: RemotingCommand,
    serialize_type: SerializeType = SerializeType.JSON,
    language: LanguageCode = LanguageCode.JAVA,
    version: int = SERVER_VERSION,
) -> bytes:
    """The whole frame of ``cmd``, total length first, its header written as ``serialize_type`` says (a
    response in the type its request came in).

    ``ext`` values are written as RocketMQ writes them, strings: ``True`` as ``"true"``, ``12`` as ``"12"``,
    None left out. ``language`` defaults to JAVA, what RocketMQ's own servers write. Raises WireFormatError
    when the command cannot be written (a number too wide for its field, an ext value with no text form).
    """
    code, opaque, flag = cmd.code, cmd.opaque, cmd.flag
    if type(opaque) is not int or type(flag) is not int or not (
            _INT32_MIN <= opaque <= _INT32_MAX and _INT32_MIN <= flag <= _INT32_MAX):
        _check_range(opaque, _INT32_MIN, _INT32_MAX, "opaque")
        _check_range(flag, _INT32_MIN, _INT32_MAX, "flag")
    ext = cmd.ext
    for k, v in ext.items():
        if type(v) is not str or type(k) is not str:
            ext = _ext_out(ext)
            break
    if serialize_type == _ROCKETMQ:
        header = _encode_binary(cmd, ext, language, version)
    else:
        if not (isinstance(code, int) and isinstance(version, int) and _INT32_MIN <= code <= _INT32_MAX
                and _INT32_MIN <= version <= _INT32_MAX):
            _check_range(code, _INT32_MIN, _INT32_MAX, "code")
            _check_range(version, _INT32_MIN, _INT32_MAX, "version")
        header = _encode_json(cmd, ext, language, version)
    if len(header) > MAX_HEADER_SIZE:
        raise WireFormatError(f"header of {len(header)} bytes exceeds the {MAX_HEADER_SIZE} a frame can carry")
    total = 4 + len(header) + len(cmd.body)
    if total > _INT32_MAX:
        raise WireFormatError(f"frame of {total} bytes exceeds the int32 total length")
    return b"".join((_PREFIX.pack(total, int(serialize_type) << 24 | len(header)), header, cmd.body))
