"""The narrow seam between the runtime and whatever runs containers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, runtime_checkable

from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk

OutputCallback = Callable[[OutputChunk], Awaitable[None]]


@runtime_checkable
class SandboxBackend(Protocol):
    """Runs one request in one fresh container; only ``runtime.executor`` may call it."""

    async def run(
        self, request: ExecRequest, on_output: OutputCallback | None = None, *,
        before_start: Awaitable[object] | None = None,
        settled: Awaitable[object] | None = None,
    ) -> ExecResult:
        """Run to completion; ``on_output`` receives chunks live while the container runs.

        ``before_start``: awaited after the container is prepared (image resolved, container
        created or a warm one taken) and before anything runs in it; if it raises, nothing
        runs, the container is removed and the error propagates. The Executor passes its
        write-ahead audit intent here, so preparing overlaps the fsync.

        ``settled``: work the backend may do after the result is returned (removing a used
        warm container, launching the next) waits for it, whatever its outcome, so that it
        does not compete with the caller's own after-call work. The Executor passes the
        write of its audit outcome, which then is not slowed by engine calls.
        """
        ...

    async def kill(self, exec_id: str) -> None:
        """Kill the container of a running execution (cancellation); no-op when done."""
        ...

    async def release_session(self, session: str) -> None:
        """Drop whatever the backend keeps for a session (e.g. warm containers)."""
        ...

    async def close(self) -> None: ...


async def stream_run(
    backend: SandboxBackend, request: ExecRequest
) -> AsyncIterator[OutputChunk | ExecResult]:
    """The streaming variant of ``run``: output chunks as they come, then the ``ExecResult``.

    Closing the iterator early (``aclose`` or a ``break`` in ``async for``) cancels the call,
    which kills and removes its container.
    """
    chunks: asyncio.Queue[OutputChunk] = asyncio.Queue()

    async def on_output(chunk: OutputChunk) -> None:
        chunks.put_nowait(chunk)

    call = asyncio.create_task(backend.run(request, on_output))
    try:
        while not call.done():
            getter = asyncio.ensure_future(chunks.get())
            await asyncio.wait({getter, call}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        while not chunks.empty():
            yield chunks.get_nowait()
        yield call.result()
    finally:
        if not call.done():
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
