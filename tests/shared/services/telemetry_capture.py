"""Capture what shared.telemetry emits, with OpenTelemetry's in-memory SDK exporters.

Global OpenTelemetry providers can be set once per process (each pytest-xdist worker is one), so they
are installed the first time a test asks for `telemetry` and stay; what they gather is per test:

* Traces: the global tracer provider is a switch that hands out the SDK's tracers only while a test
  captures, and no-op tracers otherwise, so the other tests of the worker keep running with no trace
  context (no `traceparent` in their messages) as they do with no provider.
* Metrics: the SDK reader collects with delta temporality and is drained when a test starts, so a
  test reads only what it recorded (gauges: the values set since it started).
* Logs: an OpenTelemetry logging handler (the same bridge the Functions worker installs) sits on the
  root logger for the length of the test; records come out as the exporter would see them.

`telemetry` also turns on azure-core's OpenTelemetry tracing (as the Azure Monitor distro does), so the
ARM calls of the Compute adapter show up as spans.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from azure.core.settings import settings as azure_settings
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.logging.handler import LoggingHandler
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter, _Gauge
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared.telemetry import CUSTOM_EVENT_KEY


class _SwitchTracer(trace.Tracer):
    def __init__(self, switch: _SwitchProvider, real: trace.Tracer) -> None:
        self._switch = switch
        self._real = real

    def _current(self) -> trace.Tracer:
        return self._real if self._switch.on else trace.NoOpTracer()

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._current().start_span(*args, **kwargs)

    @contextmanager  # type: ignore[override]
    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Iterator[trace.Span]:
        with self._current().start_as_current_span(*args, **kwargs) as span:
            yield span


class _SwitchProvider(trace.TracerProvider):
    """The SDK's tracers while `on`, no-op tracers otherwise (decided at each span's start)."""

    def __init__(self, real: TracerProvider) -> None:
        self.real = real
        self.on = False

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _SwitchTracer(self, self.real.get_tracer(*args, **kwargs))


@dataclass
class _Providers:
    switch: _SwitchProvider
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader


_installed: _Providers | None = None


def _install() -> _Providers:
    global _installed
    if _installed is None:
        spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        switch = _SwitchProvider(tracer_provider)
        trace.set_tracer_provider(switch)
        delta = AggregationTemporality.DELTA
        reader = InMemoryMetricReader(preferred_temporality={Counter: delta, UpDownCounter: delta, Histogram: delta,
                                                             _Gauge: delta})
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        _installed = _Providers(switch, spans, reader)
    if trace.get_tracer_provider() is not _installed.switch:
        pytest.fail("another OpenTelemetry tracer provider was installed in this process first")
    return _installed


@dataclass(frozen=True)
class Point:
    attributes: Mapping[str, Any]
    value: float  # a counter's sum, a gauge's value, a histogram's count
    sum: float = 0.0  # histograms


@dataclass(frozen=True)
class Event:
    name: str
    dimensions: Mapping[str, Any]
    body: str
    trace_id: int


class Telemetry:
    """What one test emitted. `points()` collects the metrics recorded since the last collection."""

    def __init__(self, providers: _Providers, logs: InMemoryLogRecordExporter) -> None:
        self._providers = providers
        self._logs = logs
        self._points: dict[str, list[Point]] = {}

    # -- metrics
    def collect(self) -> dict[str, list[Point]]:
        """Metrics recorded since the last collection, added to what earlier collections of this test saw."""
        data = self._providers.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found = self._points.setdefault(metric.name, [])
                    for point in metric.data.data_points:
                        if hasattr(point, "bucket_counts"):
                            found.append(Point(dict(point.attributes), point.count, point.sum))
                        else:
                            found.append(Point(dict(point.attributes), point.value))
        return self._points

    def points(self, name: str, **attributes: str) -> list[Point]:
        return [p for p in self.collect().get(name, []) if all(p.attributes.get(k) == v for k, v in attributes.items())]

    def total(self, name: str, **attributes: str) -> float:
        """A counter's sum (or a histogram's count) over the points matching `attributes`."""
        return sum(p.value for p in self.points(name, **attributes))

    def last(self, name: str, **attributes: str) -> float | None:
        """A gauge's latest value among the points matching `attributes` exactly on those keys."""
        found = self.points(name, **attributes)
        return found[-1].value if found else None

    # -- events and logs
    def events(self, name: str | None = None) -> list[Event]:
        found = []
        for record in self._logs.get_finished_logs():
            log_record = record.log_record
            attributes = dict(log_record.attributes or {})
            event = attributes.pop(CUSTOM_EVENT_KEY, None)
            if event is None or (name is not None and event != name):
                continue
            found.append(Event(event, attributes, str(log_record.body), log_record.trace_id or 0))
        return found

    def log_attributes(self, logger: str) -> list[dict[str, Any]]:
        return [dict(r.log_record.attributes or {}) for r in self._logs.get_finished_logs()
                if r.instrumentation_scope is not None and r.instrumentation_scope.name == logger]

    # -- spans
    @property
    def spans(self) -> Sequence[ReadableSpan]:
        return self._providers.spans.get_finished_spans()

    def spans_named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def ancestors(self, span: ReadableSpan) -> list[ReadableSpan]:
        by_id = {s.context.span_id: s for s in self.spans}
        chain = []
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            chain.append(span)
        return chain


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    providers = _install()
    providers.reader.get_metrics_data()  # drop what earlier tests of this worker recorded
    providers.spans.clear()
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    handler = LoggingHandler(logger_provider=logger_provider)
    root = logging.getLogger()
    root.addHandler(handler)
    azure_settings.tracing_implementation = "opentelemetry"
    providers.switch.on = True
    try:
        yield Telemetry(providers, logs)
    finally:
        providers.switch.on = False
        azure_settings.tracing_implementation.unset_value()
        root.removeHandler(handler)
        logger_provider.shutdown()
        providers.spans.clear()
