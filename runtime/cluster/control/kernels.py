"""A node's kernels seen from the control plane: `RemoteKernels` (one per `RemoteNode`).

Why: a session on a node keeps its kernels there (`runtime.cluster.agent.kernels`); the
control plane's `KernelService` decides, audits and meters each execute as for a local
kernel and sends only ids and the code (`RunOnNode`, `KernelOp`: JSON the node validates).
An execute is gated like a call (nothing runs on the node before the audit intent is
durable) and streams its output back, then its result and what the kernel said
(`KernelRun`), which waits in `runs[exec_id]` for the service as the local backend's does.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from runtime.cluster.control.hop import LOST, batches, open_when_durable, wire
from runtime.cluster.kernel_wire import KernelOp
from runtime.kernels.models import KernelInfo, KernelRun
from runtime.nodes.wire import SESSION_TMP, SESSION_WORKSPACE, RunOnNode
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.models import ExecRequest, ExecResult, OutputChunk

if TYPE_CHECKING:
    from runtime.cluster.control.hop import Hop


class RemoteKernels:
    def __init__(self, hop: Hop) -> None:
        self._hop = hop
        self.runs: dict[str, KernelRun] = {}  # exec_id -> what the kernel said

    @property
    def node_id(self) -> str:
        return self._hop.node_id

    async def run(self, request: ExecRequest, on_output: OutputCallback | None = None, *,
                  before_start: Awaitable[object] | None = None) -> ExecResult:
        import ray

        link = self._hop
        names = request.model_copy(update={"workspace": SESSION_WORKSPACE, "tmp": SESSION_TMP})
        call = RunOnNode.of(names, [], before_start is not None)
        try:
            stream: Any = link.actor.kernel_run.options(num_returns="streaming").remote(
                wire(call))
        except LOST as exc:
            raise link.lost(exc) from None
        await open_when_durable(link, stream, request.exec_id, before_start)
        result: ExecResult | None = None
        try:
            async with contextlib.aclosing(batches(link, stream)) as messages:
                async for batch in messages:
                    for item in batch:
                        if isinstance(item, OutputChunk):
                            if on_output is not None:
                                await on_output(item)
                        elif isinstance(item, ExecResult):
                            result = item
                        elif isinstance(item, KernelRun):
                            self.runs[request.exec_id] = item
                    if result is not None:
                        return result
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                ray.cancel(stream)  # the node interrupts the execute
            raise
        raise link.lost(RuntimeError("the execute ended without a result"))

    async def op(self, op: KernelOp) -> Any:
        try:
            ref = self._hop.actor.kernel_op.remote(wire(op))
        except LOST as exc:
            raise self._hop.lost(exc) from None
        return await self._hop.wait(ref)

    async def kill(self, exec_id: str) -> None:
        await self.op(KernelOp(op="kill", exec_id=exec_id))

    async def list(self, tenant: str, session: str) -> list[KernelInfo]:
        found = await self.op(KernelOp(op="list", tenant=tenant, session=session))
        return [KernelInfo.model_validate(k) for k in found]

    async def stop(self, tenant: str, session: str, name: str, *, running_only: bool = False
                   ) -> bool:
        """Stop it and forget its saved names (`running_only`: only a running kernel)."""
        op = "stop_running" if running_only else "stop"
        return bool(await self.op(KernelOp(op=op, tenant=tenant, session=session, name=name)))

    async def save_idle(self, unused_s: float) -> builtins.list[str]:
        return list(await self.op(KernelOp(op="save_idle", unused_s=unused_s)))

    async def end_session(self, session: str) -> None:
        await self.op(KernelOp(op="end_session", session=session))
