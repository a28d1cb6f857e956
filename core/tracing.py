"""Optional OpenTelemetry tracing: off by default, on by environment, free when off.

    with span("couponrush.drain", campaign_id=42) as current:
        ...
        current.set(rows=500)

On when COUPONS_TRACING is true, or when OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
set (the OpenTelemetry convention), unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. Needs the
`otel` extra (`pip install '.[otel]'`). The exporter follows OTEL_TRACES_EXPORTER (`otlp`, the default, or
`console`), OTLP's protocol OTEL_EXPORTER_OTLP_PROTOCOL (`http/protobuf`, the default, or `grpc`); every
other OTEL_* variable (service name, resource attributes, headers, sampler) is read by the SDK itself. A
TracerProvider already installed (`opentelemetry-instrument`, a test) is used as it is.

Off, `span()` returns one shared do-nothing object: no import of opentelemetry, no allocation. The decision
is taken once per process, at the first span (after a Celery pool process has forked).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

TRUE = ("1", "true", "yes", "on")


class _NoSpan:
    """What span() gives when tracing is off: a context manager that records nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, **attributes: Any) -> None:
        return None


class _Span:
    """A recording span: set() adds attributes (None values are left out; sequences stay lists)."""

    __slots__ = ("otel_span",)

    def __init__(self, otel_span: Any) -> None:
        self.otel_span = otel_span

    def set(self, **attributes: Any) -> None:
        self.otel_span.set_attributes(_attributes(attributes))


_NO_SPAN = _NoSpan()
_tracer: Any = None
_decided = False


def tracing_requested(environ: Any = None) -> bool:
    """Whether the environment asks for tracing (COUPONS_TRACING or an OTLP endpoint, OTEL_* conventions)."""
    environ = os.environ if environ is None else environ
    if environ.get("OTEL_SDK_DISABLED", "").lower() in TRUE or environ.get("OTEL_TRACES_EXPORTER") == "none":
        return False
    explicit = environ.get("COUPONS_TRACING", "").lower()
    if explicit:
        return explicit in TRUE
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attribute values: str, bool, int, float or a list of one of them."""
    clean: dict[str, Any] = {}
    for name, value in attributes.items():
        if value is None:
            continue
        key = name if "." in name else f"couponrush.{name}"
        if isinstance(value, str | bool | int | float):
            clean[key] = value
        elif isinstance(value, list | tuple | set | frozenset):
            clean[key] = [v if isinstance(v, str | bool | int | float) else str(v) for v in value]
        else:
            clean[key] = str(value)
    return clean


def _exporter() -> Any:
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")[0].strip()
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _make_tracer() -> Any:
    """Return a tracer, installing an SDK provider with a batch exporter unless one is installed already."""
    from opentelemetry import trace

    if not _has_sdk_provider(trace.get_tracer_provider()):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "couponrush")})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(_exporter()))
        trace.set_tracer_provider(provider)
    return trace.get_tracer("couponrush")


def _has_sdk_provider(provider: Any) -> bool:
    return type(provider).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider")


def _decide() -> Any:
    global _tracer, _decided
    _decided = True
    if not tracing_requested():
        return None
    try:
        _tracer = _make_tracer()
        log.info("OpenTelemetry tracing on")
    except ImportError:
        log.warning("tracing was asked for, but OpenTelemetry is not installed: pip install '.[otel]'")
    return _tracer


def use_tracer(tracer: Any) -> None:
    """Trace with `tracer` from now on (None: off), whatever the environment says. For tests and embedders."""
    global _tracer, _decided
    _tracer, _decided = tracer, True


def reset() -> None:
    """Forget the decision: the next span reads the environment again."""
    global _tracer, _decided
    _tracer, _decided = None, False


def span(name: str, **attributes: Any) -> Any:
    """Return a context manager recording a span `name` with `attributes` (prefixed `couponrush.` unless
    dotted); its value has set(**attributes). When tracing is off, a shared object that does nothing."""
    tracer = _tracer if _decided else _decide()
    if tracer is None:
        return _NO_SPAN
    return _recording(tracer, name, attributes)


@contextmanager
def _recording(tracer: Any, name: str, attributes: dict[str, Any]) -> Iterator[_Span]:
    with tracer.start_as_current_span(name, attributes=_attributes(attributes)) as otel_span:
        yield _Span(otel_span)
