"""OpenTelemetry spans for turns, model calls, tool calls and executions (``NAVI_OTEL_ENDPOINT``).

Off by default: until `setup` is called with an endpoint, `span` hands back one shared null
context and nothing of OpenTelemetry is imported or installed. On: an SDK tracer provider with
a batch processor exporting OTLP/HTTP (protobuf) to ``<endpoint>/v1/traces``. Names and
attributes follow the GenAI semantic conventions (``invoke_agent``, ``chat <model>``,
``execute_tool <tool>``); ours are ``navi.*``. Attributes carry ids, names, sizes, exit
codes and audit seqs, never an argument's, a secret's or a model's text; an exception is not
recorded (its message may quote arguments): a failed span has status ERROR and ``error.type``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from runtime.logging import get_logger

log = get_logger(__name__)

AttrValue = str | bool | int | float
_NULL: contextlib.nullcontext[None] = contextlib.nullcontext()
_tracer: Any = None  # an opentelemetry Tracer once `setup` ran with an endpoint
_provider: Any = None


def enabled() -> bool:
    return _tracer is not None


def setup(endpoint: str | None, service: str = "navi-runtime") -> bool:
    """Install the SDK provider exporting to ``endpoint`` (a collector's base URL, or its
    full ``…/v1/traces``); nothing when it is None. Returns whether tracing is on."""
    global _tracer, _provider
    if not endpoint or _tracer is not None:
        return _tracer is not None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    url = endpoint.rstrip("/")
    url = url if url.endswith("/v1/traces") else url + "/v1/traces"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url),
                                                   schedule_delay_millis=1000))
    _provider = provider
    _tracer = provider.get_tracer("navi.runtime")
    log.info("tracing_on", endpoint=shown_url(url))
    return True


def shown_url(url: str) -> str:
    """``url`` as a log may show it: no user or password, query or fragment (a collector's
    URL can carry a key in any of them)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def shutdown() -> None:
    """Flush what is queued and stop exporting (at the server's exit)."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.force_flush(5000)
        provider.shutdown()


def span(name: str, attributes: dict[str, AttrValue | None] | None = None
         ) -> contextlib.AbstractContextManager[Any]:
    """A span around a block (the current span its parent), or the null context when off.
    ``None`` attribute values are left out."""
    if _tracer is None:
        return _NULL
    return _started(name, attributes or {})


@contextlib.contextmanager
def _started(name: str, attributes: dict[str, AttrValue | None]) -> Iterator[Any]:
    from opentelemetry.trace import Status, StatusCode

    attrs = {k: v for k, v in attributes.items() if v is not None}
    with _tracer.start_as_current_span(name, attributes=attrs, record_exception=False,
                                       set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            kind = getattr(exc, "code", None)
            current.set_attribute("error.type", kind if isinstance(kind, str)
                                  else type(exc).__name__)
            current.set_status(Status(StatusCode.ERROR))
            raise


def annotate(current: Any, attributes: dict[str, AttrValue | None]) -> None:
    """Add attributes to a span `span` yielded (nothing when tracing is off)."""
    if current is None:
        return
    for key, value in attributes.items():
        if value is not None:
            current.set_attribute(key, value)
