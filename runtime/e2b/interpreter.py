"""The code interpreter's `POST /execute` and `/contexts` on Navi kernels.

`run_code(code)` runs in the sandbox's `default` kernel, `run_code(code, context=c)` in the
kernel of that context (`ctx-<hex>`), both Navi kernels of the sandbox's session
(`services.kernels`): a hardened container of their own, decided as `kernel_exec` and
audited (code's SHA-256) like `/v1` kernels. Names persist between executes of one kernel.
The answer streams E2B's JSON lines: `stdout`/`stderr` as they come, then each `result`
(text, html, png, ...), an `error`, and `number_of_executions`. Contexts are kept in the
store (`e2b_contexts`: they outlive a server restart, as the kernels' saved names do); only
Python is offered, and a context's cwd and HOME are the workspace (`/home/user`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from runtime.e2b.auth import SandboxCaller, sandbox_caller
from runtime.e2b.paths import HOME
from runtime.e2b.store import SandboxStore
from runtime.errors import InvalidInput, NaviError, NotFound

router = APIRouter()
DEFAULT = "default"
MAX_CODE = 1 << 20
MIME_KEYS = {"text/plain": "text", "text/html": "html", "text/markdown": "markdown",
             "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg",
             "application/pdf": "pdf", "text/latex": "latex",
             "application/javascript": "javascript"}
KINDS = ("python", "python3")
MAX_CONTEXTS = 64


class ExecuteBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    code: str = Field(max_length=MAX_CODE)
    context_id: str | None = Field(None, max_length=64)
    language: str | None = Field(None, max_length=32)
    env_vars: dict[str, str] | None = None


class ContextBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    language: str | None = Field(None, max_length=32)
    cwd: str | None = Field(None, max_length=4096)


async def _caller(request: Request) -> tuple[SandboxCaller, Any]:
    caller = await sandbox_caller(request.app.state.get_services(), request.headers,
                                  kinds=("envd", "traffic"))
    kernels = getattr(caller.services, "kernels", None)
    if caller.sandbox.template != "code-interpreter-v1":
        raise NotFound("this sandbox has no code interpreter: create it with the "
                       "code-interpreter-v1 template (e2b_code_interpreter.Sandbox)")
    if kernels is None:
        raise NaviError("the code interpreter needs Navi's kernels, which this server "
                        "does not run")
    return caller, kernels


def _check_language(language: str | None) -> None:
    if language and language.lower() not in KINDS:
        raise InvalidInput(f"language {language!r} is not offered: Navi's code interpreter "
                           "runs Python only")


def _contexts(caller: SandboxCaller) -> SandboxStore:
    return SandboxStore(caller.services.store)


async def _context(caller: SandboxCaller, context_id: str | None) -> str:
    """The kernel of a context (the sandbox's `default` kernel without one)."""
    if not context_id or context_id == DEFAULT:
        return DEFAULT
    found = await _contexts(caller).context_kernel(caller.session.id, context_id)
    if found is None:
        raise NotFound(f"context {context_id} not found")
    return found


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _line(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, separators=(",", ":")) + "\n").encode()


def result_line(bundle: dict[str, str], main: bool) -> dict[str, Any]:
    line: dict[str, Any] = {"type": "result", "is_main_result": main}
    for mime, data in bundle.items():
        key = MIME_KEYS.get(mime)
        if key is not None:
            line[key] = data
        elif mime == "application/json":
            with contextlib.suppress(ValueError):
                line["json"] = json.loads(data)
    return line


def _is_main(bundle: dict[str, str]) -> bool:
    """Without the kernel's word: a last expression's value carries text and no image."""
    return "text/plain" in bundle and not any(m.startswith("image/") for m in bundle)


