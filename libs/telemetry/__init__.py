"""OpenTelemetry for rocketmesh: the names its spans and metrics use, and the W3C trace context as
it travels in a request header and in a message's properties.

The client SDK uses only the OpenTelemetry API (:func:`tracer`): the application
decides whether anything is recorded and where it goes. The services configure
the SDK themselves from the standard ``OTEL_*`` environment variables.
"""

from rocketmesh.telemetry.propagation import context_of, traceparent_of, tracer

__all__ = ["context_of", "traceparent_of", "tracer"]
