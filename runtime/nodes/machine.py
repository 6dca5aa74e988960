"""One machine's execution side, started the same way by `navi serve` alone and by a node
agent: its session disks and their mount guard (`Workspaces`), its engine with its images,
warm pool and egress proxies (`DockerBackend`), the reaper, idle release and the tenant
disk limits a disk mounted again is admitted against.

Why: both used to build this themselves and drifted (the node agent never set a tenant
limit, so a disk mounted again after its restart was admitted against none). Now the
server's start-up (`runtime.api.app`) and `runtime.cluster.agent.NodeAgent` differ only in
what they hand in: where tenant limits come from (the policy there, what the control plane
said here) and what a restart keeps (adopted processes there).

    machine = Machine(settings, instance_id=..., tenant_limit=..., count_also=...)
    await machine.open_disks()                      # before the engine mounts anything
    tasks = machine.start_idle_release()            # idle sessions' disks released
    tasks += await machine.start_engine(adopt=...)  # engine, reaper sweep, periodic reaper
    await machine.close()          # (the server's Services close backend and disks itself)

The session disks and the engine need each other: a disk released drops its session's warm
containers first, and the engine makes no warm container for a released disk. Both are given
what they need at construction: the engine the disks' `Activity` (made first), the disks a
drop that goes through the engine on the machine's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from runtime.config import Settings
from runtime.egress.rules import DeniedAddresses
from runtime.logging import get_logger
from runtime.sandbox.backend import SandboxBackend
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.instance import load_instance_id
from runtime.workspace import Workspaces
from runtime.workspace.activity import Activity, call_on_loop, release_idle
from runtime.workspace.disk import NOTHING, TenantBytes

log = get_logger(__name__)


class Machine:
    """`backend`: a given one (tests, `navi exec`) instead of the Docker engine, taken as it
    is; `disks`: session disks on, off, or None (when the machine can); `tenant_limit`: a
    tenant's disk quota in bytes a disk mounted again is admitted against (called on a worker
    thread); `count_also`: a tenant's bytes kept beside its session disks, counted in its
    quota; `egress_denied`: addresses no call's egress reaches (a cluster node: its machines);
    `elsewhere`: what a tenant holds on a cluster's other machines (a node: asked of its
    control plane), counted when a disk is mounted again or copied on.
    """

    def __init__(self, settings: Settings, *, instance_id: str | None = None,
                 backend: SandboxBackend | None = None, disks: bool | None = None,
                 tenant_limit: Callable[[str], int | None] = lambda tenant_id: None,
                 count_also: Callable[[str], int] = lambda tenant_id: 0,
                 egress_denied: DeniedAddresses | None = None,
                 elsewhere: Callable[[str], TenantBytes] = lambda tenant_id: NOTHING) -> None:
        self.settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None  # the engine's, once opened
        activity = Activity(settings.session_idle_s)
        if backend is None:
            backend = DockerBackend.from_settings(
                settings, instance_id=instance_id or load_instance_id(settings.data_dir),
                warm_pool=True, egress_denied=egress_denied,
                may_launch=lambda tenant_id, session_id: activity.may_launch(
                    (tenant_id, session_id)))
        self.backend = backend
        self.workspaces = Workspaces.from_settings(
            settings, disks_on=disks, activity=activity, count_also=count_also,
            drop_containers=self._drop_containers, tenant_limit=tenant_limit,
            elsewhere=elsewhere)
        self.tasks: list[asyncio.Task[Any]] = []

    @property
    def docker(self) -> DockerBackend | None:
        return self.backend if isinstance(self.backend, DockerBackend) else None

    def _drop_containers(self, session_id: str) -> None:
        """A session's warm containers removed (its disk is being released), on the loop the
        machine was opened on; none exist before it was."""
        loop, backend = self._loop, self.backend
        if loop is not None:
            call_on_loop(loop, lambda: backend.release_session(session_id))

    async def open_disks(self) -> None:
        """Release what a killed instance left mounted, then guard our mounts."""
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.workspaces.start)

    def start_idle_release(self) -> list[asyncio.Task[Any]]:
        """Idle sessions' disks released (their warm containers first; no warm refill for a
        released disk). The background tasks it started."""
        started = [asyncio.create_task(release_idle(self.workspaces))]
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
