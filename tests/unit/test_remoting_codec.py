"""The wire codec: round trips, and garbage never raising anything but ProtocolError."""

from __future__ import annotations

import contextlib

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from rocketmesh.remoting import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    ProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    decode,
    pack_frame,
    request,
    response_to,
)
from rocketmesh.remoting.addr import parse_addr_list, split_addr, tcp_endpoint
from rocketmesh.remoting.errors import RemotingConnectError
from rocketmesh.remoting.protocol.codes import code_name

# JSON values as orjson round-trips them: no NaN/inf, no lone surrogates,
# integers within 64 bits.
json_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_text, inner, max_size=4),
    max_leaves=12,
)
int32 = st.integers(-(2**31), 2**31 - 1)

commands = st.builds(
    RemotingCommand,
    code=int32,
    opaque=int32,
    flag=st.integers(0, 3),
    remark=st.none() | json_text,
    ext=st.dictionaries(json_text, json_values, max_size=6),
    body=st.binary(max_size=256),
    traceparent=st.none() | st.from_regex(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]", fullmatch=True),
)


@given(commands)
def test_round_trip(cmd: RemotingCommand) -> None:
    frames = cmd.encode()
    assert len(frames) == 1 and isinstance(frames[0], bytes)
    assert decode(frames) == cmd


@given(commands)
def test_header_is_the_documented_json_object(cmd: RemotingCommand) -> None:
    frame = cmd.encode()[0]
    size = int.from_bytes(frame[:4], "big")
    header = orjson.loads(frame[4:4 + size])
    assert frame[4 + size:] == cmd.body
    expected = {"code", "opaque", "flag", "remark", "ext"} | ({"traceparent"} if cmd.traceparent else set())
    assert set(header) == expected
    assert header["code"] == cmd.code and header["opaque"] == cmd.opaque


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=64), max_size=4))
def test_garbage_frames_raise_only_protocol_error(frames: list[bytes]) -> None:
    # Anything but ProtocolError escaping decode fails the test.
    with contextlib.suppress(ProtocolError):
        decode(frames)


header_ish = st.dictionaries(
    st.sampled_from(["code", "opaque", "flag", "remark", "ext", "traceparent", "x"]), json_values, max_size=7
)


@settings(max_examples=300)
@given(header_ish, st.binary(max_size=16))
def test_json_headers_of_any_shape_raise_only_protocol_error(header: dict, body: bytes) -> None:
    try:
        cmd = decode([pack_frame(orjson.dumps(header), body)])
    except ProtocolError:
        return
    # Whatever decodes must have the documented types.
    assert type(cmd.code) is int and type(cmd.opaque) is int and type(cmd.flag) is int
    assert isinstance(cmd.ext, dict) and cmd.body == body


@given(st.one_of(st.none(), st.integers(), st.text(), st.lists(st.integers(), max_size=3)))
def test_non_frame_inputs_raise_protocol_error(frames: object) -> None:
    with pytest.raises(ProtocolError):
        decode(frames)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "frames, opaque",
    [
        ([pack_frame(b"{}")], None),
        ([pack_frame(b"{}"), b""], None),
        ([pack_frame(b"not json")], None),
        ([pack_frame(b"[1, 2]")], None),
        ([pack_frame(b'{"code": 10}')], None),
        ([pack_frame(b'{"opaque": 5}')], 5),
        ([pack_frame(b'{"code": "10", "opaque": 5}')], 5),
        ([pack_frame(b'{"code": 10, "opaque": true}')], None),
        ([pack_frame(b'{"code": 10, "opaque": 5, "ext": []}')], 5),
        ([pack_frame(b'{"code": 10, "opaque": 5, "remark": 3}')], 5),
        ([pack_frame(b'{"code": 10, "opaque": 5, "flag": "x"}')], 5),
        ([pack_frame(b'{"code": 10, "opaque": 5, "traceparent": 1}')], 5),
        ([b'{"code": 10, "opaque": 5}', b"two frames, as the wire was once"], None),
        ([b"\x00\x00\x00"], None),  # shorter than the header length field
        ([b"\x00\x00\x00\x40{}"], None),  # a header length past the frame's end
        ([b"\x01\x00\x00\x02{}"], None),  # serialize type 1 (RocketMQ's binary headers): not spoken here
        (["text frame"], None),
        ([7], None),
    ],
)
def test_malformed_frames_are_typed_and_keep_the_opaque(frames: list, opaque: int | None) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(frames)
    assert info.value.opaque == opaque


