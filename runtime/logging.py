"""structlog set-up, done once at start-up; context (tenant, session, exec_id) via contextvars."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape(value: str) -> str:
    return _CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", value)


def escape_control_chars(
    _: Any, __: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Processor: no log injection, every string value printed on one line."""
    return {k: _escape(v) if isinstance(v, str) else v for k, v in event_dict.items()}


def _renderer(fmt: str) -> Any:
    return (structlog.processors.JSONRenderer() if fmt == "json"
            else structlog.dev.ConsoleRenderer(colors=False))


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            escape_control_chars,
            _renderer(fmt),
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
                    _renderer(fmt)],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    threshold = logging.getLevelNamesMapping()[level.upper()]
    root.setLevel(max(threshold, logging.WARNING))
    logging.getLogger("uvicorn").setLevel(threshold)
