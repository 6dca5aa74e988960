"""``FakeBackend``: a scripted ``SandboxBackend`` for unit tests. It never runs anything.

Each ``run`` records the request, takes the next scripted ``FakeResponse`` (or the default,
or calls a function of the request), streams its chunks through ``on_output``, sleeps its
``delay_s`` (cut short by ``kill``, which then answers like a SIGKILL: exit 137) and returns
an ``ExecResult``. A response may instead raise (e.g. ``SandboxError``) to play "the
sandbox broke". Shipped in the package so every layer above the backend can test against
the same protocol the Docker backend implements.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk


@dataclass(frozen=True)
class FakeResponse:
    exit_code: int | None = 0
    stdout: bytes = b""
    stderr: bytes = b""
    delay_s: float = 0.0
    timed_out: bool = False
    oom_killed: bool = False
    truncated: bool = False
    image_digest: str | None = "sha256:" + "f" * 64
    raises: BaseException | None = None
    chunks: tuple[OutputChunk, ...] = field(default_factory=tuple)
    """Streamed through on_output; when empty, stdout/stderr are streamed as one chunk each."""


Script = FakeResponse | Callable[[ExecRequest], FakeResponse]


class FakeBackend:
    """Records requests, answers from a script; ``kill`` interrupts a sleeping response."""

    def __init__(
        self, script: Iterable[Script] = (), default: Script | None = None
    ) -> None:
        self._script: deque[Script] = deque(script)
        self._default: Script = default if default is not None else FakeResponse()
        self.requests: list[ExecRequest] = []
        self.killed: list[str] = []
        self.closed = False
        self._running: dict[str, asyncio.Event] = {}

    def push(self, *responses: Script) -> None:
        self._script.extend(responses)

    @property
    def running(self) -> list[str]:
        return list(self._running)

    async def run(
        self, request: ExecRequest, on_output: OutputCallback | None = None, *,
        before_start: Awaitable[object] | None = None,
        settled: Awaitable[object] | None = None,
    ) -> ExecResult:
        del settled  # nothing to do after a call
        if before_start is not None:
            await before_start
        self.requests.append(request)
        item = self._script.popleft() if self._script else self._default
        response = item(request) if callable(item) else item
        start = time.monotonic()
        kill = asyncio.Event()
        self._running[request.exec_id] = kill
        try:
            if response.raises is not None:
                raise response.raises
            chunks = response.chunks or tuple(
                OutputChunk(stream=s, data=d)
                for s, d in (("stdout", response.stdout), ("stderr", response.stderr)) if d
            )
            if on_output is not None:
                for chunk in chunks:
                    await on_output(chunk)
            killed = False
            if response.delay_s > 0:
                try:
                    await asyncio.wait_for(kill.wait(), timeout=response.delay_s)
                    killed = True
                except TimeoutError:
                    pass
            return ExecResult(
                exec_id=request.exec_id,
                exit_code=137 if killed else response.exit_code,
                stdout=response.stdout, stderr=response.stderr,
                timed_out=response.timed_out, oom_killed=response.oom_killed,
                truncated=response.truncated,
                duration_ms=int((time.monotonic() - start) * 1000),
                image_digest=response.image_digest,
                stdout_size=len(response.stdout), stderr_size=len(response.stderr),
            )
        finally:
            self._running.pop(request.exec_id, None)

    async def kill(self, exec_id: str) -> None:
        self.killed.append(exec_id)
        event = self._running.get(exec_id)
        if event is not None:
            event.set()

    async def release_session(self, session: str) -> None:
        """The fake keeps nothing per session."""

    async def close(self) -> None:
        self.closed = True
        for event in self._running.values():
            event.set()
