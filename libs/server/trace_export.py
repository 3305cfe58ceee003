"""A service's OpenTelemetry SDK, configured from the standard environment variables.

``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``; a comma-separated
list; default ``none``: nothing is exported and spans cost next to nothing),
``OTEL_EXPORTER_OTLP_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``
(``http/protobuf``, the default, or ``grpc``), and everything the exporters,
the batch processor and the sampler read themselves
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_BSP_*``, ``OTEL_TRACES_SAMPLER`` ...). ``OTEL_SERVICE_NAME`` or a
``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES`` names the service; otherwise
it is ``rocketmesh-<service>``. ``OTEL_SDK_DISABLED=true`` turns it all off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from rocketmesh.runtime.log import get_logger

log = get_logger("telemetry")

#: ``OTEL_EXPORTER_OTLP_PROTOCOL`` values we export with.
OTLP_PROTOCOLS = ("http/protobuf", "grpc")


class TelemetryConfigError(ValueError):
    """An ``OTEL_*`` variable names something the service cannot export with."""


def service_resource(service: str, env: Mapping[str, str] = os.environ) -> Resource:
    """The resource of ``rocketmesh-<service>``, unless the environment names the service itself."""
    detected = OTELResourceDetector().detect() if env is os.environ else Resource.get_empty()
    attrs = {} if SERVICE_NAME in detected.attributes or env.get("OTEL_SERVICE_NAME") \
        else {SERVICE_NAME: f"rocketmesh-{service}"}
    return Resource.create(attrs)


def span_exporters(env: Mapping[str, str] = os.environ) -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` asks for (none by default)."""
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    out: list[SpanExporter] = []
    for name in names:
        if name == "none":
            continue
        if name == "console":
            out.append(ConsoleSpanExporter())
        elif name == "otlp":
            out.append(_otlp_exporter(env))
        else:
            raise TelemetryConfigError(f"OTEL_TRACES_EXPORTER={name!r} is not one of otlp, console, none")
    return out


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
        return HttpExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        return GrpcExporter()
    raise TelemetryConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not one of {', '.join(OTLP_PROTOCOLS)}")


def configure_tracing(service: str, env: Mapping[str, str] = os.environ) -> TracerProvider | None:
    """Install the SDK's tracer provider for ``service`` when the environment asks for an exporter;
    returns it (call ``shutdown()`` on it at exit to send what is queued), or None when nothing is
    exported. TelemetryConfigError for a value it cannot use."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = span_exporters(env)
    if not exporters:
        return None
    provider = TracerProvider(resource=service_resource(service, env))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("tracing_configured", exporters=[type(e).__module__ for e in exporters],
             service_name=provider.resource.attributes.get(SERVICE_NAME))
    return provider
