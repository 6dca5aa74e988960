"""Stream one started call to its end: output captured (capped, artifacts), live chunks
forwarded, stdin fed, the deadline enforced (kill, then wait ``kill_grace_s``), the exit
state read. The same for a cold container and a warm one: what differs is in ``Started``
(a warm runner's job frame before stdin, its end trailers), made by ``launch.py``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.logging import get_logger
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.capture import StreamCapture, StreamName
from runtime.sandbox.docker.engine import DockerEngine
from runtime.sandbox.docker.warm_stream import TrailerCapture, Trailers, oom_kills
from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk

log = get_logger(__name__)


@dataclass
class Started:
    """A call's container, running (or started by ``drive``'s caller just before)."""

    container: str
    attached: Any  # the attach socket
    stdin: bytes  # what to feed: a warm runner's job frame comes first
    trailers: Trailers | None = None  # a warm runner marks the job's end on both streams
    lingering: bool = False  # after a normal exit the runner waits to be removed
    fed: int = 0  # bytes of ``stdin`` sent before the drive (``feed_at_once``)
    stdin_closed: bool = False

    def feed_at_once(self) -> None:
        """Send what of ``stdin`` the socket takes without blocking (a warm job's frame: the
        job starts) and half-close if that was all: as a ``StartGate``'s step, on the thread
        that made the audit intent durable, else on the loop. The drive feeds the rest."""
        self.fed, self.stdin_closed = attach.send_nowait(attach.raw_socket(self.attached),
                                                         self.stdin)


@dataclass(frozen=True)
class Capture:
    """Where a call's streams go past their cap."""

    artifacts_dir: Path
    artifact_max_bytes: int
    kill_grace_s: float
    cgroup_parent: str | None = None


async def drive(
    engine: DockerEngine, started: Started, request: ExecRequest, capture: Capture, *,
    image_id: str, began: float, deadline: float, on_output: OutputCallback | None,
) -> ExecResult:
    """The result of the call ``started`` runs; the attach socket is closed on every path."""
    sock = attach.raw_socket(started.attached)
    base = capture.artifacts_dir / request.exec_id
    streams: tuple[tuple[int, StreamName], ...] = ((attach.STDOUT, "stdout"),
                                                   (attach.STDERR, "stderr"))
    captures = {
        fd: StreamCapture(name=name, cap=request.limits.output_bytes,
                          artifact_path=base.with_name(f"{request.exec_id}.{name}"),
                          artifact_max=capture.artifact_max_bytes)
        for fd, name in streams
    }
    pumped: dict[int, Any] = dict(captures)
    if started.trailers is not None:
        pumped = {fd: TrailerCapture(c, started.trailers) for fd, c in captures.items()}
    live: asyncio.Queue[OutputChunk | None] = asyncio.Queue()
    forwarder = asyncio.create_task(_forward(live, on_output)) if on_output else None
    loop = asyncio.get_running_loop()

    def emit(stream: StreamName, data: bytes) -> None:
        loop.call_soon_threadsafe(live.put_nowait, OutputChunk(stream=stream, data=data))

    timed_out = False
    try:
        pump = attach.in_thread(
            attach.pump_output, sock, pumped, emit if on_output else None, name="navi-out"
        )
        if not started.stdin_closed:
            attach.in_thread(attach.feed_stdin, sock, started.stdin[started.fed:],
                             name="navi-in")
        done, _ = await asyncio.wait({pump}, timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            timed_out = True
            await engine.call(engine.kill_quietly, started.container)
            done, _ = await asyncio.wait({pump}, timeout=capture.kill_grace_s)
            if not done:
                attach.shutdown(started.attached)
                await pump
        finished = time.monotonic()
        for held in pumped.values():
            if isinstance(held, TrailerCapture) and (rest := held.flush()) and on_output:
                emit(held.name, rest)
        state = await exit_state(engine, started, timed_out, capture.cgroup_parent)
    finally:
        attach.shutdown(started.attached)
        for stream in captures.values():
            stream.close()
        if forwarder is not None:
            live.put_nowait(None)
            await forwarder
    out, err = captures[attach.STDOUT], captures[attach.STDERR]
    return ExecResult(
        exec_id=request.exec_id,
        exit_code=state.get("ExitCode"),
        stdout=out.result(),
        stderr=err.result(),
        timed_out=timed_out,
        oom_killed=bool(state.get("OOMKilled")),
        truncated=out.truncated or err.truncated,
        duration_ms=int((finished - began) * 1000),
        image_digest=image_id,
        stdout_size=out.size,
        stderr_size=err.size,
        artifacts=[str(c.artifact) for c in (out, err) if c.artifact is not None],
    )


async def exit_state(
    engine: DockerEngine, started: Started, timed_out: bool, cgroup_parent: str | None,
) -> dict[str, Any]:
    """Exit code and OOM kill: from a warm runner's trailer when the job exited normally
    and the cgroup's OOM counter can be read, else from the engine once the container is
    down (a lingering runner is stopped first: it would not go down by itself)."""
    code = started.trailers.code if started.trailers is not None else None
    if code is not None and code >= 0 and not timed_out:
        kills = oom_kills(started.container, cgroup_parent)
        if kills is not None:
            return {"ExitCode": code, "OOMKilled": kills > 0}
    if started.lingering and not (code is not None and code < 0):
        # a job ended by a signal: the runner exits by itself with 128+N (killing it here
        # raced that exit: 137 instead of 130 for a SIGINT, one call in three to five)
        await engine.call(engine.kill_quietly, started.container)
    return await engine.call(engine.final_state, started.container)


async def _forward(queue: asyncio.Queue[OutputChunk | None], on_output: OutputCallback) -> None:
    """Hand live chunks to the caller in order; a failing callback never breaks the call."""
    healthy = True
    while (chunk := await queue.get()) is not None:
        if not healthy:
            continue
        try:
            await on_output(chunk)
        except Exception as exc:
            healthy = False
            log.warning("on_output_failed", error=str(exc))
