"""Errors across the hop to a node agent, kept exact.

Why: an agent's `NotFound` must be the control plane's `NotFound` (404, same message), not
a Ray task error. The agent returns a `Failed` instead of raising a `NaviError`; the
control plane raises the same class again (`raise_failed`). What is not a `NaviError` on
the node stays an internal error there and is a `SandboxError` here (never its text: it
may name host paths of the node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime import errors
from runtime.errors import NaviError, SandboxError


@dataclass(frozen=True)
class Failed:
    kind: str  # the class name in runtime.errors
    message: str
    details: dict[str, Any] = field(default_factory=dict)


def packed(exc: BaseException) -> Failed:
    if isinstance(exc, NaviError):
        return Failed(type(exc).__name__, exc.message, dict(exc.details))
    return Failed("SandboxError", f"the node agent failed: {type(exc).__name__}")


def raise_failed(failed: Failed) -> None:
    kind = getattr(errors, failed.kind, None)
    if not (isinstance(kind, type) and issubclass(kind, NaviError)):
        kind = SandboxError
    exc = kind.__new__(kind)
    NaviError.__init__(exc, failed.message, **failed.details)
    for name, value in failed.details.items():  # e.g. QuotaExceeded.retry_after
        if not hasattr(exc, name):
            setattr(exc, name, value)
    raise exc
