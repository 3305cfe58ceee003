"""RocketMQ's own TCP frames: what Java and C++ clients send decodes, what we answer is what they read, and
bytes that are not a frame raise only WireFormatError, never hang, never take more than they should."""

from __future__ import annotations

import struct
import time
from enum import Enum

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from rocketmesh.remoting import ProtocolError, RemotingCommand, RequestCode, ResponseCode, request, response_to
from rocketmesh.remoting.errors import WireFormatError
from rocketmesh.remoting.protocol.headers import GetRouteInfoRequestHeader, SendMessageRequestHeader
from rocketmesh.remoting.protocol.rocketmq_wire import (
    MAX_FRAME_SIZE,
    SERVER_VERSION,
    FrameDecoder,
    LanguageCode,
    SerializeType,
    WireInfo,
    encode,
)

JSON, ROCKETMQ = SerializeType.JSON, SerializeType.ROCKETMQ


def frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    """A frame laid out by hand from the protocol's description, not by the encoder under test."""
    return struct.pack(">iI", 4 + len(header) + len(body), kind << 24 | len(header)) + header + body


def binary_header(code: int, language: int, version: int, opaque: int, flag: int, remark: bytes,
                  ext: list[tuple[bytes, bytes]]) -> bytes:
    """A ROCKETMQ header by hand: RocketMQSerializable's field order and widths."""
    fields = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext)
    return (struct.pack(">hbhii", code, language, version, opaque, flag) + struct.pack(">i", len(remark)) + remark
            + struct.pack(">i", len(fields)) + fields)


def decode_one(data: bytes) -> tuple[RemotingCommand, WireInfo]:
    decoder = FrameDecoder()
    got = decoder.feed(data)
    assert len(got) == 1 and decoder.buffered == 0
    return got[0]


# --- what real clients send ---------------------------------------------------------------------------------

# The C++ client's heartbeat: jsoncpp's FastWriter (keys sorted, a trailing newline), empty ACL fields, the
# heartbeat data as the body.
CPP_HEARTBEAT_HEADER = (
    b'{"code":34,"extFields":{"AccessKey":"","OnsChannel":"","Signature":""},"flag":0,'
    b'"language":"CPP","opaque":12,"remark":"","version":317}\n'
)
HEARTBEAT_BODY = b'{"clientID":"10.0.0.7@4242","consumerDataSet":[],"producerDataSet":[{"groupName":"pg"}]}'


def test_cpp_heartbeat_json() -> None:
    cmd, wire = decode_one(frame(CPP_HEARTBEAT_HEADER, HEARTBEAT_BODY))
    assert cmd == RemotingCommand(RequestCode.HEART_BEAT, 12, 0, "", {"AccessKey": "", "OnsChannel": "",
                                                                      "Signature": ""}, HEARTBEAT_BODY)
    assert wire == WireInfo(JSON, LanguageCode.CPP, 317)
    assert not cmd.is_oneway and not cmd.is_response


def test_language_sent_as_a_number() -> None:
    header = b'{"code":34,"language":1,"version":317,"opaque":3,"flag":0,"extFields":{}}'
    cmd, wire = decode_one(frame(header))
    assert (cmd.code, cmd.opaque, cmd.ext, cmd.remark) == (34, 3, {}, None)
    assert wire.language is LanguageCode.CPP


def test_send_message_v2_short_keys() -> None:
    ext = {"a": "pg", "b": "TopicTest", "c": "TBW102", "d": "4", "e": "2", "f": "0", "g": "1700000000000",
           "h": "0", "i": "TAGS\x01tagA\x02KEYS\x01k1\x02WAIT\x01true\x02", "j": "0", "k": "false", "m": "false"}
    header = orjson.dumps({"code": 310, "flag": 0, "language": "CPP", "opaque": 99, "remark": "", "version": 317,
                           "extFields": ext})
    cmd, wire = decode_one(frame(header, b"hello"))
    assert (cmd.code, cmd.opaque, cmd.ext, cmd.body) == (RequestCode.SEND_MESSAGE_V2, 99, ext, b"hello")
    assert wire == WireInfo(JSON, LanguageCode.CPP, 317)


