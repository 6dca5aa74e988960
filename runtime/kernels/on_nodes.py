"""Where a kernel runs: this machine's `KernelBackend`, or the session's cluster node.

`KernelBackends` is the sandbox backend of the kernel service's Executor: an execute of a
session on this machine goes to the local `KernelBackend`; one of a session on a node goes
to that node's `KernelsOnNode` (`runtime.cluster.control.kernels`), whose node runs the
kernel's container on its own engine with the session's disk there. Either way what the
kernel said waits in the local backend's `runs[exec_id]` for the service.

`NodeTokenWatch`: a node kernel ends (its names not saved) when the token of the execute
that last used it is revoked or expires: the control plane holds the watch and sends the
node a stop for it, if it still runs.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from runtime.errors import Conflict
from runtime.kernels.backend import KernelBackend
from runtime.kernels.models import KernelInfo, KernelRun
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.models import ExecRequest, ExecResult

if TYPE_CHECKING:
    from runtime.nodes.registry import Nodes

log = get_logger(__name__)
LOCAL = "local"


class KernelsOnNode(Protocol):
    """A node's kernels as the control plane reaches them (`RemoteKernels`)."""

    runs: dict[str, KernelRun]  # exec_id -> what the kernel said

    @property
    def node_id(self) -> str: ...

    async def run(self, request: ExecRequest, on_output: OutputCallback | None = None, *,
                  before_start: Awaitable[object] | None = None) -> ExecResult: ...

    async def kill(self, exec_id: str) -> None: ...

    async def list(self, tenant: str, session: str) -> builtins.list[KernelInfo]: ...

    async def stop(self, tenant: str, session: str, name: str, *, running_only: bool = False
                   ) -> bool: ...

    async def save_idle(self, unused_s: float) -> builtins.list[str]: ...

    async def end_session(self, session: str) -> None: ...


class KernelBackends:
    def __init__(self, local: KernelBackend, nodes: Nodes | None) -> None:
        self.local = local
        self.nodes = nodes
        self.known: set[tuple[str, str, str]] = set()  # (node, session, name) seen to exist
        self._running: dict[str, KernelsOnNode] = {}  # exec_id -> the node running it

    def of(self, subject: Subject) -> KernelsOnNode | None:
        """The node's kernels for a session on a node; None on this machine."""
        if subject.node == LOCAL:
            return None
        return self.remote(subject.node)

    def remote(self, node_id: str) -> KernelsOnNode:
        if self.nodes is None:
            raise Conflict("this server has no cluster nodes")
        kernels = getattr(self.nodes.get(node_id), "kernels", None)
        if kernels is None:
            raise Conflict(f"node {node_id!r} runs no kernels")
        return kernels  # type: ignore[no-any-return]

    def remotes(self) -> builtins.list[KernelsOnNode]:
        if self.nodes is None:
            return []
        found = (getattr(node, "kernels", None) for node in self.nodes.all())
        return [k for k in found if k is not None]

    # -- SandboxBackend --------------------------------------------------------------------

    async def run(self, request: ExecRequest, on_output: OutputCallback | None = None, *,
                  before_start: Awaitable[object] | None = None,
                  settled: Awaitable[object] | None = None) -> ExecResult:
        if request.node == LOCAL:
            return await self.local.run(request, on_output, before_start=before_start,
                                        settled=settled)
        remote = self.remote(request.node)
        self._running[request.exec_id] = remote
        try:
            result = await remote.run(request, on_output, before_start=before_start)
        finally:
            self._running.pop(request.exec_id, None)
            said = remote.runs.pop(request.exec_id, None)
            if said is not None:
                self.local.runs[request.exec_id] = said
        self.known.add((request.node, request.session, request.argv[1]))
        return result

    async def kill(self, exec_id: str) -> None:
        remote = self._running.get(exec_id)
        if remote is None:
            await self.local.kill(exec_id)
        else:
            with contextlib.suppress(Exception):  # the node lost: nothing runs there
                await remote.kill(exec_id)

    async def release_session(self, session: str) -> None:
        await self.local.release_session(session)

    async def close(self) -> None:
        await self.local.close()


class NodeTokenWatch:
    """(node, session, kernel) -> the watch of the token that last used it."""

    def __init__(self, backends: KernelBackends) -> None:
        self.backends = backends
        self._watches: dict[tuple[str, str, str], tuple[str, asyncio.Task[None]]] = {}

    def watch(self, subject: Subject, name: str,
              token_ended: Callable[[Any], Awaitable[None]], token: Any) -> None:
        key = (subject.node, subject.session, name)
        held = self._watches.get(key)
        if held is not None and held[0] == subject.user and not held[1].done():
            return
        if held is not None:
            held[1].cancel()
        task = asyncio.ensure_future(self._end_with(subject, name, token_ended, token))
        self._watches[key] = (subject.user, task)

    async def _end_with(self, subject: Subject, name: str,
                        token_ended: Callable[[Any], Awaitable[None]], token: Any) -> None:
        await token_ended(token)
        log.info("kernel_ended_with_its_token", session=subject.session, kernel=name,
                 node=subject.node)
        self._watches.pop((subject.node, subject.session, name), None)
        with contextlib.suppress(Exception):
            await self.backends.remote(subject.node).stop(
                subject.tenant, subject.session, name, running_only=True)

    def drop(self, session: str, name: str | None = None) -> None:
        """The kernel (every one of the session when `name` is None) is gone."""
        for key in [k for k in self._watches if k[1] == session and name in (None, k[2])]:
            self._watches.pop(key)[1].cancel()
        self.backends.known -= {k for k in self.backends.known
                                if k[1] == session and name in (None, k[2])}

    def close(self) -> None:
        for _token, task in self._watches.values():
            task.cancel()
        self._watches.clear()
