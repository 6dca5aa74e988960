"""The narrow seam between the runtime and whatever runs containers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any, Protocol, runtime_checkable

from runtime.logging import get_logger
from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk
from runtime.streaming import Feed

log = get_logger(__name__)
OutputCallback = Callable[[OutputChunk], Awaitable[None]]


class StartGate:
    """A ``before_start`` that can also start a job the moment it opens.

    Awaiting it waits for what it follows (the Executor's audit intent). Whoever makes that
    happen calls ``open()`` on its own thread (the audit writer, right after the record is
    durable), and a backend may have registered one short, non-blocking step to run right
    then (``when_open``): a warm job's frame sent to its runner, instead of after the event
    loop has woken up to the news. Nothing runs unless ``open()`` was called.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._step: Callable[[], None] | None = None
        self._follows: Awaitable[object] | None = None

    def follows(self, done: Awaitable[object]) -> None:
        """What awaiting the gate waits for (its error, if it fails)."""
        self._follows = done

    def __await__(self) -> Generator[Any, None, object]:
        if self._follows is None:
            raise RuntimeError("a StartGate must follow something before it is awaited")
        return self._follows.__await__()

    def when_open(self, step: Callable[[], None]) -> bool:
        """Run ``step`` (short, non-blocking, any thread) when the gate opens; False when it
        is open already: the caller does that work itself."""
        with self._lock:
            if self._open:
                return False
            self._step = step
            return True

    def withdraw(self) -> None:
        """Drop the registered step (its caller gave up waiting; a step already under way
        runs to its end)."""
        with self._lock:
            self._step = None

    def open(self) -> None:
        """Nothing stands in the way any more; runs the registered step (never raises)."""
        with self._lock:
            self._open = True
            step, self._step = self._step, None
        if step is not None:
            try:
                step()
            except Exception as exc:  # the backend then does that work on the loop
                log.warning("start_gate_step_failed", error=str(exc))


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
        write-ahead audit intent here, so preparing overlaps the fsync, as a ``StartGate``:
        a backend may start a job the moment the intent is durable (``when_open``).

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
    chunks: Feed[OutputChunk] = Feed()
    call = chunks.follow(asyncio.create_task(backend.run(request, chunks.put)))
    try:
        async for chunk in chunks:
            yield chunk
        yield call.result()
    finally:
        if not call.done():
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
