"""A long-running hardened container of its own for one process (or kernel).

The spec is the one every call gets (``DockerBackend``'s ``ContainerSpec``: same image,
limits, runtime tier, tenant uid and cgroup, mounts, seccomp, labels), with what a process
needs and a call does not:

- a lease covering its lifetime cap (the reaper's ``navi.lease_until``), and the label
  ``navi.process`` naming its record, so a restarted supervisor can find and adopt it;
- nothing waits for it: its output is read by whoever attaches, and a supervisor that
  restarts attaches again. Its stdin is the one attached client's (``StdinOnce``, as a
  call's): input may come at any time, ``close_stdin`` half-closes it (EOF), and when that
  client goes (the server stops or dies) the program's stdin is closed.

Nothing is ever run inside an existing container (no ``exec``); what we do to a running one
is attach (its own stdio), send it a signal, inspect it and remove it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from runtime.egress import CONTAINER_SOCKET
from runtime.errors import SandboxError
from runtime.processes.egress import SOCK as EGRESS_SOCK
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.engine import DockerEngine
from runtime.sandbox.docker.errors import map_docker_errors
from runtime.sandbox.docker.launch import start_cold
from runtime.sandbox.docker.spec import LABEL_INSTANCE, LABEL_LEASE, BindMount, ContainerSpec
from runtime.sandbox.models import ExecRequest

LABEL_PROCESS = "navi.process"
"""The record a process (or kernel) container belongs to: adopted after a restart, or
removed with its record."""
LEASE_GRACE_S = 60.0


@dataclass
class Launched:
    container: str
    attached: Any  # the attach socket (stdin in, multiplexed output out)
    image_id: str
    runtime: str


class ProcessContainers:
    """Launch, attach, signal, inspect and remove process containers on one backend."""

    def __init__(self, backend: DockerBackend) -> None:
        self.backend = backend

    @property
    def engine(self) -> DockerEngine:
        return self.backend.engine

    async def spec(self, request: ExecRequest, *, record_id: str, lifetime_s: float,
                   egress: Path | None = None, egress_dir: BindMount | None = None,
                   mounts: tuple[BindMount, ...] = (), argv_prefix: tuple[str, ...] = (),
                   env: dict[str, str] | None = None, home: str | None = None
                   ) -> ContainerSpec:
        """The call's hardened spec for ``request``, leased for ``lifetime_s`` (``home``:
        its HOME instead of /tmp, e.g. where ``request.workdir`` mounts the workspace;
        ``egress_dir``: the directory holding a link to the ``egress`` socket, mounted
        instead of the socket itself, see ``runtime.processes.egress``)."""
        spec = await self.backend.long_lived_spec(request, lease_s=lifetime_s, egress=egress)
        lease = int(time.time() + lifetime_s + LEASE_GRACE_S) + 1  # ours: adoption reads it
        update: dict[str, Any] = {"labels": {**spec.labels, LABEL_LEASE: str(lease),
                                             LABEL_PROCESS: record_id}}
        if egress_dir is not None:
            kept = tuple(m for m in spec.mounts if m.target != CONTAINER_SOCKET)
            spec = spec.model_copy(update={"mounts": (*kept, egress_dir), "env": {
                **spec.env, "NAVI_EGRESS_SOCKET": f"{egress_dir.target}/{EGRESS_SOCK}"}})
        if mounts:
            update["mounts"] = spec.mounts + mounts
        if argv_prefix:
            update["argv"] = argv_prefix + spec.argv
        if env:
            update["env"] = {**env, **spec.env}  # never over PATH/HOME/LANG/proxy variables
        if home:
            update["env"] = {**update.get("env", spec.env), "HOME": home}
        return spec.model_copy(update=update)

    async def create(self, spec: ContainerSpec) -> str:
        return await self.engine.acquire(self.engine.remove, self.engine.create, spec)

    async def attach_and_start(self, container: str) -> Any:
        """Attach first (no output is missed), then start; the attach socket (the sandbox
        layer's own cold start: ``start_cold``)."""
        return (await start_cold(self.engine, container, b"")).attached

    async def reattach(self, container: str) -> Any:
        """A running container's stdio again (output from now on)."""
        engine = self.engine
        return await engine.acquire(attach.shutdown, engine.attach, container)

    def _signal(self, container: str, signal: str) -> bool:
        try:
            with map_docker_errors("signal the process container"):
                self.engine.api.kill(container, signal=f"SIG{signal}")
        except SandboxError as exc:
            cause = exc.__cause__
            if isinstance(cause, docker.errors.APIError) and cause.status_code in (404, 409):
                return False
            raise
        return True

    async def signal(self, container: str, signal: str) -> bool:
        """Send ``SIG<signal>`` to the container's main process; False when it is down."""
        done: bool = await self.engine.call(self._signal, container, signal)
        return done

    def _state(self, container: str) -> dict[str, Any] | None:
        try:
            return dict(self.engine.api.inspect_container(container)["State"])
        except docker.errors.NotFound:
            return None

    async def state(self, container: str) -> dict[str, Any] | None:
        """``State`` of the container, None when it is gone."""
        found: dict[str, Any] | None = await self.engine.call(self._state, container)
        return found

    async def final_state(self, container: str) -> dict[str, Any] | None:
        with contextlib.suppress(SandboxError, docker.errors.NotFound):
            state: dict[str, Any] = await self.engine.call(self.engine.final_state, container)
            return state
        return None

    async def remove(self, container: str) -> None:
        await asyncio.shield(self.engine.call(self.engine.remove, container))

    def _listed(self) -> list[dict[str, Any]]:
        instance = self.backend.instance_id
        with map_docker_errors("list process containers"):
            found = self.engine.api.containers(
                all=True, filters={"label": [f"{LABEL_INSTANCE}={instance}", LABEL_PROCESS]})
        return [c for c in found
                if (c.get("Labels") or {}).get(LABEL_INSTANCE) == instance]

    async def listed(self) -> dict[str, dict[str, Any]]:
        """This instance's process containers: record id -> the engine's summary."""
        await self.backend.start()
        found = await self.engine.call(self._listed)
        return {c["Labels"][LABEL_PROCESS]: c for c in found}
