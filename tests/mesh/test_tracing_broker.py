"""The broker's SERVER spans, exported over OTLP/HTTP to a real receiver: a send and a pull are
children of the span named in their request header, and a bad request's span says it failed. A delayed
message's delivered copy carries the context its delivery named."""

from __future__ import annotations

import orjson

from otlp_receiver import OtlpReceiver
from procs import wait_for
from rocketmesh import Admin
from rocketmesh.model.codec import encode_properties
from rocketmesh.model.topics import SCHEDULE_TOPIC
from rocketmesh.remoting import RemotingClient, RequestCode, ResponseCode, request
from rocketmesh.remoting.protocol.headers import (
    DeliverDueMessagesRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)

TOPIC = "TracedTopic"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER = "b7ad6b7169203331"
SERVER_KIND = 2  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_SERVER
ERROR = 2  # Status.STATUS_CODE_ERROR
UNIQ = "7F00000100002A9F0000000000000001"


def test_send_and_pull_spans_are_children_of_the_callers_span(otlp_receiver: OtlpReceiver, start_namesrv,
                                                               start_broker):
    namesrv = start_namesrv()
    broker = start_broker(namesrv.addr)
    with Admin(namesrv.addr) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        admin.wait_topic_route(TOPIC)
    traceparent = f"00-{TRACE_ID}-{CALLER}-01"
    with RemotingClient() as client:
        header = SendMessageRequestHeader("traced-producer", TOPIC, 0, 0,
                                          properties=encode_properties({"traceparent": traceparent}).decode())
        sent = client.invoke_sync(broker.addr, request(RequestCode.SEND_MESSAGE, header.to_ext(), b"hello",
                                                       traceparent=traceparent), 5000)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        pull = PullMessageRequestHeader("traced-group", TOPIC, 0, 0, 32, suspend_timeout_millis=0)
        got = client.invoke_sync(broker.addr, request(RequestCode.PULL_MESSAGE, pull.to_ext(), traceparent=traceparent),
                                 5000)
        assert got.code == ResponseCode.SUCCESS
        bad = client.invoke_sync(broker.addr, request(RequestCode.PULL_MESSAGE,
            PullMessageRequestHeader("traced-group", "NoSuchTopic", 0, 0, 32).to_ext(), traceparent=traceparent), 5000)
        assert bad.code == ResponseCode.TOPIC_NOT_EXIST

    [send] = otlp_receiver.wait_for(lambda s: s.name == f"send {TOPIC}")
    assert (send.service, send.kind, send.trace_id, send.parent_span_id) == (
        "rocketmesh-broker", SERVER_KIND, TRACE_ID, CALLER)
    assert send.attributes["messaging.system"] == "rocketmq"
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["messaging.destination.name"] == TOPIC
    assert send.attributes["messaging.rocketmq.client_group"] == "traced-producer"
    assert send.attributes["server.address"] == broker.addr

    [receive] = otlp_receiver.wait_for(lambda s: s.name == f"receive {TOPIC}")
    assert (receive.kind, receive.trace_id, receive.parent_span_id) == (SERVER_KIND, TRACE_ID, CALLER)
    assert receive.attributes["messaging.consumer.group.name"] == "traced-group"
    assert receive.status_code != ERROR

    [refused] = otlp_receiver.wait_for(lambda s: s.name == "receive NoSuchTopic")
    assert refused.status_code == ERROR and refused.attributes["error.type"] == str(int(ResponseCode.TOPIC_NOT_EXIST))


def test_a_service_exports_over_grpc_when_told_to(start_namesrv, start_broker, monkeypatch):
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc: the broker's spans reach a real OTLP/gRPC receiver, under the
    resource OTEL_RESOURCE_ATTRIBUTES adds to."""
    receiver = OtlpReceiver(protocol="grpc").start()
    try:
        for key, value in receiver.env().items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=grpc-test")
        namesrv = start_namesrv()
        broker = start_broker(namesrv.addr)
        traceparent = f"00-{TRACE_ID}-{CALLER}-01"
        with RemotingClient() as client:
            header = SendMessageRequestHeader("grpc-producer", "GrpcTopic", 0, 0)
            sent = client.invoke_sync(broker.addr, request(RequestCode.SEND_MESSAGE, header.to_ext(), b"x",
                                                           traceparent=traceparent), 5000)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        [send] = receiver.wait_for(lambda s: s.name == "send GrpcTopic")
        assert (send.service, send.kind, send.trace_id, send.parent_span_id) == (
            "rocketmesh-broker", SERVER_KIND, TRACE_ID, CALLER)
        assert send.resource["deployment.environment"] == "grpc-test"
    finally:
        receiver.stop()


def test_with_no_exporter_configured_the_broker_serves_as_before(start_namesrv, start_broker, monkeypatch):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    namesrv = start_namesrv()
    broker = start_broker(namesrv.addr)
    with RemotingClient() as client:
        header = SendMessageRequestHeader("p", "AutoTopic", 0, 0)
        resp = client.invoke_sync(broker.addr, request(RequestCode.SEND_MESSAGE, header.to_ext(), b"x",
                                                       traceparent=f"00-{TRACE_ID}-{CALLER}-01"), 5000)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def test_a_service_refuses_to_start_with_an_exporter_it_cannot_use(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    out = subprocess.run([sys.executable, "-m", "rocketmesh.namesrv", "--listen-port", "0"], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert "OTEL_TRACES_EXPORTER='zipkin' is not one of otlp, console, none" in out.stderr


def test_a_delivered_copy_carries_the_context_its_delivery_named(start_namesrv, start_broker):
    namesrv = start_namesrv()
    broker = start_broker(namesrv.addr, messageDelayLevel="1s 2s")
    with Admin(namesrv.addr) as admin:
        admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        admin.wait_topic_route(TOPIC)
        with RemotingClient() as client:
            header = SendMessageRequestHeader("p", TOPIC, 0, 0, properties=encode_properties(
                {"DELAY": "1", "UNIQ_KEY": UNIQ, "traceparent": f"00-{TRACE_ID}-{CALLER}-01"}).decode())
            sent = client.invoke_sync(broker.addr, request(RequestCode.SEND_MESSAGE, header.to_ext(), b"d"), 5000)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            deliver = DeliverDueMessagesRequestHeader(SCHEDULE_TOPIC, 0).to_ext()  # level 1 is queue 0
            bad = client.invoke_sync(broker.addr, request(RequestCode.DELIVER_DUE_MESSAGES, deliver, orjson.dumps(
                {"offsets": [0], "traceparents": {"first": 5}})), 5000)
            assert bad.code == ResponseCode.SYSTEM_ERROR
            assert "traceparents must map queue offsets (as strings) to traceparent strings" in bad.remark
            delivery = f"00-{TRACE_ID}-{'d' * 16}-01"
            body = orjson.dumps({"offsets": [0], "traceparents": {"0": delivery}})
            wait_for(lambda: orjson.loads(client.invoke_sync(broker.addr, request(
                RequestCode.DELIVER_DUE_MESSAGES, deliver, body), 5000).body)["done"] == [0], 10,
                what="the delayed message delivered")
        copy = admin.query_msg_by_unique_key(TOPIC, UNIQ)
    assert copy.body == b"d"
    assert copy.properties["traceparent"] == delivery