def test_numbers_and_booleans_in_ext_fields_read_as_rocketmq_strings() -> None:
    header = (b'{"code":10,"opaque":1,"flag":2,"language":"GO","extFields":{"producerGroup":"pg","topic":"T",'
              b'"queueId":3,"bornTimestamp":1700000000000,"batch":true,"sysFlag":0,"unitMode":false,'
              b'"maxReconsumeTimes":null,"ratio":0.5}}')
    cmd, wire = decode_one(frame(header, b"x"))
    assert cmd.ext == {"producerGroup": "pg", "topic": "T", "queueId": "3", "bornTimestamp": "1700000000000",
                       "batch": "true", "sysFlag": "0", "unitMode": "false", "ratio": "0.5"}
    assert cmd.is_oneway and wire.language is LanguageCode.GO
    # The typed header the ZeroMQ door uses reads those strings as their types.
    h = SendMessageRequestHeader.from_ext(cmd.ext)
    assert (h.producer_group, h.queue_id, h.born_timestamp, h.batch) == ("pg", 3, 1700000000000, True)


def test_java_client_rocketmq_binary_header() -> None:
    # A Java client with rocketmq.serialize.type=ROCKETMQ asking for a route.
    header = binary_header(105, 0, 401, 7, 0, b"", [(b"topic", b"TopicTest")])
    cmd, wire = decode_one(frame(header, kind=1))
    assert cmd == RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, 7, 0, None, {"topic": "TopicTest"}, b"")
    assert wire == WireInfo(ROCKETMQ, LanguageCode.JAVA, 401)
    assert GetRouteInfoRequestHeader.from_ext(cmd.ext).topic == "TopicTest"


def test_rocketmq_binary_header_with_remark_body_and_utf8() -> None:
    header = binary_header(-1, 9, 5, -2, 3, "über".encode(), [(b"k", "värde".encode()), (b"", b"")])
    cmd, wire = decode_one(frame(header, b"\x00\x01", kind=1))
    assert cmd == RemotingCommand(-1, -2, 3, "über", {"k": "värde", "": ""}, b"\x00\x01")
    assert wire == WireInfo(ROCKETMQ, LanguageCode.GO, 5)


def test_bytes_after_binary_ext_fields_are_ignored_as_rocketmq_does() -> None:
    header = binary_header(34, 0, 1, 1, 0, b"", [(b"a", b"b")]) + b"\xde\xad"
    assert decode_one(frame(header, kind=1))[0].ext == {"a": "b"}


def test_languages_rocketmq_does_not_list_are_served() -> None:
    assert decode_one(frame(b'{"code":34,"language":"COBOL"}'))[1].language is None
    assert decode_one(frame(b'{"code":34,"language":99}'))[1].language is None
    assert decode_one(frame(binary_header(34, 77, 0, 0, 0, b"", []), kind=1))[1].language is None
    # No language at all is RocketMQ's default, JAVA; a header with only a code is a command.
    cmd, wire = decode_one(frame(b'{"code":34}'))
    assert cmd == RemotingCommand(34) and wire == WireInfo(JSON, LanguageCode.JAVA, 0)


def test_language_codes_keep_rocketmq_bytes() -> None:
    assert [(lang.name, lang.value) for lang in LanguageCode] == [
        ("JAVA", 0), ("CPP", 1), ("DOTNET", 2), ("PYTHON", 3), ("DELPHI", 4), ("ERLANG", 5), ("RUBY", 6),
        ("OTHER", 7), ("HTTP", 8), ("GO", 9), ("PHP", 10), ("OMS", 11), ("RUST", 12), ("NODE_JS", 13)]
    assert (SerializeType.JSON, SerializeType.ROCKETMQ) == (0, 1)


# --- what we answer -----------------------------------------------------------------------------------------


def test_json_response_as_rocketmq_writes_it() -> None:
    req, _ = decode_one(frame(CPP_HEARTBEAT_HEADER))
    resp = response_to(req, ResponseCode.SUCCESS, None, {"msgId": "0A00", "queueId": 3, "queueOffset": 10,
                                                         "transactionId": None, "batch": False})
    data = encode(resp, JSON)
    total, size = struct.unpack(">iI", data[:8])
    assert total == len(data) - 4 and size >> 24 == 0
    header = orjson.loads(data[8:8 + size])
    assert header == {"code": 0, "flag": 1, "language": "JAVA", "opaque": 12, "serializeTypeCurrentRPC": "JSON",
                      "version": SERVER_VERSION,
                      "extFields": {"msgId": "0A00", "queueId": "3", "queueOffset": "10", "batch": "false"}}
    assert list(header) == sorted(header)  # fastjson's field order
    assert data[8 + size:] == b""


def test_error_response_carries_remark_and_no_ext_fields() -> None:
    req = RemotingCommand(999, 5)
    data = encode(response_to(req, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "request type 999 not supported"))
    header = orjson.loads(data[8:])
    assert header["remark"] == "request type 999 not supported" and "extFields" not in header
    assert (header["code"], header["opaque"], header["flag"]) == (3, 5, 1)


