"""The typed request and response headers: one class per header, the same codec for client and server."""

from __future__ import annotations

import dataclasses
import types
import typing

import pytest

from rocketmesh.remoting.protocol import headers
from rocketmesh.remoting.protocol.headers import (
    Header,
    HeaderError,
    QueryDataVersionResponseHeader,
    SendMessageRequestHeader,
    decode_fields,
    encode_fields,
)

ALL = sorted((c for c in vars(headers).values()
              if isinstance(c, type) and issubclass(c, Header) and c is not Header), key=lambda c: c.__name__)


def _base(tp: typing.Any) -> typing.Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def _sample(cls: type) -> typing.Any:
    """A header of ``cls`` with every field set to a value of its type other than its default."""
    hints = typing.get_type_hints(cls)
    values: dict[str, typing.Any] = {}
    for i, f in enumerate(dataclasses.fields(cls)):
        tp = _base(hints[f.name])
        if tp is bool:
            values[f.name] = f.default is not True
        elif tp is int:
            values[f.name] = 1000 + i
        elif tp is str:
            values[f.name] = f"v{i}"
        else:  # a list or dict body-like field: an empty one round-trips
            values[f.name] = tp()
    return cls(**values)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _key(f: dataclasses.Field) -> str:
    """The field's wire key: its metadata's, else its camelCase (RocketMQ's clientID is the one exception)."""
    return f.metadata.get("key") or _camel(f.name)


def _required(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]


def test_there_are_headers_to_check():
    assert SendMessageRequestHeader in ALL and len(ALL) > 20


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_round_trip(cls):
    h = _sample(cls)
    ext = h.to_ext()
    assert all(isinstance(k, str) and "_" not in k for k in ext)  # camelCase on the wire, RocketMQ's names
    assert cls.from_ext(ext) == h
    # A hand-written hot-path codec agrees with the generic one, field for field.
    assert ext == encode_fields(h)
    assert decode_fields(cls, ext) == h


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_a_missing_field_is_named(cls):
    required = _required(cls)
    if not required:
        assert cls.from_ext({}) == cls()
        return
    for f in required:
        ext = _sample(cls).to_ext()
        del ext[_key(f)]
        with pytest.raises(HeaderError, match=f"<{_key(f)}>"):
            cls.from_ext(ext)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_a_field_of_the_wrong_type_is_named(cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = _base(hints[f.name])
        if tp not in (int, str, bool):
            continue
        ext = _sample(cls).to_ext()
        ext[_key(f)] = "text" if tp is not str else 7
        with pytest.raises(HeaderError, match=f"<{_key(f)}>"):
            cls.from_ext(ext)
        if tp is int:  # true is no integer, as in RocketMQ's typed decoding
            ext[_key(f)] = True
            with pytest.raises(HeaderError, match=f"<{_key(f)}>"):
                cls.from_ext(ext)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_an_ext_that_is_no_object_is_refused(cls):
    for ext in (None, [], "x", 3):
        with pytest.raises(HeaderError):
            cls.from_ext(ext)


def test_defaults_fill_what_a_request_leaves_out():
    h = SendMessageRequestHeader.from_ext({"producerGroup": "g", "topic": "T", "queueId": 1, "bornTimestamp": 5,
                                           "flag": None})
    assert h == SendMessageRequestHeader("g", "T", 1, 5)
    assert "maxReconsumeTimes" not in h.to_ext()


def test_fields_sent_as_strings_are_typed():
    """RocketMQ's own clients send every header field as a string."""
    h = headers.RegisterBrokerRequestHeader.from_ext(
        {"brokerName": "b", "brokerAddr": "127.0.0.1:10911", "clusterName": "c", "brokerId": "1"})
    assert h.broker_id == 1
    assert headers.CreateTopicRequestHeader.from_ext({"topic": "T", "order": "true"}).order is True
    send = SendMessageRequestHeader.from_ext({"producerGroup": "g", "topic": "T", "queueId": "2",
                                              "bornTimestamp": "5", "batch": "false"})
    assert (send.queue_id, send.born_timestamp, send.batch) == (2, 5, False)
    with pytest.raises(HeaderError, match="<queueId>"):
        SendMessageRequestHeader.from_ext({"producerGroup": "g", "topic": "T", "queueId": "two", "bornTimestamp": 5})


@pytest.mark.parametrize("value", [[], {}, 1.5, 2, "yes", ""])
def test_a_boolean_field_of_another_kind_is_a_header_error(value) -> None:
    with pytest.raises(HeaderError, match="<changed> must be true or false"):
        QueryDataVersionResponseHeader.from_ext({"changed": value})


@pytest.mark.parametrize(("value", "read"), [(True, True), ("true", True), ("TRUE", True), ("1", True), (1, True),
                                             ("false", False), ("0", False), (0, False)])
def test_a_boolean_field_as_rocketmqs_clients_write_it(value, read) -> None:
    assert QueryDataVersionResponseHeader.from_ext({"changed": value}).changed is read
