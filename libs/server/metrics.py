"""A service's metrics: OpenTelemetry instruments with RocketMQ 5's names, served for Prometheus.

Each service builds one :class:`ServiceMetrics` (its own MeterProvider, never the global one) and
declares its instruments on it. With ``metricsExporterType=PROM`` it serves them over HTTP at
``metricsPromExporterHost:metricsPromExporterPort`` ``/metrics`` (the port may be a range, ``5570-5579``:
replicas sharing one host or network namespace each take the first free one); whatever the exporter type,
:meth:`ServiceMetrics.snapshot` gives the same numbers as rows, for ``rocketmesh admin stats``.

Hot paths never call into OpenTelemetry (a ``Counter.add`` costs about 10 µs in Python): they add to
a :class:`Tally` (a dict under a lock) or a :class:`LatencyHistogram`, and the exporter reads those
when it is scraped, through observable instruments and a collector of the same registry.

Counters are kept whatever the exporter type (as RocketMQ's BrokerStatsManager keeps its statistics):
``admin stats`` reads them. Histograms on hot paths are recorded only where they are exported
(:attr:`ServiceMetrics.enabled`): a service whose metrics are off spends nothing per request on them.
"""

from __future__ import annotations

import bisect
import enum
import functools
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import HistogramMetricFamily

from rocketmesh.remoting.protocol.codes import code_name
from rocketmesh.runtime.log import get_logger
from rocketmesh.server.trace_export import service_resource

log = get_logger("telemetry")

#: A gauge's reading: (value, labels) pairs.
Readings = Iterable[tuple[float, dict[str, Any]]]

#: Bucket bounds of rocketmq_rpc_latency (ms), RocketMQ's.
RPC_LATENCY_BOUNDS_MS = (1, 3, 5, 7, 10, 100, 1000, 3000)


class MetricsExporterType(enum.Enum):
    """RocketMQ 5's ``metricsExporterType`` (the values rocketmesh serves)."""

    DISABLE = "DISABLE"
    PROM = "PROM"


class PortRange(str):
    """``metricsPromExporterPort``'s value: a port (``5557``), an inclusive range of which the first free
    port is taken (``5570-5579``, for replicas that share a network namespace), or ``0`` (any free port).

    A ``str`` (config files, environment and flags give text); an ``int`` is taken too. Raises
    ValueError for anything else, which the config loader reports under the key's name.
    """

    def __new__(cls, value: Any) -> PortRange:
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(value))
        if not m:
            raise ValueError(f"not a port or a range of ports LOW-HIGH: {value!r}")
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if not 0 <= low <= high <= 65535 or (low == 0 and high != 0):
            raise ValueError(f"not a port range within 1-65535: {value!r}")
        return super().__new__(cls, str(low) if low == high else f"{low}-{high}")

    @property
    def ports(self) -> range:
        """The ports to try, in order (``range(0, 1)`` for any free port)."""
        low, _, high = self.partition("-")
        return range(int(low), int(high or low) + 1)


@dataclass
class MetricsConfig:
    """The exporter keys every service has (mixed into its config); a service overrides the port."""

    #: PROM serves ``/metrics`` for Prometheus; DISABLE (the default) serves nothing (``admin stats`` still answers).
    metrics_exporter_type: MetricsExporterType = MetricsExporterType.DISABLE
    #: The interface ``/metrics`` is served on; empty: the service's listenAddress.
    metrics_prom_exporter_host: str = ""
    #: The HTTP port of ``/metrics``, or a range ``LOW-HIGH`` whose first free port is taken; 0 picks a free one.
    metrics_prom_exporter_port: PortRange = PortRange(5557)