def test_rocketmq_binary_response_bytes() -> None:
    resp = response_to(RemotingCommand(105, 7), ResponseCode.TOPIC_NOT_EXIST, "no route", {"x": 1})
    data = encode(resp, ROCKETMQ, LanguageCode.JAVA, 401)
    expected_header = binary_header(17, 0, 401, 7, 1, b"no route", [(b"x", b"1")])
    assert data == frame(expected_header, kind=1)


class Outcome(str, Enum):
    COMMIT = "COMMIT"


@pytest.mark.parametrize("kind", list(SerializeType))
def test_ext_values_are_written_as_strings(kind: SerializeType) -> None:
    cmd = request(RequestCode.CHECK_TRANSACTION_STATE, {"a": True, "b": 12, "c": None, "d": RequestCode.PULL_MESSAGE,
                                                        "e": Outcome.COMMIT, "f": "s", "g": 1.5, "h": [1, "x"]})
    got, _ = decode_one(encode(cmd, kind))
    assert got.ext == {"a": "true", "b": "12", "d": "11", "e": "COMMIT", "f": "s", "g": "1.5", "h": '[1,"x"]'}


@pytest.mark.parametrize("cmd, kind, what", [
    (RemotingCommand(40000), ROCKETMQ, "code"),
    (RemotingCommand(10, 2**31), JSON, "opaque"),
    (RemotingCommand(10, 0, -(2**31) - 1), ROCKETMQ, "flag"),
    (RemotingCommand(10, ext={"k": b"bytes"}), JSON, "bytes"),
    (RemotingCommand(10, ext={"k": object()}), ROCKETMQ, "object"),
    (RemotingCommand(10, ext={"k" * 40000: "v"}), ROCKETMQ, "key"),
])
def test_unwritable_commands_raise_wire_format_error(cmd: RemotingCommand, kind: SerializeType, what: str) -> None:
    with pytest.raises(WireFormatError, match=what):
        encode(cmd, kind)


def test_version_must_fit_its_field() -> None:
    with pytest.raises(WireFormatError, match="version"):
        encode(RemotingCommand(10), ROCKETMQ, version=70000)
    assert decode_one(encode(RemotingCommand(10), JSON, version=70000))[1].version == 70000


# --- the stream ---------------------------------------------------------------------------------------------


def test_a_truncated_frame_waits_for_the_rest() -> None:
    data = encode(RemotingCommand(11, 1, body=b"x" * 1000), ROCKETMQ) + encode(RemotingCommand(12, 2))
    decoder = FrameDecoder()
    assert decoder.feed(data[:3]) == [] and decoder.buffered == 3
    assert decoder.feed(data[3:500]) == [] and decoder.buffered == 500
    first = decoder.feed(data[500:-1])
    assert [c.opaque for c, _ in first] == [1] and decoder.buffered > 0
    assert [c.opaque for c, _ in decoder.feed(data[-1:])] == [2] and decoder.buffered == 0


def test_a_big_frame_in_small_reads_costs_linear_time() -> None:
    # An 8 MiB body in 1 KiB reads: appended as it comes, not re-read at every read (that would copy ~32 GiB).
    data = encode(RemotingCommand(11, 1, body=b"x" * (8 * 1024 * 1024)))
    decoder, got, began = FrameDecoder(), [], time.perf_counter()
    for i in range(0, len(data), 1024):
        got += decoder.feed(data[i:i + 1024])
    assert time.perf_counter() - began < 2.0
    assert [(c.opaque, len(c.body)) for c, _ in got] == [(1, 8 * 1024 * 1024)]


def test_many_frames_in_one_chunk_and_buffer_like_chunks() -> None:
    cmds = [RemotingCommand(10 + i, i, 0, None, {"i": str(i)}, bytes([i]) * i) for i in range(20)]
    data = b"".join(encode(c, SerializeType(i % 2)) for i, c in enumerate(cmds))
    assert [c for c, _ in FrameDecoder().feed(data)] == cmds
    decoder = FrameDecoder()
    got = decoder.feed(bytearray(data[:100])) + decoder.feed(memoryview(data)[100:])
    assert [c for c, _ in got] == cmds
    assert all(type(c.body) is bytes for c, _ in got)


# --- bad input ----------------------------------------------------------------------------------------------

JSON_OK = b'{"code":34,"opaque":5,"flag":0}'