def test_oversized_header_is_refused() -> None:
    cmd = request(RequestCode.SEND_MESSAGE, {"k": "x" * 1000})
    with pytest.raises(ProtocolError, match="exceeds"):
        decode(cmd.encode(), max_header_size=500)
    assert decode(cmd.encode(), max_header_size=5000).ext == cmd.ext


def test_unencodable_ext_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        request(RequestCode.SEND_MESSAGE, {"big": 2**70}).encode()


def test_minimal_header_gets_defaults() -> None:
    cmd = decode([pack_frame(b'{"code": 10, "opaque": 7}', b"abc")])
    assert cmd == RemotingCommand(10, 7, 0, None, {}, b"abc", None)


def test_buffer_frames_are_accepted() -> None:
    frames = request(RequestCode.PULL_MESSAGE, body=b"xyz").encode()
    assert decode([bytearray(frames[0])]).body == b"xyz"
    assert decode([memoryview(frames[0])]).body == b"xyz"


def test_flags_and_helpers() -> None:
    req = request(RequestCode.HEART_BEAT, {"clientID": "c1"}, oneway=True)
    assert req.is_oneway and not req.is_response and req.flag == ONEWAY_FLAG
    req.opaque = 42
    resp = response_to(req, ResponseCode.SYSTEM_BUSY, "busy", {"a": 1}, b"b")
    assert resp.is_response and resp.opaque == 42 and resp.flag == RESPONSE_FLAG
    assert (resp.code, resp.remark, resp.ext, resp.body) == (ResponseCode.SYSTEM_BUSY, "busy", {"a": 1}, b"b")


def test_codes_keep_rocketmq_numbers() -> None:
    assert RequestCode.SEND_MESSAGE == 10 and RequestCode.PULL_MESSAGE == 11
    assert RequestCode.HEART_BEAT == RequestCode.HEARTBEAT == 34
    assert RequestCode.REGISTER_BROKER == 103 and RequestCode.GET_ROUTEINFO_BY_TOPIC == 105
    assert RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER == 206 and RequestCode.SEND_BATCH_MESSAGE == 320
    assert RequestCode.SEND_MESSAGE_V2 == 310 and RequestCode.CHECK_TRANSACTION_STATE == 39
    assert ResponseCode.SUCCESS == 0 and ResponseCode.SYSTEM_BUSY == 2
    assert ResponseCode.FLUSH_DISK_TIMEOUT == 10 and ResponseCode.PULL_OFFSET_MOVED == 21
    assert ResponseCode.CONSUMER_NOT_ONLINE == 206 and ResponseCode.NO_MESSAGE == 208
    assert code_name(17, response=True) == "TOPIC_NOT_EXIST" and code_name(9999, response=False) == "9999"


def test_addresses() -> None:
    assert split_addr("10.0.0.1:9876") == ("10.0.0.1", 9876)
    assert split_addr("[::1]:9876") == ("::1", 9876)
    assert tcp_endpoint("localhost:10911") == "tcp://localhost:10911"
    assert tcp_endpoint("[::1]:10911") == "tcp://[::1]:10911"
    assert parse_addr_list(" a:1; b:2;;a:1 ") == ["a:1", "b:2"]
    assert parse_addr_list("") == [] and parse_addr_list(None) == []
    for bad in ["", "host", ":80", "host:", "host:x", "host:0", "host:70000", "a b:1"]:
        with pytest.raises(RemotingConnectError):
            split_addr(bad)
    with pytest.raises(RemotingConnectError):
        parse_addr_list("a:1;oops")
