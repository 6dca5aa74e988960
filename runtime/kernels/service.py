"""`KernelService`: stateful Python kernels of a session, for the tools, the API and E2B.

    result = await kernels.execute(subject, "default", "x = 1; x + 1", timeout_s=None,
                                   on_output=None, exec_id=None, approver=None,
                                   workspace=Path, tmp=Path)      # -> KernelResult
    await kernels.list(subject)            # [KernelInfo]: running ones and saved ones
    await kernels.reset(subject, name)     # stopped and its saved names forgotten
    await kernels.delete(subject, name)    # the same; NotFound when there was none

An execute is an execution (tool `kernel_exec`, `group:exec`): it goes through an `Executor`
over `KernelBackend`, sharing the app's policy, audit log, quotas and refusal limiter, so it
is admitted, decided, audited and counted like any call. A kernel unused for `idle_s` is
saved to the session's disk and stopped (`sweep_idle`, a background task); at shutdown every
running kernel is saved the same way. A session on a cluster node has its kernels on that
node (`runtime.kernels.on_nodes`): decided and audited here, run and saved there.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from runtime.config import Settings
from runtime.errors import NotFound, QuotaExceeded
from runtime.executor import Approver, ExecOutcome, Executor, Invocation, new_exec_id
from runtime.kernels import state
from runtime.kernels.backend import KernelBackend, LiveKernel
from runtime.kernels.models import (
    KernelInfo,
    KernelResult,
    KernelRun,
    check_kernel_name,
)
from runtime.kernels.on_nodes import KernelBackends, NodeTokenWatch
from runtime.logging import get_logger
from runtime.nodes.registry import NodeBackends, Nodes
from runtime.nodes.wire import SESSION_TMP, SESSION_WORKSPACE
from runtime.policy.decision import Action, Subject
from runtime.sandbox.backend import OutputCallback, SandboxBackend
from runtime.sandbox.docker.backend import DockerBackend
from runtime.workspace import Workspaces
from runtime.workspace.disk import WORKSPACE
from runtime.workspace.tmpdir import TMP

log = get_logger(__name__)

TOOL = "kernel_exec"
GROUP = "group:exec"
DEFAULT_MAX_KERNELS = 2
SAVE_TIMEOUT_S = 60.0

T = TypeVar("T")
TokenEnded = Callable[[Any], Awaitable[None]]


@dataclass(frozen=True)
class TokenRef:
    """The token whose execute started a kernel: the kernel ends when the token does."""

    token_id: str
    tenant_id: str
    expires_at: float | None = None
SessionDir = Callable[[str, str], Path]
Lease = Callable[[str, str], Awaitable[Callable[[], None]]]


class KernelService:
    def __init__(self, *, executor: Executor, docker: DockerBackend, session_dir: SessionDir,
                 lease: Lease, idle_s: float = 600.0, nodes: Nodes | None = None) -> None:
        """`executor`: the app's (its policy, audit, quotas and refusals are shared);
        `session_dir(tenant, session)`: a session's directory (its disk, mounted while a
        lease is held); `lease(tenant, session)`: hold it, returns what gives it back;
        `nodes`: the cluster's (a session on a node runs its kernels there)."""
        self.backend = KernelBackend(docker, lease)
        self.placed = KernelBackends(self.backend, nodes)
        self.node_tokens = NodeTokenWatch(self.placed)
        self.app_executor = executor  # its change limiter is the tenant's, shared
        self.executor = Executor(engine=executor.engine, backend=self.placed,
                                 audit=executor.audit, resolve_image=executor.resolve_image,
                                 quotas=executor.quotas, refusals=executor.admission.refusals)
        self.session_dir = session_dir
        self.lease = lease
        self.idle_s = idle_s
        self.token_ended: TokenEnded | None = None  # the app's `Services.token_ended`
        self._watches: dict[int, asyncio.Task[None]] = {}  # id(LiveKernel) -> its watch

    # -- the API ---------------------------------------------------------------------------

    async def execute(self, subject: Subject, name: str, code: str, *,
                      timeout_s: float | None = None, on_output: OutputCallback | None = None,
                      exec_id: str | None = None, approver: Approver | None = None,
                      workspace: Path | None = None, tmp: Path | None = None,
                      workdir: str = "/workspace") -> KernelResult:
        result, _ = await self.run(subject, name, code, timeout_s=timeout_s,
                                   on_output=on_output, exec_id=exec_id, approver=approver,
                                   workspace=workspace, tmp=tmp, workdir=workdir)
        return result

    async def run(self, subject: Subject, name: str, code: str, *,
                  timeout_s: float | None = None, on_output: OutputCallback | None = None,
                  exec_id: str | None = None, approver: Approver | None = None,
                  workspace: Path | None = None, tmp: Path | None = None,
                  workdir: str = "/workspace") -> tuple[KernelResult, ExecOutcome]:
        """`execute`, with the execution behind it (its typed fields and deciding rule).
        ``workdir``: where a kernel it starts sees the workspace (its cwd; HOME when it is
        not /workspace: E2B's /home/user)."""
        check_kernel_name(name)
        on_node = self.placed.of(subject)
        if on_node is not None:  # the node resolves the session's files from their names
            workspace, tmp = SESSION_WORKSPACE, SESSION_TMP
        elif workspace is None:  # a caller without the call path's context (E2B)
            session_dir = self.session_dir(subject.tenant, subject.session)
            workspace, tmp = session_dir / WORKSPACE, tmp or session_dir / TMP
        if on_node is None and (subject.session, name) not in self.backend.live:
            await self._admit_new(subject, name)
        elif on_node is not None and (subject.node, subject.session,
                                      name) not in self.placed.known:
            await self._admit_new(subject, name)
        await self.app_executor.meter_change(subject, "kernel.exec")  # a state change
        action = Action(tool=TOOL, args={"code": code, "kernel": name}, group=GROUP,
                        timeout_s=timeout_s)
        invocation = Invocation(argv=["navi-kernel", name], stdin=code.encode("utf-8"),
                                workspace=workspace, tmp=tmp, workdir=workdir)
        exec_id = exec_id or new_exec_id()
        try:
            outcome = await self.executor.execute(subject, action, invocation,
                                                  on_output=on_output, exec_id=exec_id,
                                                  approver=approver)
        finally:
            run = self.backend.runs.pop(exec_id, None) or KernelRun()
            self._watch_token(subject, name)
        e = outcome.execution
        return KernelResult(
            ok=e.ok and run.error is None, stdout=e.stdout, stderr=e.stderr,
            results=run.results, error=run.error, execution_count=run.execution_count,
            kernel=name, restored=run.restored, lost=run.lost, timed_out=e.timed_out,
            duration_ms=e.duration_ms, exec_id=outcome.exec_id, audit_seq=outcome.audit_seq,
            node=outcome.node, main_result=run.main_result), outcome

    async def list(self, subject: Subject) -> builtins.list[KernelInfo]:
        on_node = self.placed.of(subject)
        if on_node is not None:
            return await on_node.list(subject.tenant, subject.session)
        running = {k.name: k for k in self._of(subject.session)}
        found = [KernelInfo(name=k.name, state="running", started_at=k.started_at,
                            last_used_at=k.last_used_at) for k in running.values()]
        at_rest = await self._on_disk(subject, state.saved)
        found += [k for k in at_rest if k.name not in running]
        return sorted(found, key=lambda k: k.name)

    async def reset(self, subject: Subject, name: str) -> bool:
        """Stop the kernel and forget its saved names; whether there was one."""
        check_kernel_name(name)
        on_node = self.placed.of(subject)
        if on_node is not None:
            self.node_tokens.drop(subject.session, name)
            return await on_node.stop(subject.tenant, subject.session, name)
        kernel = self.backend.live.get((subject.session, name))
        if kernel is not None:
            async with contextlib.AsyncExitStack() as stack:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(10):  # an execute in flight: it ends now
                        await stack.enter_async_context(kernel.lock)
                await self.backend.stop(kernel)
        removed = await self._on_disk(subject, lambda d: state.remove(d, name))
        return kernel is not None or removed

    async def delete(self, subject: Subject, name: str) -> None:
        if not await self.reset(subject, name):
            raise NotFound(f"no kernel {name!r} in this session")

    def active(self, session: str) -> bool:
        """Whether a kernel of the session runs (its session is in use)."""
        return any(True for _ in self._of(session))

    async def end_session(self, session: str) -> None:
        """The session ends: its kernels stop (nothing is saved), here or on a node."""
        await self.backend.end_session(session)
        self.node_tokens.drop(session)
        for remote in self.placed.remotes():
            with contextlib.suppress(Exception):  # a node lost has no kernels left
                await remote.end_session(session)

    # -- idle kernels ----------------------------------------------------------------------

    async def save_idle(self, now: float | None = None) -> builtins.list[str]:
        """Save and stop kernels unused for `idle_s`; their `session/name`s."""
        cutoff = (time.time() if now is None else now) - self.idle_s
        done = await self._save_idle_on_nodes(time.time() - cutoff)
        for kernel in list(self.backend.live.values()):
            if kernel.last_used_at <= cutoff and not kernel.lock.locked():
                await self.backend.save(kernel, SAVE_TIMEOUT_S)
                done.append(f"{kernel.session}/{kernel.name}")
        return done

    async def _save_idle_on_nodes(self, unused_s: float) -> builtins.list[str]:
        """Each node saves its kernels unused for `unused_s` (by its own clock)."""
        done: builtins.list[str] = []
        for remote in self.placed.remotes():
            try:
                done += await remote.save_idle(max(unused_s, 0.0))
            except Exception as exc:  # a node lost or busy: the next sweep tries again
                log.warning("kernel_idle_save_failed", node=remote.node_id, error=str(exc))
        return done

    async def sweep_idle(self) -> None:
        """`save_idle` forever (a background task of the app)."""
        interval = max(0.2, min(self.idle_s / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.save_idle()
            except Exception as exc:  # one kernel's trouble must not stop the sweep
                log.warning("kernel_idle_sweep_failed", error=str(exc))

    def _watch_token(self, subject: Subject, name: str) -> None:
        """A kernel ends within seconds of the revocation or expiry of the token whose
        execute started it (`TokenWatch`), its names not saved."""
        if subject.node != "local":
            if self.token_ended is not None and subject.user not in ("", "local"):
                self.node_tokens.watch(subject, name, self.token_ended, TokenRef(
                    token_id=subject.user, tenant_id=subject.tenant))
            return
        kernel = self.backend.live.get((subject.session, name))
        if (kernel is None or self.token_ended is None or subject.user in ("", "local")
                or id(kernel) in self._watches):
            return
        task = asyncio.ensure_future(self._end_with_token(
            kernel, TokenRef(token_id=subject.user, tenant_id=subject.tenant)))
        self._watches[id(kernel)] = task
        task.add_done_callback(lambda _: self._watches.pop(id(kernel), None))

    async def _end_with_token(self, kernel: LiveKernel, token: TokenRef) -> None:
        assert self.token_ended is not None
        ended = asyncio.ensure_future(self.token_ended(token))
        gone = asyncio.ensure_future(kernel.container.ended.wait())
        try:
            await asyncio.wait({ended, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not ended.done():
                ended.cancel()
        if ended.done() and not ended.cancelled() and self.backend.live.get(kernel.key) is kernel:
            log.info("kernel_ended_with_its_token", session=kernel.session, kernel=kernel.name)
            await self.backend.stop(kernel)
            await asyncio.to_thread(state.remove, kernel.session_dir, kernel.name)

    async def close(self) -> None:
        """Save every running kernel (a restart finds them saved), then stop them."""
        for task in list(self._watches.values()):
            task.cancel()
        self.node_tokens.close()  # node kernels stay: their node saves them when idle
        kernels = list(self.backend.live.values())
        await asyncio.gather(*(self.backend.save(k, SAVE_TIMEOUT_S / 2) for k in kernels),
                             return_exceptions=True)
        await self.backend.close()

    # -- helpers ---------------------------------------------------------------------------

    def _of(self, session: str) -> builtins.list[LiveKernel]:
        """The session's kernels with a container: running, or being stopped."""
        return [k for k in (*self.backend.live.values(), *self.backend.stopping.values())
                if k.session == session]

    async def _on_disk(self, subject: Subject, read: Callable[[Path], T]) -> T:
        """`read(session_dir)` off the loop, the session's disk held meanwhile."""
        release = await self.lease(subject.tenant, subject.session)
        try:
            return await asyncio.to_thread(read, self.session_dir(subject.tenant,
                                                                  subject.session))
        finally:
            release()

    async def _admit_new(self, subject: Subject, name: str) -> None:
        """A kernel that does not run yet: within `max_kernels_per_session`."""
        limit = self._max_kernels(subject)
        on_node = self.placed.of(subject)
        if on_node is not None:
            names = {k.name for k in await on_node.list(subject.tenant, subject.session)}
        else:
            at_rest = {k.name for k in await self._on_disk(subject, state.saved)}
            names = {k.name for k in self._of(subject.session)} | at_rest
        if name not in names and len(names) >= limit:
            raise QuotaExceeded(
                f"the session has {len(names)} kernels (max_kernels_per_session {limit}); "
                "delete one first", retry_after=1, quota="max_kernels_per_session")

    def _max_kernels(self, subject: Subject) -> int:
        read = getattr(self.executor.engine, "session_limits", None)
        if read is None:
            return DEFAULT_MAX_KERNELS
        try:
            return int(read(subject).processes.max_kernels_per_session)
        except (AttributeError, TypeError, ValueError):
            return DEFAULT_MAX_KERNELS


def for_app(settings: Settings, executor: Executor, backend: SandboxBackend,
            workspaces: Workspaces) -> KernelService | None:
    """The app's kernel service (None without a Docker engine: kernels need one)."""
    if not isinstance(backend, DockerBackend):
        return None

    async def lease(tenant: str, session: str) -> Callable[[], None]:
        held = await asyncio.to_thread(workspaces.open, tenant, session)
        return held.close

    nodes = executor.backend.nodes if isinstance(executor.backend, NodeBackends) else None
    return KernelService(executor=executor, docker=backend, session_dir=workspaces.session_dir,
                         lease=lease, idle_s=settings.kernel_idle_s, nodes=nodes)