@pytest.mark.parametrize("data, message", [
    (struct.pack(">i", -1) + b"\x00" * 8, "frame length -1"),
    (struct.pack(">i", -(2**31)), "frame length -2147483648"),
    (struct.pack(">i", 2), "less than the 4-byte"),
    (struct.pack(">i", MAX_FRAME_SIZE - 3), "frame of 16777217 bytes exceeds the maximum 16777216"),
    (struct.pack(">iI", 10, 7) + b"{}", "header length 7 runs past the frame's 6 bytes"),
    (struct.pack(">iI", 10, 0xFFFFFF), "header length 16777215"),
    (frame(JSON_OK, kind=2), "unknown header serialize type 2"),
    (frame(JSON_OK, kind=0xFF), "unknown header serialize type 255"),
    (frame(b"not json"), "not valid JSON"),
    (frame(b'{"code":34,'), "not valid JSON"),
    (frame(b"\xff\xfe"), "not valid JSON"),
    (frame(b"[34]"), "is a list, not an object"),
    (frame(b'{"opaque":5}'), "no 32-bit integer 'code'"),
    (frame(b'{"code":"34"}'), "no 32-bit integer 'code'"),
    (frame(b'{"code":true}'), "no 32-bit integer 'code'"),
    (frame(b'{"code":34,"opaque":4294967296}'), "'opaque' is not a 32-bit integer"),
    (frame(b'{"code":34,"flag":"0"}'), "'flag' is not a 32-bit integer"),
    (frame(b'{"code":34,"version":1.5}'), "'version' is not a 32-bit integer"),
    (frame(b'{"code":34,"remark":7}'), "'remark' is a int"),
    (frame(b'{"code":34,"extFields":["a"]}'), "'extFields' is a list"),
    (frame(b'{"code":34,"language":{"name":"CPP"}}'), "'language' is a dict"),
    (frame(b"", kind=1), "shorter than its fixed 21"),
    (frame(b"\x00" * 20, kind=1), "shorter than its fixed 21"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [])[:13] + struct.pack(">ii", -1, 0), kind=1), "remark length -1"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [])[:13] + struct.pack(">ii", 9, 0), kind=1), "remark length 9"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [])[:17] + struct.pack(">i", -4), kind=1), "extFields length -4"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [])[:17] + struct.pack(">i", 1), kind=1), "extFields length 1"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [])[:17] + struct.pack(">ib", 1, 0), kind=1), "inside a key length"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [])[:17] + struct.pack(">ih", 2, -3), kind=1), "key length -3"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [])[:17] + struct.pack(">ihi", 6, 0, 5), kind=1),
     "value length 5"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [])[:17] + struct.pack(">ihi", 6, 0, -1), kind=1),
     "value length -1"),
    (frame(binary_header(34, 0, 0, 5, 0, b"\xc3", []), kind=1), "remark is not UTF-8"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [(b"\xff", b"v")]), kind=1), "key is not UTF-8"),
    (frame(binary_header(34, 0, 0, 5, 0, b"", [(b"k", b"\xed\xa0\x80")]), kind=1), "value is not UTF-8"),
])
def test_bad_input_raises_a_wire_format_error_naming_it(data: bytes, message: str) -> None:
    decoder = FrameDecoder()
    with pytest.raises(WireFormatError, match=message) as info:
        decoder.feed(data)
    assert isinstance(info.value, ProtocolError)
    # The stream has lost its framing: the decoder stays broken, whatever comes next.
    with pytest.raises(WireFormatError):
        decoder.feed(encode(RemotingCommand(34)))


def test_errors_after_the_fixed_fields_keep_opaque_and_flag() -> None:
    with pytest.raises(WireFormatError) as info:
        FrameDecoder().feed(frame(b'{"code":34,"opaque":5,"flag":2,"remark":[]}'))
    assert (info.value.opaque, info.value.flag) == (5, 2)
    with pytest.raises(WireFormatError) as info:
        FrameDecoder().feed(frame(binary_header(34, 0, 0, 6, 1, b"\xc3", []), kind=1))
    assert (info.value.opaque, info.value.flag) == (6, 1)


def test_a_bad_prefix_is_refused_before_its_frame_arrives() -> None:
    # A peer announcing 10 MiB with an unknown serialize type is refused on its first 8 bytes, not buffered.
    with pytest.raises(WireFormatError, match="serialize type 3"):
        FrameDecoder().feed(struct.pack(">iI", 10 * 1024 * 1024, 3 << 24 | 10))

@pytest.mark.parametrize("extra, accepted", [(0, True), (1, False)])
def test_max_frame_size_counts_the_whole_frame(extra: int, accepted: bool) -> None:
    # RocketMQ's limit counts the total length field too: a 1024-byte frame passes a 1024 maximum.
    header = b'{"code":34}'
    data = frame(header, b"x" * (1024 - 8 - len(header) + extra))
    assert len(data) == 1024 + extra
    decoder = FrameDecoder(max_frame_size=1024)
    if accepted:
        assert len(decoder.feed(data)) == 1
    else:
        with pytest.raises(WireFormatError, match=f"frame of {1024 + extra} bytes exceeds the maximum 1024"):
            decoder.feed(data[:4])


