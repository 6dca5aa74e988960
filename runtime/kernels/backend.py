"""`KernelBackend`: the sandbox backend of kernel executes, holding the running kernels.

The kernel service runs each execute through an `Executor` of its own over this backend, so
an execute is admitted, decided, audited (intent before it runs: the code's SHA-256 is the
intent's stdin digest; outcome after) and traced exactly as a call is; only the last step
differs: the code goes to the session's running kernel (started, and its saved names
restored, when there is none) instead of to a fresh container.

`run` answers an `ExecResult` (exit 0 when the code raised nothing); what is particular to
kernels (results, error, restored/lost names) waits in `runs[exec_id]` for the service.

Time limits: at the call's timeout the kernel is interrupted (SIGINT inside the container:
the names stay); still busy `KILL_AFTER_S` later, its container is killed and the execute
answers `KernelDied`, as it does when the container ends under an execute (OOM, killed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.errors import SandboxError
from runtime.kernels import state
from runtime.kernels.container import KernelContainer
from runtime.kernels.models import KernelError, KernelEvent, KernelRun
from runtime.logging import get_logger
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk

log = get_logger(__name__)

KILL_AFTER_S = 5.0
RESULTS_MAX_BYTES = 8 * 1024 * 1024
Key = tuple[str, str]  # (session id, kernel name)


def died(why: str) -> KernelError:
    return KernelError(name="KernelDied", value=why, traceback=[])


@dataclass
class LiveKernel:
    tenant: str
    session: str
    name: str
    session_dir: Path
    container: KernelContainer
    release: Callable[[], None]  # gives the session's lease back
    started_at: float = field(default_factory=state.now)
    last_used_at: float = field(default_factory=state.now)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def key(self) -> Key:
        return (self.session, self.name)


@dataclass
class _Collected:
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    results: list[dict[str, str]] = field(default_factory=list)
    results_bytes: int = 0
    main: int | None = None  # index of the last expression's value


class KernelBackend:
    """`SandboxBackend` for kernel executes (only the kernel service's Executor calls it)."""

    def __init__(self, docker: DockerBackend,
                 lease: Callable[[str, str], Awaitable[Callable[[], None]]], *,
                 ports: Callable[[str, ExecRequest], Awaitable[ExecRequest]] | None = None
                 ) -> None:
        """`lease(tenant, session)`: hold the session's disk while a kernel runs; returns
        what gives it back. `ports`: the session's ports relay in a kernel's container."""
        self.docker = docker
        self.lease = lease
        self.live: dict[Key, LiveKernel] = {}
        self.stopping: dict[int, LiveKernel] = {}  # id -> a kernel whose container goes
        self.runs: dict[str, KernelRun] = {}
        self._stops: dict[str, asyncio.Event] = {}  # exec_id -> interrupt now
        self._starting: dict[Key, asyncio.Lock] = {}
        # the session's ports in a kernel's container (`PortsHub.for_kernel`: an argv prefix
        # ending ``--`` and mounts added to the request); the app sets it when ports run
        self.ports = ports

    # -- SandboxBackend --------------------------------------------------------------------

    async def run(self, request: ExecRequest, on_output: OutputCallback | None = None, *,
                  before_start: Awaitable[object] | None = None,
                  settled: Awaitable[object] | None = None) -> ExecResult:
        if before_start is not None:
            await before_start  # the intent is durable before any tenant code runs
        began = time.monotonic()
        stop = self._stops[request.exec_id] = asyncio.Event()
        job = asyncio.ensure_future(self._execute(request, on_output, stop, began))
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            stop.set()  # the job interrupts the kernel (kills it if it stays busy)
            raise
        finally:
            self._stops.pop(request.exec_id, None)

    async def kill(self, exec_id: str) -> None:
        if (stop := self._stops.get(exec_id)) is not None:
            stop.set()

    async def release_session(self, session: str) -> None:
        await self.end_session(session)

    async def close(self) -> None:
        for kernel in list(self.live.values()):
            await self.stop(kernel)

    # -- kernels ---------------------------------------------------------------------------

    async def stop(self, kernel: LiveKernel) -> None:
        """Kill its container and give the session's lease back. Until both are done it
        is in ``stopping`` (listed running, its session in use: its disk is still held)."""
        if self.live.get(kernel.key) is kernel:
            del self.live[kernel.key]
        self.stopping[id(kernel)] = kernel
        try:
            await kernel.container.kill()
        finally:
            kernel.release()
            self.stopping.pop(id(kernel), None)

    async def end_session(self, session: str) -> None:
        for kernel in [k for k in self.live.values() if k.session == session]:
            await self.stop(kernel)

    async def save(self, kernel: LiveKernel, timeout_s: float) -> list[str]:
        """Save its picklable names to the session's disk, then stop it; the lost names."""
        lost: list[str] = []
        async with kernel.lock:
            if self.live.get(kernel.key) is not kernel:
                return lost
            try:
                await kernel.container.send({"op": "save"})
                event = await _next(kernel.container, "saved", timeout_s)
                lost = list(event.lost) if event is not None else []
            except SandboxError:
                event = None
            saved = event is not None and state.has_saved_state(kernel.session_dir,
                                                                kernel.name)
            if saved:
                state.write_record(kernel.session_dir, kernel.name, state.KernelRecord(
                    state="saved", started_at=kernel.started_at,
                    last_used_at=kernel.last_used_at))
            else:  # nothing could be written: it is gone
                state.remove(kernel.session_dir, kernel.name)
            await self.stop(kernel)
        log.info("kernel_saved", session=kernel.session, kernel=kernel.name, saved=saved,
                 lost=len(lost))
        return lost

    async def _execute(self, request: ExecRequest, on_output: OutputCallback | None,
                       stop: asyncio.Event, began: float) -> ExecResult:
        name = request.argv[1]
        key = (request.session, name)
        run = KernelRun()
        for _ in range(3):  # a kernel being saved meanwhile is started again
            kernel, dead = await self._kernel(request, key, run, stop)
            if kernel is None:
                self.runs[request.exec_id] = run.model_copy(update={"error": died(dead)})
                return _result(request, began, _Collected(), exit_code=1, oom=False)
            await kernel.lock.acquire()
            if self.live.get(key) is kernel:
                break
            kernel.lock.release()
        else:
            raise SandboxError("the kernel was stopped while this execute waited for it")
        try:
            kernel.last_used_at = state.now()
            got = _Collected()
            code = request.stdin.decode("utf-8", errors="replace")
            outcome = await self._drive(kernel, request, {"op": "exec", "id": request.exec_id,
                                                          "code": code},
                                        on_output, stop, got, run, time.monotonic())
            kernel.last_used_at = state.now()
        finally:
            kernel.lock.release()
        timed_out, gone = outcome
        oom = False
        if gone:
            oom = await kernel.container.oom_killed()
            await self._lost(kernel)
            run = run.model_copy(update={"error": died(
                "the kernel ran out of memory" if oom else "the kernel's process ended")})
        self.runs[request.exec_id] = run.model_copy(update={"results": got.results,
                                                             "main_result": got.main})
        return _result(request, began, got, exit_code=1 if run.error else 0, oom=oom,
                       timed_out=timed_out)

    async def _kernel(self, request: ExecRequest, key: Key, run: KernelRun,
                      stop: asyncio.Event) -> tuple[LiveKernel | None, str]:
        """The session's running kernel, started (and restored) if need be; or None and why
        it died (it answers `KernelDied` once, then starts empty)."""
        lock = self._starting.setdefault(key, asyncio.Lock())
        async with lock:
            kernel = self.live.get(key)
            if kernel is not None and not kernel.container.ended.is_set():
                return kernel, ""
            if kernel is not None:  # ended while idle
                await self._lost(kernel)
                return None, "the kernel's process ended"
            if request.workspace is None:
                raise SandboxError("a kernel needs the session's files")
            session_dir = request.workspace.parent
            record = await asyncio.to_thread(state.read_record, session_dir, key[1])
            if record is not None and record.state == "running" and not (  # a server died
                    await asyncio.to_thread(state.saved_since_start, session_dir, key[1])):
                await asyncio.to_thread(state.remove, session_dir, key[1])
                return None, "the kernel ended with the server"
            uid = request.uid if request.uid is not None else self.docker.config.sandbox_uid
            directory = await asyncio.to_thread(state.state_dir, session_dir, key[1], uid)
            release = await self.lease(request.tenant, request.session)
            try:
                launching = request.model_copy(update={"argv": []})  # the runner's prefix
                if self.ports is not None:
                    launching = await self.ports(request.session, launching)
                container = await KernelContainer.launch(self.docker, launching, directory)
            except BaseException:
                release()
                raise
            kernel = LiveKernel(tenant=request.tenant, session=request.session, name=key[1],
                                session_dir=session_dir, container=container, release=release,
                                started_at=record.started_at if record and record.started_at
                                else state.now())
            self.live[key] = kernel
            await asyncio.to_thread(state.write_record, session_dir, key[1], state.KernelRecord(
                state="running", started_at=kernel.started_at, last_used_at=state.now()))
        async with kernel.lock:  # saved names come back first (unpickled in the sandbox)
            got, began = _Collected(), time.monotonic()
            _, gone = await self._drive(kernel, request, {"op": "restore"}, None, stop, got,
                                        run, began)
        if gone:
            await self._lost(kernel)
            return None, "the kernel ended while its saved names were restored"
        return kernel, ""

    async def _drive(self, kernel: LiveKernel, request: ExecRequest, job: dict[str, Any],
                     on_output: OutputCallback | None, stop: asyncio.Event, got: _Collected,
                     run: KernelRun, began: float) -> tuple[bool, bool]:
        """Send `job`, read the kernel's events until its end; (timed out, kernel gone).
        The timeout counts from `began`: the job's own start (a kernel's start is not the
        code's time)."""
        container, limits = kernel.container, request.limits
        await container.send(job)
        deadline = began + limits.timeout_s
        timed_out = False
        kill_at: float | None = None
        while True:
            now = time.monotonic()
            if kill_at is not None and now >= kill_at:
                await container.kill()
                return timed_out, True
            if kill_at is None and (now >= deadline or stop.is_set()):
                timed_out = now >= deadline
                kill_at = now + KILL_AFTER_S
                with contextlib.suppress(SandboxError):
                    await container.send({"op": "interrupt"})
            wait = (kill_at if kill_at is not None else deadline) - time.monotonic()
            getter = asyncio.ensure_future(container.events.get())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                done, _ = await asyncio.wait({getter, stopper}, timeout=max(wait, 0.0),
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
                if not getter.done():
                    getter.cancel()
            if getter not in done or getter.cancelled():
                continue
            event = getter.result()
            if event is None or event.ev == "died":
                return timed_out, True
            if _ended(event, job, run, got):
                return timed_out, False
            await _take(event, limits.output_bytes, on_output, got)

    async def _lost(self, kernel: LiveKernel) -> None:
        """A kernel whose container ended under it: gone, its saved names too."""
        await self.stop(kernel)
        await asyncio.to_thread(state.remove, kernel.session_dir, kernel.name)


async def _next(container: KernelContainer, ev: str, timeout_s: float) -> KernelEvent | None:
    """The container's next `ev` event (others are skipped); None at its end or the timeout."""
    try:
        async with asyncio.timeout(timeout_s):
            while (event := await container.events.get()) is not None:
                if event.ev == ev:
                    return event
    except TimeoutError:
        pass
    return None


def _ended(event: KernelEvent, job: dict[str, Any], run: KernelRun, got: _Collected) -> bool:
    """Whether `event` ends `job` (filling `run` from it)."""
    op = job["op"]
    if op == "exec" and event.ev == "done" and event.id == job["id"]:
        run.error, run.execution_count = event.error, event.execution_count
        return True
    if op == "restore" and event.ev == "restored":
        run.restored, run.lost = list(event.restored), list(event.lost)
        return True
    return False


async def _take(event: KernelEvent, cap: int, on_output: OutputCallback | None,
                got: _Collected) -> None:
    if event.ev == "stream" and event.text:
        stream = "stderr" if event.name == "stderr" else "stdout"
        raw = event.text.encode("utf-8")
        kept = got.stderr if stream == "stderr" else got.stdout
        room = cap - len(kept)
        if room < len(raw):
            got.truncated = True
        kept += raw[:max(room, 0)]
        if on_output is not None and room > 0:
            await on_output(OutputChunk(stream=stream, data=raw[:room]))
    elif event.ev == "result" and event.data is not None:
        size = sum(len(v) for v in event.data.values())
        data = event.data
        if got.results_bytes + size > RESULTS_MAX_BYTES:  # keep the text, drop the rest
            data = {"text/plain": data.get("text/plain", "")[:4096]}
            got.truncated = True
        got.results_bytes += sum(len(v) for v in data.values())
        if event.main:
            got.main = len(got.results)
        got.results.append(data)


def _result(request: ExecRequest, began: float, got: _Collected, *, exit_code: int, oom: bool,
            timed_out: bool = False) -> ExecResult:
    return ExecResult(exec_id=request.exec_id, exit_code=exit_code, stdout=bytes(got.stdout),
                      stderr=bytes(got.stderr), timed_out=timed_out, oom_killed=oom,
                      truncated=got.truncated, stdout_size=len(got.stdout),
                      stderr_size=len(got.stderr),
                      duration_ms=int((time.monotonic() - began) * 1000))