class Tally:
    """Cumulative counts by label values, cheap to add to from any thread; read as observable counters.

    A tally keeps a count per label values and a size beside it (a send's messages and their bytes,
    say), both added to under one lock and each read as its own counter (the size only where one is
    declared: ``ServiceMetrics.counters``).
    """

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels = tuple(labels)
        self._counts: dict[tuple, list[float]] = {}
        self._lock = threading.Lock()

    def add(self, key: tuple, count: float = 1, size: float = 0) -> None:
        """Add ``count`` and ``size`` to label values ``key`` (in the order of ``labels``)."""
        with self._lock:
            cell = self._counts.get(key)
            if cell is None:
                cell = self._counts[key] = [0, 0]
            cell[0] += count
            cell[1] += size

    def totals(self, column: int = 0) -> dict[tuple, float]:
        """Every count (``column`` 0) or size (1) by label values."""
        with self._lock:
            return {k: v[column] for k, v in self._counts.items()}

    def readings(self, column: int = 0) -> list[tuple[float, dict[str, Any]]]:
        """Every count (``column`` 0) or size (1) with its labels."""
        with self._lock:
            items = [(k, v[column]) for k, v in self._counts.items()]
        return [(v, dict(zip(self.labels, k, strict=False))) for k, v in items]


class LatencyHistogram:
    """A histogram aggregated where it is recorded (a bisect and two additions), by label values."""

    def __init__(self, name: str, description: str, labels: Sequence[str], bounds: Sequence[float],
                 const_labels: dict[str, str] | None = None) -> None:
        self.name = name
        self.description = description
        self.const_labels = dict(const_labels or {})
        self.labels = tuple(labels)
        self.bounds = tuple(bounds)
        #: label values -> [bucket counts (one more than bounds), sum]
        self._series: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def record(self, key: tuple, value: float, times: int = 1) -> None:
        """Count ``value`` (``times`` over) for label values ``key``."""
        i = bisect.bisect_left(self.bounds, value)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = [[0] * (len(self.bounds) + 1), 0.0]
            series[0][i] += times
            series[1] += value * times

    def collect(self) -> list[HistogramMetricFamily]:
        """The Prometheus family (prometheus_client's collector protocol)."""
        family = HistogramMetricFamily(self.name, self.description, labels=(*self.const_labels, *self.labels))
        const = list(self.const_labels.values())
        with self._lock:
            series = [(k, list(v[0]), v[1]) for k, v in self._series.items()]
        for key, counts, total in series:
            running, buckets = 0, []
            for bound, n in zip((*map(str, self.bounds), "+Inf"), counts, strict=False):
                running += n
                buckets.append((bound, running))
            family.add_metric(const + [str(v) for v in key], buckets, total)
        return [family]


