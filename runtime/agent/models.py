"""Which model answers: an agent profile's priority list, minus models that failed lately.

A profile may name several models (`models: [...]`, beside or instead of `model`); each model
call tries them in order. A model that fails before its answer starts (the server does not
have it, answers 5xx, or times out) is skipped by every turn of this server for
`NAVI_MODEL_BLACKLIST_S`, and the turn says so with a `notice`. A failure after output has
reached the user is never hidden by a silent switch. When no model is left, the model call
fails with `llm_unavailable`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime.errors import LLMError, LLMUnavailable, NaviError


def profile_models(model: str | None, models: list[str] | None, default: str) -> list[str]:
    """The models to try, in order: `model` first when set, then `models`; the server's
    `NAVI_MODEL` when the profile names none."""
    out: list[str] = []
    for name in ([model] if model else []) + list(models or []):
        if name not in out:
            out.append(name)
    return out or [default]


def skippable(exc: NaviError) -> bool:
    """A model failure another model may make good: not found, 5xx, timeout, no server."""
    if isinstance(exc, LLMUnavailable):
        return True
    if isinstance(exc, LLMError):
        status = exc.details.get("status")
        return status is None or status == 404 or (isinstance(status, int) and status >= 500)
    return False


class ModelBlacklist:
    """Models that failed recently (server-wide: every session's turns skip them)."""

    def __init__(self, blacklist_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.blacklist_s = blacklist_s
        self._clock = clock
        self._until: dict[str, float] = {}

    def usable(self, models: list[str]) -> list[str]:
        now = self._clock()
        return [m for m in models if self._until.get(m, 0.0) <= now]

    def failed(self, model: str) -> None:
        self._until[model] = self._clock() + self.blacklist_s

    def succeeded(self, model: str) -> None:
        self._until.pop(model, None)


def none_left(models: list[str], problems: list[str]) -> LLMUnavailable:
    said = "; ".join(problems) or "each failed within the last minutes and is skipped"
    return LLMUnavailable(f"no model of this agent profile answered ({', '.join(models)}): "
                          + said[:1500], models=models)
