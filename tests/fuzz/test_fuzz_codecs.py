"""Unit-level fuzz of everything that parses bytes or text a peer sent: the wire command decoder, RocketMQ's
TCP frame decoder, the message and batch codecs, the properties encoding, request headers, and the SQL92
selector compiler.

Each target feeds random and structured-but-wrong input and accepts exactly one outcome besides
success: the parser's own typed error (ProtocolError, WireFormatError, CorruptRecord, HeaderError,
FilterSyntaxError). Anything else escaping (a struct.error, an IndexError, a UnicodeDecodeError) is a bug: callers catch
the typed error to answer the peer, so a stray one turns bad input into a traceback. A hang shows up
as the target blowing the time budget of the whole directory.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from typing import Any

import orjson
from doorpeer import DOOR_FRAME_LIMIT, Malformed, Request, door_requests, malformed_inputs
from fuzzkit import Tally, fuzz_settings
from hypothesis import example, given, strategies as st

from rocketmesh.filter import FilterSyntaxError, build_subscription, compile_sql
from rocketmesh.model.codec import (
    BATCH_ITEM_HEADER,
    MESSAGE_MAGIC_CODE,
    RECORD_HEADER,
    CorruptRecord,
    decode_batch,
    decode_properties,
    decode_record,
    decode_records,
    encode_batch,
    encode_host,
    encode_properties,
)
from rocketmesh.model.message import Message
from rocketmesh.remoting import ProtocolError, RemotingCommand, decode, pack_frame
from rocketmesh.remoting.errors import WireFormatError
from rocketmesh.remoting.protocol import headers as request_headers
from rocketmesh.remoting.protocol.headers import HeaderError
from rocketmesh.remoting.protocol.rocketmq_wire import FrameDecoder, SerializeType, WireInfo

# --- building blocks -----------------------------------------------------------------------------

#: Any JSON value, nested a little: what a hostile header may hold where a typed field belongs.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
#: Text with the property separators and the other control characters a property string must survive.
hostile_text = st.text(alphabet=st.sampled_from("ab=:;%\x00\x01\x02\x7f é中\U0001f600"), max_size=30)
#: Every request header dataclass of libs/remoting/protocol/headers.py: what the broker's handlers build from ext.
HEADER_CLASSES = sorted(
    (cls for cls in vars(request_headers).values()
     if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == request_headers.__name__),
    key=lambda cls: cls.__name__,
)


def _header(**fields: Any) -> bytes:
    base: dict[str, Any] = {"code": 10, "opaque": 1, "flag": 0, "remark": None, "ext": {}}
    base.update(fields)
    return orjson.dumps(base)


# --- the wire command decoder ----------------------------------------------------------------------

frames_strategy = st.lists(
    st.binary(max_size=64)
    | st.builds(lambda h, b: pack_frame(h, b),
                st.builds(_header, ext=st.dictionaries(st.text(max_size=8), json_values, max_size=4)),
                st.binary(max_size=8))
    | st.builds(_header, ext=st.dictionaries(st.text(max_size=8), json_values, max_size=4))
    | st.integers() | st.none() | st.text(max_size=8) | st.builds(bytearray, st.binary(max_size=8)),
    max_size=4,
)


def test_decode_random_frames_raises_only_protocol_error(reliability) -> None:
    tally = Tally()

    @fuzz_settings(300)
    @example([b"", b""])
    @example([b"null", b""])
    @example([b"[]", b""])
    @example([b'{"opaque": 1}', 7])
    @example([pack_frame(_header(opaque=True))])
    @example([pack_frame(_header(opaque=2**64 - 1, code=-1))])
    @example([pack_frame(b'{"opaque": 1e400}')])
    @example([b"\xff\xff\xff\xff{}"])
    @example([b"\x00\x00\x00\x02{}"])
    @example([b'{"opaque": 1e400}', b""])
    @given(frames_strategy)
    @tally.counted
    def run(frames: list[Any]) -> None:
        try:
            cmd = decode(frames)
        except ProtocolError:
            return
        assert isinstance(cmd, RemotingCommand)
        assert type(cmd.code) is int and type(cmd.opaque) is int and type(cmd.flag) is int
        assert isinstance(cmd.ext, dict) and isinstance(cmd.body, bytes)

    run()
    reliability.fuzz("wire decoder: random frames", inputs=tally.inputs,
                     note="any frame count and type, JSON and non-JSON headers: ProtocolError or a typed command")


def test_decode_wrong_header_types_raises_only_protocol_error(reliability) -> None:
    tally = Tally()
    field_names = st.sampled_from(["code", "opaque", "flag", "remark", "ext", "traceparent"])

    @fuzz_settings(200)
    @given(st.dictionaries(field_names | st.text(max_size=6), json_values, max_size=7), st.binary(max_size=16))
    @tally.counted
    def run(header: dict[str, Any], body: bytes) -> None:
        raw = orjson.dumps(header)
        try:
            cmd = decode([pack_frame(raw, body)])
        except ProtocolError as exc:
            # The error keeps what it could read, so a server can still answer: never a wrong type.
            assert exc.opaque is None or type(exc.opaque) is int
            assert exc.flag is None or type(exc.flag) is int
            return
        # Whatever decodes, re-encodes to the same command.
        assert decode(cmd.encode()) == cmd

    run()
    reliability.fuzz("wire decoder: header fields of wrong types", inputs=tally.inputs,
                     note="every header field as every JSON type; ProtocolError keeps only integer opaque/flag")


def test_decode_refuses_oversized_header() -> None:
    huge = _header(remark="x" * (300 * 1024))
    try:
        decode([pack_frame(huge)])
    except ProtocolError as exc:
        assert "exceeds" in str(exc)
    else:
        raise AssertionError("a header past MAX_HEADER_SIZE was decoded")


# --- RocketMQ's TCP frames (rocketmq_wire) ---------------------------------------------------------

#: Streams as a TCP door reads them: well-formed requests, then perhaps bytes that are not a frame (or a frame cut
#: short: the stream ends inside it).
rocketmq_streams = st.tuples(st.lists(door_requests([10, 34, 105, 310], st.binary(max_size=64)), max_size=3),
                             st.none() | malformed_inputs)


def _check_read_as_sent(cmd: RemotingCommand, wire: WireInfo, req: Request, opaque: int) -> None:
    """``cmd`` is ``req`` as RocketMQ keeps a request: every extFields value a string, null ones absent."""
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.body) == (req.code, opaque, req.flag, req.body)
    assert wire.serialize_type == req.serialize_type and type(wire.version) is int
    assert cmd.remark == req.remark
    # JSON has no infinity: a JSON header carries one as null (orjson), which reads as absent.
    sent_ext = {k: v for k, v in req.ext.items() if v is not None and not (
        req.serialize_type == SerializeType.JSON and isinstance(v, float) and not math.isfinite(v))}
    assert set(cmd.ext) == set(sent_ext)
    for key, sent in sent_ext.items():
        read = cmd.ext[key]
        if type(sent) is str:
            assert read == sent
        elif isinstance(sent, bool):
            assert read == ("true" if sent else "false")
        elif isinstance(sent, int):
            assert read == str(sent)
        else:  # a float, a list, an object: some text
            assert type(read) is str


def test_rocketmq_frame_decoder_reads_a_stream_up_to_its_bad_bytes(reliability) -> None:
    tally = Tally()

    @fuzz_settings(200)
    @given(rocketmq_streams, st.lists(st.integers(1, 64), min_size=1, max_size=4))
    @tally.counted
    def run(stream: tuple[list[Request], Malformed | None], cuts: list[int]) -> None:
        reqs, bad = stream
        data = b"".join(req.frame(opaque) for opaque, req in enumerate(reqs, start=1)) + (bad.data if bad else b"")
        decoder = FrameDecoder(DOOR_FRAME_LIMIT)
        got: list[tuple[RemotingCommand, WireInfo]] = []
        error: WireFormatError | None = None
        pos = i = 0
        while pos < len(data) and error is None:
            size = cuts[i % len(cuts)] if i < 64 else len(data)  # a long header's tail in one piece: time
            try:
                got += decoder.feed(data[pos:pos + size])
            except WireFormatError as exc:
                error = exc
            pos, i = pos + size, i + 1
        # Whatever was read is what was sent, in order; a chunk that held bad bytes gives nothing.
        assert len(got) <= len(reqs)
        for (cmd, wire), (opaque, req) in zip(got, enumerate(reqs, start=1), strict=False):
            _check_read_as_sent(cmd, wire, req, opaque)
        if bad is None or bad.then_close:
            assert error is None and len(got) == len(reqs)
            assert decoder.buffered == (len(bad.data) if bad else 0)
        else:
            assert error is not None, f"{bad.what} was read as frames"
            # The stream has lost its framing: the decoder refuses everything after.
            try:
                decoder.feed(b"")
            except WireFormatError as again:
                assert again is error
            else:
                raise AssertionError("the decoder took bytes after bad ones")

    run()
    reliability.fuzz("RocketMQ frame decoder: streams", inputs=tally.inputs,
                     note="JSON (ext values of any JSON type) and ROCKETMQ requests, then negative and huge lengths, "
                          "bad header lengths, serialize types and headers, or a cut frame, fed in random pieces: "
                          "requests read as sent, WireFormatError only, nothing taken after bad bytes")


# --- request headers (ext) -------------------------------------------------------------------------

def test_from_ext_raises_only_header_error(reliability) -> None:
    tally = Tally()
    camel = [f.name for cls in HEADER_CLASSES for f in dataclasses.fields(cls)]
    keys = st.sampled_from(sorted({request_headers.camel_case(n) for n in camel})) | st.text(max_size=6)

    @fuzz_settings(250)
    @given(st.sampled_from(HEADER_CLASSES), st.dictionaries(keys, json_values, max_size=8) | json_values)
    @tally.counted
    def run(cls: type, ext: Any) -> None:
        try:
            header = cls.from_ext(ext)
        except HeaderError:
            return
        assert isinstance(header, cls)

    run()
    reliability.fuzz("request headers (ext -> typed header)", inputs=tally.inputs,
                     note=f"{len(HEADER_CLASSES)} header classes, every field as every JSON type: "
                          "HeaderError naming it")


# --- properties ------------------------------------------------------------------------------------

def test_properties_round_trip_or_typed_error(reliability) -> None:
    tally = Tally()

    @fuzz_settings(300)
    @example(b"\xff\xfe")
    @example(b"a\x01b\x01c\x02\x02\x01")
    @given(st.binary(max_size=64) | st.builds(lambda t: t.encode(), hostile_text))
    @tally.counted
    def run(raw: bytes) -> None:
        try:
            props = decode_properties(raw)
        except CorruptRecord:
            return
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())
        # A name never holds a separator once decoded; a name-value pair encodes back to what it decoded from.
        assert not any("\x01" in k or "\x02" in k for k in props)
        assert decode_properties(encode_properties(props)) == props or any("\x01" in v for v in props.values())

    run()
    reliability.fuzz("properties decoding", inputs=tally.inputs,
                     note="random bytes, invalid UTF-8, stray \\x01/\\x02 separators")


# --- commitlog records (pull response bodies) ----------------------------------------------------

def _record(body: bytes, topic: bytes, props: bytes) -> bytes:
    total = RECORD_HEADER.size + len(body) + 1 + len(topic) + 2 + len(props)
    host = encode_host("127.0.0.1", 10911)
    head = RECORD_HEADER.pack(total, MESSAGE_MAGIC_CODE, 0, 0, 0, 0, 0, 0, 0, host, 0, host, 0, 0, len(body))
    return head + body + bytes([len(topic)]) + topic + struct.pack(">H", len(props)) + props


def _mutations(data: bytes) -> st.SearchStrategy[bytes]:
    """``data`` cut short, with bytes overwritten, or both: a record that nearly parses."""
    n = len(data)
    return st.tuples(st.integers(0, n), st.lists(st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, 255)),
                                                  max_size=4)).map(lambda cut: _mutate(data, *cut))


def _mutate(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data[:cut] if cut else data)
    for pos, value in flips:
        if pos < len(out):
            out[pos] = value
    return bytes(out)


records = st.builds(_record, st.binary(max_size=16), st.text(max_size=8).map(str.encode),
                    st.builds(lambda t: t.encode(), hostile_text))


def test_record_decoders_raise_only_corrupt_record(reliability) -> None:
    tally = Tally()

    @fuzz_settings(500)
    @example(_record(b"x", b"T", b"\xff"))  # invalid UTF-8 properties
    @example(_record(b"x", b"\xff", b""))  # invalid UTF-8 topic
    @example(_record(b"x", b"T", b"")[:-3] + b"\x09")  # topic length past the record's end
    @example(_record(b"x", b"T", b"a\x01b\x01c\x02\x02"))  # a value holding \x01: one reading, not two
    @given(st.binary(max_size=128) | records.flatmap(_mutations))
    @tally.counted
    def run(data: bytes) -> None:
        try:
            one = decode_record(data)
        except CorruptRecord:
            one = None
        if one is not None:  # a record it accepts lies within the input and has a topic and a body
            assert isinstance(one.topic, str) and isinstance(one.body, bytes) and one.store_size <= len(data)
        try:
            lazy = decode_records(data)
        except CorruptRecord:
            return
        pos = 0
        for m in lazy:
            assert isinstance(m.topic, str) and isinstance(m.body, bytes)
            # The properties a consumer reads (split lazily) are what the broker's filter reads (decode_properties).
            try:
                eager = decode_record(data, pos).properties
            except CorruptRecord:
                eager = None
            try:
                assert m.properties == eager
            except CorruptRecord:
                assert eager is None
            pos += m.store_size

    run()
    reliability.fuzz("commitlog record decoders", inputs=tally.inputs,
                     note="random bytes, truncated and byte-flipped records: CorruptRecord only")


# --- batches (SEND_BATCH_MESSAGE bodies) ---------------------------------------------------------

messages = st.builds(
    lambda body, props, flag: Message("T", body, properties=props, flag=flag),
    st.binary(max_size=16),
    st.dictionaries(st.text(alphabet="abcXYZ_", min_size=1, max_size=6), st.text(alphabet="vw1é", max_size=6),
                    max_size=3),
    st.integers(-(2**31), 2**31 - 1),
)


def test_batch_decoder_raises_only_corrupt_record(reliability) -> None:
    tally = Tally()

    @fuzz_settings(500)
    @example(BATCH_ITEM_HEADER.pack(2**31 - 1, 0, 0, 0, 2**31 - 1))  # huge declared total and body
    @example(BATCH_ITEM_HEADER.pack(22, 0, 0, 0, -5) + b"\x00\x00")  # negative body length
    @example(BATCH_ITEM_HEADER.pack(22, 0, 0, 0, 0))  # properties length missing
    # a property name without its \x01: dropped, not read as a name with an empty value
    @example(b"\x00\x00\x00\x1d" + bytes(17) + b"\x07X\x01\x02XX\x00\x02")
    @example(b"\x00\x00\x00\x1d" + bytes(17) + b"\x07" + bytes(6) + b"\x01")  # a last pair without its \x02
    @given(st.binary(max_size=96) | st.lists(messages, min_size=1, max_size=4).map(encode_batch).flatmap(_mutations))
    @tally.counted
    def run(body: bytes) -> None:
        try:
            out = decode_batch("T", body)
        except CorruptRecord:
            return
        # Re-encoded, each message takes no more room than it did, but for the \x02 a last property may lack
        # (RocketMQ reads a final name\x01value without it, and so do we).
        assert (sum(20 + len(m.body) + 2 + len(encode_properties(m.properties)) for m in out)
                <= len(body) + len(out)) or not out

    run()
    reliability.fuzz("batch decoder", inputs=tally.inputs,
                     note="random bytes, truncated batches, huge and negative declared lengths: CorruptRecord only")


def test_truncated_batch_is_refused_or_a_whole_prefix() -> None:
    """A batch cut anywhere decodes to the messages wholly before the cut, or is refused: never a torn message."""
    tally = Tally()

    @fuzz_settings(200)
    @given(st.lists(messages, min_size=1, max_size=4), st.data())
    @tally.counted
    def run(msgs: list[Message], data: st.DataObject) -> None:
        body = encode_batch(msgs)
        cut = data.draw(st.integers(0, len(body)))
        try:
            out = decode_batch("T", body[:cut])
        except CorruptRecord:
            return
        def fields(ms: list[Message]) -> list[tuple[bytes, dict[str, str], int]]:
            return [(m.body, m.properties, m.flag) for m in ms]
        assert fields(out) == fields(msgs[:len(out)])
        assert len(encode_batch(out)) == cut

    run()


# --- SQL92 selectors and subscriptions -------------------------------------------------------------

sql_tokens = st.sampled_from([
    "a", "b", "TAGS", "$x", "_y", "1", "-2", "3.5", ".5", "1E400", "9999999999999999999999", "'s'", "'it''s'", "'",
    "=", "<>", ">", ">=", "<", "<=", "AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE", "(", ")",
    ",", "--", "/*", "*/", "+", "-", "*", "\x00", "\x01", "é",
])
sql_texts = st.lists(sql_tokens, max_size=14).map(" ".join) | st.text(max_size=40)


def test_sql92_compiler_raises_only_filter_syntax_error(reliability) -> None:
    tally = Tally()

    @fuzz_settings(600)
    @example("(" * 5000 + "a = 1" + ")" * 5000, {"a": "1"})  # deep nesting: refused, not a RecursionError
    @example("NOT " * 5000 + "a = 1", {"a": "1"})
    @example("a IN (" + ", ".join(["'x'"] * 2000) + ")", {"a": "1"})
    @example("a BETWEEN 1 AND", {"a": "1"})
    @example("'unterminated", {"a": "1"})
    @example("/* unterminated comment", {"a": "1"})
    @given(sql_texts, st.dictionaries(st.sampled_from(["a", "b", "TAGS", "x"]), hostile_text, max_size=3))
    @tally.counted
    def run(text: str, props: dict[str, str]) -> None:
        try:
            selector = compile_sql(text)
        except FilterSyntaxError as exc:
            assert str(exc)  # says what is wrong
            return
        assert selector.evaluate(props) in (True, False)  # never raises
        assert selector.evaluate(None) in (True, False)

    run()
    reliability.fuzz("SQL92 selector compiler", inputs=tally.inputs,
                     note="token soup, random text, deep nesting, unterminated strings and comments")


def test_subscription_builder_raises_only_filter_syntax_error(reliability) -> None:
    tally = Tally()

    @fuzz_settings(300)
    @given(st.none() | st.sampled_from(["TAG", "SQL92", "sql92", "", "XPATH"]) | st.text(max_size=6),
           st.none() | sql_texts | st.just("||") | st.integers() | st.lists(st.text(max_size=3), max_size=2))
    @tally.counted
    def run(etype: Any, expression: Any) -> None:
        try:
            build_subscription("T", expression, etype)
        except FilterSyntaxError:
            return

    run()
    reliability.fuzz("subscription expressions (TAG / SQL92)", inputs=tally.inputs,
                     note="unknown types, non-string expressions, empty tag lists, bad SQL92")


def test_client_sends_only_properties_that_read_back_the_same(reliability) -> None:
    """The producer's check refuses exactly the properties the wire encoding would mangle: whatever it lets
    through reads back (as the broker's filter and the consumer read it) as the same name-value pairs."""
    from rocketmesh.client.errors import MQClientError
    from rocketmesh.client.validators import check_message

    tally = Tally()

    @fuzz_settings(300)
    @example({"a": "x\x02DELAY\x013"})  # a value that would set a delay level
    @example({"k\x01": "v"})
    @given(st.dictionaries(hostile_text.filter(bool), hostile_text, max_size=4))
    @tally.counted
    def run(props: dict[str, str]) -> None:
        msg = Message("FuzzTopic", b"body", properties=dict(props))
        try:
            check_message(msg, 4 * 1024 * 1024)
        except MQClientError as exc:
            assert "separators" in str(exc)
            assert any("\x01" in t or "\x02" in t for kv in props.items() for t in kv)
            return
        assert decode_properties(encode_properties(msg.properties)) == msg.properties

    run()
    reliability.fuzz("producer property check", inputs=tally.inputs,
                     note="names and values with \\x01/\\x02: refused with MESSAGE_ILLEGAL, or read back unchanged")
