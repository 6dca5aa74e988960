"""The kernels' typed vocabulary: names, what the runner says, what an execute answers."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.errors import InvalidInput
from runtime.wire import KernelError as KernelError  # the client's: one definition
from runtime.wire import KernelInfoOut, KernelResultOut

KERNEL_NAME = re.compile(r"^[a-z0-9_-]{1,32}$")
DEFAULT_KERNEL = "default"
KernelState = Literal["running", "saved"]


def check_kernel_name(name: str) -> str:
    if not isinstance(name, str) or not KERNEL_NAME.fullmatch(name):
        raise InvalidInput("a kernel name is 1 to 32 characters of a-z, 0-9, _ and -")
    return name


class KernelEvent(BaseModel):
    """One line of the runner (it shares its sandbox with tenant code: bounded, validated)."""

    model_config = ConfigDict(extra="ignore")

    ev: Literal["ready", "stream", "result", "done", "died", "saved", "restored"]
    id: str | None = None
    name: str | None = None
    text: str | None = None
    data: dict[str, str] | None = None
    main: bool = False  # a result: the last expression's value (not a display)
    status: str | None = None
    error: KernelError | None = None
    execution_count: int | None = None
    saved: list[str] = Field(default_factory=list)
    restored: list[str] = Field(default_factory=list)
    lost: list[str] = Field(default_factory=list)


class KernelRun(BaseModel):
    """What one execute did inside the kernel, beside the execution's own fields."""

    results: list[dict[str, str]] = Field(default_factory=list)
    error: KernelError | None = None
    execution_count: int | None = None
    restored: list[str] = Field(default_factory=list)
    lost: list[str] = Field(default_factory=list)
    main_result: int | None = None


class KernelResult(KernelResultOut):
    """The answer of `POST /v1/sessions/{id}/kernels/{name}/execute` (and of the service): the
    client's ``KernelResultOut`` (one definition for both sides) and what stays in-process."""

    main_result: int | None = Field(None, exclude=True, description=(
        "index in `results` of the last expression's value (the others are displays); for "
        "callers in the process (E2B's `Execution.text`), not in the API's answer"))


class KernelInfo(KernelInfoOut):
    """A kernel as `GET /v1/sessions/{id}/kernels` lists it (the client's ``KernelInfoOut``)."""


class KernelExecuteBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(max_length=1 << 20)
    timeout_s: float | None = Field(None, gt=0, le=3600)


def result_text(result: KernelResult) -> str:
    """What a model reads of an execute: output, each result's text, the error."""
    parts: list[str] = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("[stderr]\n" + result.stderr.rstrip("\n"))
    for item in result.results:
        shown = item.get("text/plain", "")
        if "image/png" in item:
            shown = (shown + " " if shown else "") + "[image/png shown]"
        if shown:
            parts.append(shown)
    if result.restored or result.lost:
        parts.append(f"[kernel restored: {', '.join(result.restored) or '-'}; "
                     f"lost: {', '.join(result.lost) or '-'}]")
    if result.error is not None:
        tb = "\n".join(result.error.traceback[-20:])
        parts.append(tb or f"{result.error.name}: {result.error.value}")
    if result.timed_out:
        parts.append("[interrupted at the timeout; the kernel's names are kept]")
    return "\n".join(parts)


def public(result: KernelResult) -> dict[str, Any]:
    return result.model_dump()


EVENT_RESULTS_BYTES = 2 * 1024 * 1024


def kernel_view(said: Any) -> dict[str, Any] | None:
    """A kernel execute's results as a `tool_result` event carries them (the web client
    shows them inline): at most `EVENT_RESULTS_BYTES` of results, images first to go."""
    if not isinstance(said, dict):
        return None
    view = {k: said.get(k) for k in ("kernel", "error", "execution_count", "restored", "lost")}
    results, used = [], 0
    for item in said.get("results") or []:
        if not isinstance(item, dict):
            continue
        size = sum(len(str(v)) for v in item.values())
        if used + size > EVENT_RESULTS_BYTES:
            item = {"text/plain": str(item.get("text/plain", ""))[:4096]}
            size = len(item["text/plain"])
        used += size
        results.append(item)
    view["results"] = results
    return view