# --- generated input ----------------------------------------------------------------------------------------

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
commands = st.builds(
    RemotingCommand,
    code=int16,
    opaque=int32,
    flag=int32,
    # RocketMQ's binary header has no empty remark (length 0 is null): the generated ones are null or text.
    remark=st.none() | text.filter(bool),
    ext=st.dictionaries(text, text, max_size=6),
    body=st.binary(max_size=256),
)


@given(commands, st.sampled_from(list(SerializeType)), st.sampled_from(list(LanguageCode)), int16)
def test_any_command_survives_encode_and_decode(cmd: RemotingCommand, kind: SerializeType, language: LanguageCode,
                                                version: int) -> None:
    got = FrameDecoder().feed(encode(cmd, kind, language, version))
    assert got == [(cmd, WireInfo(kind, language, version))]


@given(st.lists(st.tuples(commands, st.sampled_from(list(SerializeType))), min_size=1, max_size=5),
       st.lists(st.integers(1, 64), max_size=40))
def test_any_chunking_of_a_stream_gives_the_same_commands(cmds: list[tuple[RemotingCommand, SerializeType]],
                                                          cuts: list[int]) -> None:
    data = b"".join(encode(c, k) for c, k in cmds)
    decoder, got, pos = FrameDecoder(), [], 0
    for size in cuts + [len(data)]:
        got += decoder.feed(data[pos:pos + size])
        pos += size
    assert [(c, w.serialize_type) for c, w in got] == cmds and decoder.buffered == 0


def feed_all(data: bytes, cuts: list[int], max_frame_size: int = MAX_FRAME_SIZE) -> None:
    """Feed ``data`` in chunks of the given sizes; whatever decodes must be well typed."""
    decoder, pos = FrameDecoder(max_frame_size), 0
    try:
        for size in cuts + [len(data)]:
            for cmd, wire in decoder.feed(data[pos:pos + size]):
                assert type(cmd.code) is int and type(cmd.opaque) is int and type(cmd.flag) is int
                assert cmd.remark is None or type(cmd.remark) is str
                assert all(type(k) is str and type(v) is str for k, v in cmd.ext.items())
                assert type(cmd.body) is bytes and type(wire.version) is int
            pos += size
    except WireFormatError:
        return
    assert decoder.buffered <= len(data)


@settings(max_examples=500)
@given(st.binary(max_size=200), st.lists(st.integers(1, 16), max_size=10))
def test_random_bytes_raise_only_wire_format_error(data: bytes, cuts: list[int]) -> None:
    feed_all(data, cuts)


@settings(max_examples=500)
@given(st.sampled_from([0, 1, 2]), st.binary(max_size=120), st.binary(max_size=20), st.integers(-8, 8))
def test_random_headers_behind_a_valid_prefix_raise_only_wire_format_error(kind: int, header: bytes, body: bytes,
                                                                           skew: int) -> None:
    # A plausible prefix gets random bytes past the framing checks and into the header decoders.
    size = max(0, len(header) + skew)
    feed_all(struct.pack(">iI", 4 + len(header) + len(body), kind << 24 | size) + header + body, [], 4096)


json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False,
                                                                                     allow_infinity=False) | text
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(text, inner, max_size=3), max_leaves=4)
header_fields = st.sampled_from(["code", "language", "version", "opaque", "flag", "remark", "extFields",
                                 "serializeTypeCurrentRPC", "other"])


@settings(max_examples=200)
@given(st.dictionaries(header_fields, json_values | st.dictionaries(text, json_values, max_size=4), max_size=9))
def test_json_headers_of_any_shape_raise_only_wire_format_error(header: dict) -> None:
    feed_all(frame(orjson.dumps(header)), [])


@settings(max_examples=300)
@given(int16, st.integers(-128, 127), int16, int32, int32, st.binary(max_size=12),
       st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=6)), max_size=4), st.integers(0, 40))
def test_binary_headers_with_random_utf8_and_cuts_raise_only_wire_format_error(
        code: int, language: int, version: int, opaque: int, flag: int, remark: bytes,
        ext: list[tuple[bytes, bytes]], cut: int) -> None:
    header = binary_header(code, language, version, opaque, flag, remark, ext)
    feed_all(frame(header[:max(0, len(header) - cut)], kind=1), [])
