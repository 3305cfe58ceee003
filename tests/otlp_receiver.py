"""A real OTLP receiver on loopback for the tests: services export spans to it over http/protobuf (or,
given ``protocol="grpc"``, over gRPC), and it decodes them with opentelemetry-proto."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as a service exported it."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]
    status_code: int
    #: The exporting service's resource attributes (``service.name`` among them).
    resource: dict[str, Any] = field(default_factory=dict)


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class OtlpReceiver:
    """``start()``; point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at :attr:`endpoint`; read :attr:`spans`."""

    #: ``OTEL_EXPORTER_OTLP_PROTOCOL``'s value it serves: ``http/protobuf`` or ``grpc``.
    protocol: str = "http/protobuf"
    spans: list[ReceivedSpan] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _grpc: Any = None
    _port: int = 0

    @property
    def endpoint(self) -> str:
        assert self._port, "start() first"
        return f"http://127.0.0.1:{self._port}"

    def env(self) -> dict[str, str]:
        """What a service needs to export every span here, within ~100 ms."""
        return {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": self.protocol,
                "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}

    def start(self) -> OtlpReceiver:
        if self.protocol == "grpc":
            return self._start_grpc()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    receiver._add(ExportTraceServiceRequest.FromString(body))
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *_: Any) -> None:
                """Quiet: the tests read the spans, not an access line per export."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def _start_grpc(self) -> OtlpReceiver:
        from concurrent.futures import ThreadPoolExecutor

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:  # noqa: N802
                receiver._add(request)
                return ExportTraceServiceResponse()

        self._grpc = grpc.server(ThreadPoolExecutor(2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self._grpc)
        self._port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._grpc is not None:
            self._grpc.stop(0)

    def _add(self, req: ExportTraceServiceRequest) -> None:
        got = []
        for rs in req.resource_spans:
            res = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(ReceivedSpan(
                        str(res.get("service.name", "")), s.name, s.kind, s.trace_id.hex(), s.span_id.hex(),
                        s.parent_span_id.hex(), {a.key: _value(a.value) for a in s.attributes},
                        tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links), s.status.code, res))
        with self._lock:
            self.spans.extend(got)

    def wait_for(self, predicate: Callable[[ReceivedSpan], bool], count: int = 1,
                 timeout_s: float = 15.0) -> list[ReceivedSpan]:
        """The spans matching ``predicate`` once there are ``count`` of them (AssertionError on timeout)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                found = [s for s in self.spans if predicate(s)]
            if len(found) >= count or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(found) >= count, f"{len(found)} of {count} spans arrived; all: {[s.name for s in self.spans]}"
        return found
