"""Tracing of the SDK: OpenTelemetry spans of sends and consumes, and RocketMQ's message trace (msgTrace)."""
