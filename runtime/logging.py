"""structlog set-up, done once at start-up; context (tenant, session, exec_id) via contextvars.

Whatever the format, no line carries a secret: a traceback is Python's plain one (never a
frame's local variables, where request headers and granted secrets live), and every value,
traceback included, is scrubbed of bearer tokens and of the secret values this process has
handled (`scrub_from_logs`)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_control(value: str) -> str:
    """``value`` on one line with no terminal control: control characters (and line/paragraph
    separators) as ``\\xNN``. For logs and for anything a command prints from its input."""
    return _CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", value)




def escape_control_chars(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Processor: no log injection, every string value printed on one line; secrets are
    redacted first (escaped, a multi-line one would no longer match its value)."""
    return {k: escape_control(_scrub(v)) if isinstance(v, str) else v
            for k, v in event_dict.items()}


_TOKENS = re.compile(r"(?i)\b(bearer\s+)[^\s'\",;]+|\bnavi_[A-Za-z0-9_-]{20,}")
_REDACTED = "[redacted]"
_MAX_KNOWN = 4096   # secret values remembered for scrubbing (the most recent)
_MIN_KNOWN = 6      # shorter values are not scrubbed (they would hit ordinary words)
_known: dict[str, None] = {}
_known_pattern: re.Pattern[str] | None = None


def scrub_from_logs(*values: str) -> None:
    """Scrub these values (secrets, the bootstrap token) from every later log line."""
    global _known_pattern
    added = False
    for value in values:
        for form in _forms(value):
            if len(form) >= _MIN_KNOWN and form not in _known:
                _known[form] = None
                added = True
    while len(_known) > _MAX_KNOWN:
        del _known[next(iter(_known))]
    if added:
        ordered = sorted(_known, key=len, reverse=True)  # the longest match first
        _known_pattern = re.compile("|".join(map(re.escape, ordered)))


def _forms(value: str) -> list[str]:
    """A secret as it may show up in a line: itself and, when it spans lines (a PEM key),
    escaped as a log, ``repr`` or JSON would escape it, and each of its lines."""
    found = [value]
    if _CONTROL_CHARS.search(value):
        found += [escape_control(value), repr(value)[1:-1], json.dumps(value)[1:-1]]
        found += [line.strip() for line in value.splitlines()
                  if len(line.strip()) >= 16 and not line.startswith("-----")]
    return found


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        known = _known_pattern
        if known is not None:
            value = known.sub(_REDACTED, value)
        return _TOKENS.sub(lambda m: (m.group(1) or "") + _REDACTED, value)
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def redact_secrets(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Processor: bearer tokens and known secret values out of every value (after the
    traceback is text, so out of that too)."""
    return {k: _scrub(v) for k, v in event_dict.items()}


# Tracebacks as text, in Python's plain form: no local variables, whatever the renderer.
_PLAIN_TRACEBACK = structlog.processors.ExceptionRenderer()


def _renderer(fmt: str) -> Any:
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    # (the exception is text by now; plain_traceback in case an exc_info ever gets here)
    return structlog.dev.ConsoleRenderer(
        colors=False, exception_formatter=structlog.dev.plain_traceback)


def _tail(fmt: str) -> list[Any]:
    """What every line goes through last, ours and the libraries' alike."""
    return [_PLAIN_TRACEBACK, redact_secrets, _renderer(fmt)]


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            escape_control_chars,
            *_tail(fmt),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)


def after_this_step(log_method: Callable[..., Any], event: str, **fields: Any) -> None:
    """Log once the running task yields (a call's answer is written first): for lines on a
    latency path. The context bound now (tenant, session, exec_id) goes with the line."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        log_method(event, **fields)
        return
    loop.call_soon(functools.partial(log_method, event, **fields))


def route_stdlib_logging(fmt: str = "console", level: str = "info") -> None:
    """Render what libraries log through ``logging`` as our own lines: same format (a JSON
    log stays JSON), same fields. uvicorn's at ``level``, the others' (docker, httpx, mcp)
    from warnings up, as before. For a process's entry point (``navi serve``): it replaces
    the root logger's handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            escape_control_chars,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    *_tail(fmt)],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    threshold = logging.getLevelNamesMapping()[level.upper()]
    root.setLevel(max(threshold, logging.WARNING))
    logging.getLogger("uvicorn").setLevel(threshold)


if not structlog.is_configured():
    # a process that logs before (or without) `configure_logging` gets the same safe chain,
    # not structlog's default (rich tracebacks with every frame's local variables)
    structlog.configure(processors=[structlog.processors.add_log_level,
                                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                                    escape_control_chars, *_tail("console")])