@router.post("/execute")
async def execute(request: Request, body: ExecuteBody) -> StreamingResponse:
    caller, kernels = await _caller(request)
    _check_language(body.language)
    if body.env_vars:
        raise InvalidInput("env_vars per execution are not offered: set them in the code "
                           "(os.environ) or as the sandbox's envs for commands")
    kernel = await _context(caller, body.context_id)
    subject = await caller.subject()
    await caller.services.executor.meter_change(subject, "e2b.execute")
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def on_output(chunk: Any) -> None:
        stream = "stderr" if chunk.stream == "stderr" else "stdout"
        await queue.put(_line({"type": stream, "text": chunk.data.decode("utf-8", "replace"),
                               "timestamp": _now()}))

    async def run() -> None:
        try:
            result = await kernels.execute(subject, kernel, body.code, on_output=on_output,
                                           workdir=HOME)
            last = len(result.results) - 1
            main = getattr(result, "main_result", None)  # the kernel's own word, when given
            for n, bundle in enumerate(result.results):
                is_main = n == main if main is not None else n == last and _is_main(bundle)
                await queue.put(_line(result_line(bundle, is_main)))
            if result.error is not None:
                await queue.put(_line({"type": "error", "name": result.error.name,
                                       "value": result.error.value,
                                       "traceback": "\n".join(result.error.traceback)}))
            elif result.timed_out:
                await queue.put(_line({"type": "error", "name": "TimeoutError",
                                       "value": "the execution timed out", "traceback": ""}))
            if result.execution_count is not None:
                await queue.put(_line({"type": "number_of_executions",
                                       "execution_count": result.execution_count}))
        except NaviError as exc:
            rule = exc.details.get("rule")
            message = exc.message if not rule or rule in exc.message else \
                f"{exc.message} (rule {rule})"
            await queue.put(_line({"type": "error", "name": type(exc).__name__,
                                   "value": message, "traceback": ""}))
        finally:
            await queue.put(None)

    async def lines() -> AsyncIterator[bytes]:
        task = asyncio.create_task(run())
        try:
            while (item := await queue.get()) is not None:
                yield item
        finally:
            if not task.done():
                task.cancel()
            with contextlib.suppress(BaseException):
                await task

    return StreamingResponse(lines(), media_type="application/x-ndjson")


def _shown(context_id: str, language: str = "python") -> dict[str, str]:
    return {"id": context_id, "language": language, "cwd": HOME}


@router.post("/contexts")
async def create_context(request: Request, body: ContextBody) -> dict[str, str]:
    caller, _ = await _caller(request)
    _check_language(body.language)
    if body.cwd and body.cwd.rstrip("/") != HOME:
        raise InvalidInput(f"a context's cwd is {HOME} (the session's workspace) in Navi")
    await caller.services.executor.meter_change(await caller.subject(), "e2b.context")
    contexts = _contexts(caller)
    if await contexts.count_contexts(caller.session.id) >= MAX_CONTEXTS:
        raise InvalidInput(f"a sandbox has at most {MAX_CONTEXTS} code contexts: remove one "
                           "first")
    context_id = secrets.token_hex(8)
    await contexts.add_context(caller.session.id, context_id, f"ctx-{context_id}")
    return _shown(context_id)


@router.get("/contexts")
async def list_contexts(request: Request) -> list[dict[str, str]]:
    caller, _ = await _caller(request)
    made = await _contexts(caller).contexts(caller.session.id)
    return [_shown(DEFAULT)] + [_shown(c) for c in made]


@router.post("/contexts/{context_id}/restart")
async def restart_context(request: Request, context_id: str) -> Response:
    caller, kernels = await _caller(request)
    await kernels.reset(await caller.subject(), await _context(caller, context_id))
    return Response(status_code=204)


@router.delete("/contexts/{context_id}")
async def remove_context(request: Request, context_id: str) -> Response:
    caller, kernels = await _caller(request)
    kernel = await _context(caller, context_id)
    await kernels.reset(await caller.subject(), kernel)
    await _contexts(caller).remove_context(caller.session.id, context_id)
    return Response(status_code=204)