class ServiceMetrics:
    """One service's meter and exporter: declare instruments, ``start()``, ``snapshot()``, ``shutdown()``."""

    def __init__(self, service: str, config: MetricsConfig, listen_address: str = "127.0.0.1",
                 meter_name: str | None = None, node_labels: dict[str, str] | None = None) -> None:
        self.service = service
        #: Labels on every sample, as RocketMQ's cluster / node_type / node_id.
        self.node_labels = dict(node_labels or {"node_type": service})
        self.config = config
        self.host = config.metrics_prom_exporter_host or listen_address
        self.registry = CollectorRegistry(auto_describe=False)
        self._reader = PrometheusMetricReader(registry=self.registry)
        self.provider = MeterProvider(resource=service_resource(service), metric_readers=[self._reader])
        # RocketMQ names its meters "broker-meter" and the like.
        self.meter = self.provider.get_meter(meter_name or f"{service}-meter")
        self._http: Any = None
        self.port = 0

    # --- instruments ---

    def counter(self, name: str, description: str, labels: Sequence[str]) -> Tally:
        """A counter the caller adds to through the Tally it returns."""
        return self.counters(labels, (name, description))

    def counters(self, labels: Sequence[str], count: tuple[str, str], size: tuple[str, str] | None = None
                 ) -> Tally:
        """A counter (name, description) and, with ``size``, a second one of the sizes of what it counts,
        kept in one Tally and added to together."""
        tally = Tally(labels)
        for column, named in enumerate((count, size)):
            if named is not None:
                self.meter.create_observable_counter(
                    named[0], [_callback(functools.partial(tally.readings, column), self.node_labels)],
                    description=named[1])
        return tally

    def counter_of(self, name: str, description: str, read: Callable[[], Readings]) -> None:
        """A counter whose running totals ``read()`` gives when scraped (totals the service keeps anyway)."""
        self.meter.create_observable_counter(name, [_callback(read, self.node_labels)], description=description)

    def gauge(self, name: str, description: str, read: Callable[[], Readings]) -> None:
        """A gauge whose values ``read()`` gives when scraped (a failing read is logged, not raised)."""
        self.meter.create_observable_gauge(name, [_callback(read, self.node_labels)], description=description)

    def histogram(self, name: str, description: str, labels: Sequence[str],
                  bounds: Sequence[float]) -> LatencyHistogram:
        """A histogram served beside the OpenTelemetry instruments, recorded cheaply on hot paths."""
        hist = LatencyHistogram(name, description, labels, bounds, self.node_labels)
        self.registry.register(hist)
        return hist

    # --- life cycle ---

    @property
    def enabled(self) -> bool:
        """True when ``/metrics`` is served."""
        return self.config.metrics_exporter_type is MetricsExporterType.PROM

    @property
    def url(self) -> str:
        """Where Prometheus scrapes (empty unless served)."""
        return f"http://{self.host}:{self.port}/metrics" if self._http is not None else ""

    def start(self) -> str:
        """Serve ``/metrics`` when the exporter type is PROM, on the first port of
        ``metricsPromExporterPort`` that is free; returns its URL (empty when not served)."""
        if self.enabled and self._http is None:
            ports = PortRange(self.config.metrics_prom_exporter_port).ports
            error: OSError | None = None
            for port in ports:
                try:
                    self._http, _thread = start_http_server(port, self.host, registry=self.registry)
                    break
                except OSError as exc:  # taken (by another replica), most likely: try the next one
                    error = exc
            else:
                # The service itself still serves: losing the endpoint is no reason to stop a broker.
                log.warning("metrics_not_served", service=self.service, host=self.host,
                            port=str(self.config.metrics_prom_exporter_port), error=str(error))
                return ""
            self.port = self._http.server_port
            log.info("metrics_served", service=self.service, url=self.url)
        return self.url

    def snapshot(self) -> list[dict[str, Any]]:
        """Every sample as ``{"name", "labels", "value"}`` (histograms as their _count and _sum)."""
        rows = []
        for family in self.registry.collect():
            for s in family.samples:
                if s.name == "target_info" or s.name.endswith(("_bucket", "_created")):
                    continue
                labels = {k: v for k, v in s.labels.items() if not k.startswith("otel_scope_")}
                rows.append({"name": s.name, "labels": labels, "value": s.value})
        return rows

    def shutdown(self) -> None:
        """Stop serving and release the meter."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        self.provider.shutdown()


def _callback(read: Callable[[], Readings], node_labels: dict[str, str]
              ) -> Callable[[CallbackOptions], list[Observation]]:
    def observe(_options: CallbackOptions) -> list[Observation]:
        try:
            return [Observation(v, {**node_labels, **attrs}) for v, attrs in read()]
        except Exception:  # noqa: BLE001 - one bad reading must not fail the whole scrape
            log.exception("metric_read_failed")
            return []
    return observe


def observe_rpc_latency(metrics: ServiceMetrics, server: Any) -> LatencyHistogram:
    """Record rocketmq_rpc_latency (ms from request read to response, labelled protocol_type,
    request_code and response_code as RocketMQ's lower-case code names) for every response ``server``
    (a RemotingServer) sends, when ``metrics`` is :attr:`~ServiceMetrics.enabled`."""
    hist = metrics.histogram("rocketmq_rpc_latency", "Time from a request read to its response sent (ms)",
                             ("protocol_type", "request_code", "response_code"), RPC_LATENCY_BOUNDS_MS)
    keys: dict[tuple[int, int], tuple[str, str, str]] = {}

    def observe(request_code: int, response_code: int, enqueued_at: float) -> None:
        key = keys.get((request_code, response_code))
        if key is None:
            key = keys[(request_code, response_code)] = (
                "remoting", code_name(request_code, False).lower(), code_name(response_code, True).lower())
        hist.record(key, (time.monotonic() - enqueued_at) * 1000.0)
    if metrics.enabled:
        server.response_observer = observe
    return hist


def service_metrics(service: str, config: Any, server: Any, node_id: str) -> ServiceMetrics:
    """The metrics of a service beside the broker (``config`` a MetricsConfig with a listen_address),
    with rocketmq_rpc_latency of its ``server``; labelled node_type ``service`` and ``node_id``."""
    metrics = ServiceMetrics(service, config, config.listen_address,
                             node_labels={"node_type": service, "node_id": node_id})
    observe_rpc_latency(metrics, server)
    return metrics
