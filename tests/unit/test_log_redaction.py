"""What runtime/logging does to a line before it is written, in both formats and for the
libraries' lines too: tracebacks in Python's plain form (no frame's local variables), bearer
tokens and known secret values replaced by `[redacted]`, even inside an exception's message."""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import structlog

from runtime.config import PROJECT_ROOT
from runtime.logging import configure_logging, get_logger, route_stdlib_logging, scrub_from_logs

TOKEN = "navi_" + secrets.token_urlsafe(32)
OTHER = "op-" + secrets.token_hex(10)  # a bearer token of another shape (NAVI_ADMIN_TOKEN)
SECRET = "wx-" + secrets.token_hex(10)


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], str]]:
    """What was written to stderr (configured in the test: capsys's stream by then)."""
    root = logging.getLogger()
    handlers, level, config = root.handlers[:], root.level, structlog.get_config()
    yield lambda: capsys.readouterr().err
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)


def _fail(token: str, secret: str) -> None:
    headers = [(b"authorization", f"Bearer {token}".encode())]  # a local, never printed
    raise RuntimeError(f"refused {secret} with {headers[0][1]!r}; token {TOKEN}")


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_logged_exception_shows_no_locals_and_no_token_or_secret(
        fmt: str, stderr: Callable[[], str]) -> None:
    configure_logging(fmt)
    scrub_from_logs(SECRET, "short")  # "short": under 6 characters, left alone
    try:
        _fail(OTHER, SECRET)
    except RuntimeError:
        get_logger("t").exception("failed", header=f"Bearer {OTHER}", note=f"{SECRET}, short")
    text = stderr()
    if fmt == "json":
        (line,) = text.splitlines()
        entry = json.loads(line)
        assert entry["header"] == "Bearer [redacted]"
        text = entry["exception"]
    assert "Traceback (most recent call last)" in text and "RuntimeError: refused" in text
    assert "headers =" not in text and "token =" not in text  # no locals
    for value in (TOKEN, OTHER, SECRET, TOKEN[5:]):
        assert value not in text
    assert "short" in text if fmt == "console" else entry["note"] == "[redacted], short"
    assert "[redacted]" in text


def test_the_libraries_lines_are_scrubbed_the_same_way(stderr: Callable[[], str]) -> None:
    configure_logging("console")
    route_stdlib_logging("console")
    try:
        _fail(OTHER, SECRET)
    except RuntimeError:
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    text = stderr()
    assert "Exception in ASGI application" in text and "Traceback" in text
    assert "headers =" not in text and OTHER not in text and TOKEN not in text


def test_a_process_that_never_configures_logging_is_safe_too() -> None:
    """`navi mcp stdio` and other entry points log before (or without) `configure_logging`."""
    code = ("import structlog, runtime.logging\n"
            "def fail(token):\n    raise RuntimeError('x')\n"
            f"try:\n    fail({OTHER!r})\n"
            "except RuntimeError:\n    structlog.get_logger().exception('failed')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PROJECT_ROOT, timeout=60, check=True)
    text = out.stdout + out.stderr
    assert "Traceback (most recent call last)" in text and OTHER not in text


KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
       + "\n".join(secrets.token_urlsafe(48) for _ in range(4))
       + "\n-----END OPENSSH PRIVATE KEY-----\n")


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_multi_line_secret_is_redacted_before_it_is_escaped(
        fmt: str, stderr: Callable[[], str]) -> None:
    """A secret with newlines (an SSH key, any PEM) is redacted whole, in its escaped forms
    and line by line, never printed in clear in a field or a traceback."""
    configure_logging(fmt)
    scrub_from_logs(KEY)
    log = get_logger("t")
    log.info("granted", key=KEY, quoted=repr(KEY), one=KEY.splitlines()[2])
    try:
        raise ValueError(f"bad key {KEY!r}")
    except ValueError:
        log.exception("failed")
    text = stderr()
    body = [line for line in KEY.splitlines() if not line.startswith("-----")]
    for line in body:
        assert line not in text, (line, text)
    assert "[redacted]" in text
