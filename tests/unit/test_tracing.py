"""`runtime.tracing`: off, nothing is installed and `span` is one shared null context; on,
spans reach a real OTLP/HTTP receiver on 127.0.0.1, parented, and a failure is exported as
its error type, never its message (which may quote an argument)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from runtime import tracing
from runtime.errors import InvalidInput
from tests.fakes.otlp import Receiver, otlp_receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as got:
        yield got
    tracing.shutdown()


def test_off_by_default_nothing_is_installed(receiver: Receiver) -> None:
    assert tracing.setup(None) is False and tracing.setup("") is False
    assert not tracing.enabled()
    first, second = tracing.span("a", {"x": 1}), tracing.span("b")
    assert first is second  # the one null context: no object made per call
    with first as current:
        assert current is None
    tracing.annotate(current, {"x": 1})
    # a server process that never saw NAVI_OTEL_ENDPOINT has no SDK loaded nor a provider,
    # even when the SDK's own environment variables point at a collector
    code = ("import sys; from runtime.api.app import create_app; from runtime import tracing;"
            "from opentelemetry import trace; tracing.setup(None);"
            "print('opentelemetry.sdk' in sys.modules, type(trace.get_tracer_provider()).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "PATH": "/usr/bin"},
                         check=True).stdout.split()
    assert out == ["False", "ProxyTracerProvider"]
    assert receiver.paths == []


def test_spans_are_exported_parented_and_a_failure_keeps_its_message(receiver: Receiver
                                                                       ) -> None:
    assert tracing.setup(receiver.url) is True
    with tracing.span("outer", {"navi.tenant": "t1", "navi.none": None}) as outer:
        with pytest.raises(InvalidInput):
            with tracing.span("inner", {"gen_ai.tool.name": "code_exec"}):
                raise InvalidInput("path 'SECRET-IN-MESSAGE' does not exist")
        tracing.annotate(outer, {"navi.exit_code": 0})
    tracing.shutdown()  # flushes
    deadline = time.monotonic() + 5
    while not receiver.bodies and time.monotonic() < deadline:
        time.sleep(0.05)
    spans = {s.name: s for s in receiver.spans()}
    assert set(spans) == {"outer", "inner"}
    assert spans["inner"].parent_id == spans["outer"].span_id
    assert spans["outer"].attributes == {"navi.tenant": "t1", "navi.exit_code": 0}
    assert spans["inner"].status == 2 and spans["inner"].events == []
    assert spans["inner"].attributes["error.type"] == "invalid_input"
    assert b"SECRET-IN-MESSAGE" not in receiver.raw()
    assert receiver.paths == ["/v1/traces"]


def test_the_collectors_url_is_logged_without_credentials(receiver: Receiver) -> None:
    """A collector's URL may carry a key (user:password@, ?api_key=): the log shows neither."""
    port = receiver.url.rsplit(":", 1)[1]
    with capture_logs() as logs:
        assert tracing.setup(f"http://user:s3cr3t-key@127.0.0.1:{port}?api_key=k3y#frag")
    [line] = [e for e in logs if e["event"] == "tracing_on"]
    assert line["endpoint"] == f"http://127.0.0.1:{port}"
    assert tracing.shown_url("http://[::1]:4318/v1/traces") == "http://[::1]:4318/v1/traces"
