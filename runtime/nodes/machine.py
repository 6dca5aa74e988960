"""One machine's execution side, started the same way by `navi serve` alone and by a node
agent: its session disks and their mount guard (`Workspaces`), its engine with its images,
warm pool and egress proxies (`DockerBackend`), the reaper, idle release and the tenant
disk limits a disk mounted again is admitted against.

Why: both used to build this themselves and drifted (the node agent never set a tenant
limit, so a disk mounted again after its restart was admitted against none). Now the
server's start-up (`runtime.api.app`) and `runtime.nodes.agent.NodeAgent` differ only in
what they hand in: where tenant limits come from (the policy there, what the control plane
said here) and what a restart keeps (adopted processes there).

    machine = Machine(settings, instance_id=..., backend=None, disks=None)
    await machine.open_disks()                      # before the engine mounts anything
    tasks = machine.bind(tenant_limit)              # idle release, warm refill, limits
    tasks += await machine.start_engine(adopt=...)  # engine, reaper sweep, periodic reaper
    await machine.close()          # (the server's Services close backend and disks itself)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from runtime.config import Settings
from runtime.logging import get_logger
from runtime.sandbox.backend import SandboxBackend
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.instance import load_instance_id
from runtime.workspace import Workspaces
from runtime.workspace.activity import call_on_loop, release_idle

log = get_logger(__name__)


class Machine:
    """`backend`: a given one (tests, `navi exec`) instead of the Docker engine; `disks`:
    session disks on, off, or None (when the machine can)."""

    def __init__(self, settings: Settings, *, instance_id: str | None = None,
                 backend: SandboxBackend | None = None, disks: bool | None = None) -> None:
        self.settings = settings
        self.workspaces = Workspaces.from_settings(settings)
        if disks is not None:
            self.workspaces.disks.enabled = disks and self.workspaces.disks.enabled
        if backend is None:
            backend = DockerBackend.from_settings(
                settings, instance_id=instance_id or load_instance_id(settings.data_dir),
                warm_pool=True)
        self.backend = backend
        self.tasks: list[asyncio.Task[Any]] = []

    @property
    def docker(self) -> DockerBackend | None:
        return self.backend if isinstance(self.backend, DockerBackend) else None

    async def open_disks(self) -> None:
        """Release what a killed instance left mounted, then guard our mounts."""
        await asyncio.to_thread(self.workspaces.start)

    def bind(self, tenant_limit: Callable[[str], int | None]) -> list[asyncio.Task[Any]]:
        """Idle sessions' disks released (their warm containers first; no warm refill for a
        released disk); a disk mounted again admitted against `tenant_limit(tenant)` (bytes;
        called on a worker thread). The background tasks it started."""
        loop = asyncio.get_running_loop()
        workspaces, backend = self.workspaces, self.backend
        workspaces.drop_containers = lambda session_id: call_on_loop(
            loop, lambda: backend.release_session(session_id))
        workspaces.tenant_limit = tenant_limit
        if self.docker is not None:
            self.docker.may_launch = workspaces.may_launch
        started = [asyncio.create_task(release_idle(workspaces))]
        self.tasks += started
        return started

    async def start_engine(self, adopt: Callable[[], Awaitable[frozenset[str]]] | None = None
                           ) -> list[asyncio.Task[Any]]:
        """Connect the engine and sweep our leftovers (but what `adopt` keeps), then reap
        periodically (the task it started). Raises the engine's `NaviError` when it is not
        there."""
        docker = self.docker
        if docker is None:
            return []
        await docker.start()
        reaper = docker.reaper()
        kept = await adopt() if adopt is not None else frozenset()
        removed = await reaper.reconcile_startup(keep=kept)
        if removed:
            log.info("startup_reconcile", removed=len(removed))
        started = [reaper.start_periodic(self.settings.reaper_interval_s)]
        self.tasks += started
        return started

    async def close(self) -> None:
        """Background work ended, the engine's containers gone, then the disks released."""
        for task in self.tasks:
            task.cancel()
        await self.backend.close()
        await asyncio.to_thread(self.workspaces.close)
