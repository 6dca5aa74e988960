"""The narrow seam between the runtime and whatever runs containers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk

OutputCallback = Callable[[OutputChunk], Awaitable[None]]


@runtime_checkable
class SandboxBackend(Protocol):
    """Runs one request in one fresh container; only ``runtime.executor`` may call it."""

    async def run(
        self, request: ExecRequest, on_output: OutputCallback | None = None
    ) -> ExecResult:
        """Run to completion; ``on_output`` receives chunks live while the container runs."""
        ...

    async def kill(self, exec_id: str) -> None:
        """Kill the container of a running execution (cancellation); no-op when done."""
        ...

    async def close(self) -> None: ...
