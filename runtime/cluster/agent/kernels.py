"""The kernels of the sessions a node holds: `NodeKernels`, which the node agent delegates to.

Why: a session on a node has its disk there, so its kernels run there too: each in its
hardened container on the node's engine (`runtime.kernels.backend.KernelBackend` over the
node's `DockerBackend`, exactly as `navi serve` alone runs them), with the session's
``/workspace``, ``/tmp`` and kernel state directory from the node's own disk. Saved names
are written and read only inside the kernel's sandbox here; the control plane keeps policy,
audit and the token watch, and asks by ids (`runtime.cluster.kernel_wire`):

- `run`: one execute (a `RunOnNode` naming the session, never a path), streamed back like a
  call: output as it comes, then the `ExecResult` and the `KernelRun` (results, error,
  restored/lost names). Gated like a call: nothing runs before the intent is durable.
- `op`: list, stop (state forgotten), stop_running (a token ended), kill (interrupt an
  execute), save_idle, end_session.

The kernel's ports relay follows the session's ports on the node's own relay broker
(`runtime.cluster.agent.ports`: the session's processes declare them there), as on one machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from runtime.cluster.kernel_wire import KernelOp
from runtime.errors import InvalidInput
from runtime.kernels import state
from runtime.kernels.backend import KernelBackend, LiveKernel
from runtime.kernels.models import KernelInfo, KernelRun
from runtime.logging import get_logger
from runtime.nodes.failures import Failed, packed
from runtime.nodes.wire import RunOnNode, parsed
from runtime.sandbox.models import ExecResult, OutputChunk
from runtime.streaming import Feed

if TYPE_CHECKING:
    from runtime.ports.hub import PortsHub
    from runtime.sandbox.docker.backend import DockerBackend
    from runtime.workspace import Workspaces

log = get_logger(__name__)

COALESCE_S = 0.005  # output within this of a chunk (or the end) goes in one message
SAVE_TIMEOUT_S = 60.0
STOP_WAIT_S = 10.0  # an execute in flight when its kernel is stopped: it ends by then


class NodeKernels:
    """A node's kernels: its engine and session disks, its relay broker, the start gate of
    a gated call (`Gates.get`) and the agent's start, awaited before any work."""

    def __init__(self, workspaces: Workspaces, engine: DockerBackend, ports: PortsHub,
                 gate: Callable[[str], asyncio.Future[None]],
                 ready: Callable[[], Awaitable[object]]) -> None:
        self.workspaces = workspaces
        self.backend = KernelBackend(engine, self._lease, ports=ports.for_kernel)
        self._gate = gate
        self._ready = ready

    async def _lease(self, tenant: str, session: str) -> Callable[[], None]:
        held = await asyncio.to_thread(self.workspaces.open, tenant, session)
        return held.close

    # -- an execute -------------------------------------------------------------------------

    async def run(self, payload: bytes
                  ) -> AsyncIterator[list[OutputChunk | ExecResult | KernelRun] | Failed]:
        call: asyncio.Task[ExecResult] | None = None
        release: Callable[[], None] | None = None
        try:
            await self._ready()
            wanted = parsed(RunOnNode, payload)
            request = wanted.call()
            if wanted.objects or request.workspace is None or request.tmp is None:
                raise InvalidInput("a kernel mounts its session's files and nothing else")
            gate = self._gate(request.exec_id) if wanted.gated else None
            tenant, session = request.tenant, request.session
            request = request.model_copy(update={  # this node's own directories
                "workspace": self.workspaces.path(tenant, session),
                "tmp": self.workspaces.tmp_path(tenant, session)})
            release = await self._lease(tenant, session)  # mounted while it runs
            output: Feed[OutputChunk] = Feed()
            call = output.follow(asyncio.create_task(
                self.backend.run(request, output.put, before_start=gate)))
            async for batch, last in output.batches(COALESCE_S):
                if last:
                    result = call.result()
                    done = self.backend.runs.pop(request.exec_id, None) or KernelRun()
                    yield [*batch, result, done]
                    return
                yield list(batch)
        except Exception as exc:
            yield packed(exc)
        finally:
            if call is not None and not call.done():
                call.cancel()  # the stream was closed: the kernel is interrupted
                with contextlib.suppress(BaseException):
                    await call
            if release is not None:
                release()

    # -- the rest ---------------------------------------------------------------------------

    async def op(self, payload: bytes) -> Any:
        try:
            await self._ready()
            wanted = parsed(KernelOp, payload)
            if wanted.op == "list":
                return await self._list(wanted)
            if wanted.op in ("stop", "stop_running"):
                return await self._stop(wanted)
            if wanted.op == "kill":
                assert wanted.exec_id is not None
                await self.backend.kill(wanted.exec_id)
                return None
            if wanted.op == "save_idle":
                assert wanted.unused_s is not None
                return await self._save_idle(wanted.unused_s)
            assert wanted.session is not None
            await self.backend.end_session(wanted.session)
            return None
        except Exception as exc:
            return packed(exc)

    async def _list(self, wanted: KernelOp) -> list[dict[str, Any]]:
        assert wanted.tenant is not None and wanted.session is not None
        running = {k.name: k for k in self._of(wanted.session)}
        found = [KernelInfo(name=k.name, state="running", started_at=k.started_at,
                            last_used_at=k.last_used_at) for k in running.values()]
        release = await self._lease(wanted.tenant, wanted.session)
        try:
            at_rest = await asyncio.to_thread(
                state.saved, self.workspaces.session_dir(wanted.tenant, wanted.session))
        finally:
            release()
        found += [k for k in at_rest if k.name not in running]
        return [k.model_dump() for k in sorted(found, key=lambda k: k.name)]

    async def _stop(self, wanted: KernelOp) -> bool:
        """Stop the kernel and forget its saved names; whether there was one. A token's end
        (`stop_running`) stops only a running kernel: saved names stay."""
        assert wanted.tenant is not None and wanted.session is not None
        assert wanted.name is not None
        kernel = self.backend.live.get((wanted.session, wanted.name))
        if wanted.op == "stop_running" and kernel is None:
            return False
        if kernel is not None:
            async with contextlib.AsyncExitStack() as stack:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(STOP_WAIT_S):
                        await stack.enter_async_context(kernel.lock)
                await self.backend.stop(kernel)
        release = await self._lease(wanted.tenant, wanted.session)
        try:
            removed = await asyncio.to_thread(
                state.remove, self.workspaces.session_dir(wanted.tenant, wanted.session),
                wanted.name)
        finally:
            release()
        return kernel is not None or removed

    async def _save_idle(self, unused_s: float) -> list[str]:
        cutoff = time.time() - unused_s  # this node's clock: the control plane's may differ
        done = []
        for kernel in list(self.backend.live.values()):
            if kernel.last_used_at <= cutoff and not kernel.lock.locked():
                await self.backend.save(kernel, SAVE_TIMEOUT_S)
                done.append(f"{kernel.session}/{kernel.name}")
        return done

    def _of(self, session: str) -> list[LiveKernel]:
        return [k for k in (*self.backend.live.values(), *self.backend.stopping.values())
                if k.session == session]

    async def close(self) -> None:
        """Save every running kernel (the next execute restores it), then stop them."""
        kernels = list(self.backend.live.values())
        await asyncio.gather(*(self.backend.save(k, SAVE_TIMEOUT_S / 2) for k in kernels),
                             return_exceptions=True)
        await self.backend.close()
