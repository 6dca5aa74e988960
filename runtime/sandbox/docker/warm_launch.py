"""Engine steps of warm containers, mixed into ``DockerBackend`` (the pool is ``warm_pool.py``).

A warm container is the call's own ``ContainerSpec`` (same confinement, same workspace and
mounts) with the runner as argv (``warm_runner.py``) and a lease covering ready + idle +
the call; launching it is create → attach → start → read the runner's ready frame.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from docker import APIClient

from runtime.errors import SandboxError
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.errors import map_docker_errors
from runtime.sandbox.docker.spec import (
    LABEL_EXEC_ID,
    LABEL_LEASE,
    LABEL_SESSION,
    LABEL_TENANT,
    ContainerSpec,
    relayed,
)
from runtime.sandbox.docker.warm_pool import WarmContainer
from runtime.sandbox.docker.warm_runner import READY, RUNNER_ARGV
from runtime.sandbox.docker.warm_stream import Trailers, oom_kills
from runtime.sandbox.models import ExecRequest

T = TypeVar("T")


class WarmLaunchMixin:
    """Uses the backend's config, api, _call, _acquire, _create and _remove."""

    config: Any
    api: APIClient
    _call: Callable[..., Any]
    _acquire: Callable[..., Any]
    _create: Callable[[ContainerSpec], str]
    _remove: Callable[[str], None]
    _final_state: Callable[[str], dict[str, Any]]

    def _warm_spec(self, spec: ContainerSpec, request: ExecRequest) -> ContainerSpec:
        """The call's own spec, running the runner, with a lease covering idle + call."""
        warm = self.config.warm
        lease = time.time() + warm.ready_timeout_s + warm.idle_s + request.limits.timeout_s
        labels = {
            **spec.labels,
            LABEL_EXEC_ID: f"warm-{os.urandom(6).hex()}",
            LABEL_LEASE: str(int(lease + self.config.lease_grace_s) + 1),
        }
        return spec.model_copy(update={"argv": relayed(spec.argv, RUNNER_ARGV),
                                       "labels": labels})

    async def _launch_warm(self, spec: ContainerSpec, key: str) -> WarmContainer:
        container = await self._acquire(self._remove, self._create, spec)
        try:
            attached = await self._acquire(attach.shutdown, self._start_ready, container)
        except BaseException:
            await asyncio.shield(self._call(self._remove, container))
            raise
        return WarmContainer(
            id=container,
            key=key,
            session=spec.labels[LABEL_SESSION],
            tenant=spec.labels[LABEL_TENANT],
            image_id=spec.image,
            attached=attached,
        )

    def _start_ready(self, container: str) -> Any:
        """Attach, start, and wait for the runner's ready frame; returns the attach socket."""
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1, "logs": 0}
        with map_docker_errors("attach to the sandbox container"):
            attached = self.api.attach_socket(container, params)
        try:
            sock = attach.raw_socket(attached)
            with map_docker_errors("start the sandbox container"):
                self.api.start(container)
            sock.settimeout(self.config.warm.ready_timeout_s)
            want = bytes([attach.STDOUT, 0, 0, 0]) + len(READY).to_bytes(4, "big") + READY
            got = b""
            try:
                while len(got) < len(want) and (piece := sock.recv(len(want) - len(got))):
                    got += piece
            except OSError as exc:
                raise SandboxError(f"the warm runner did not start: {exc}") from exc
            if got != want:
                raise SandboxError(f"the warm runner did not report ready (got {got[:32]!r})")
            sock.settimeout(None)
        except BaseException:
            attach.shutdown(attached)
            raise
        return attached

    async def _discard_warm(self, warm: WarmContainer) -> None:
        attach.shutdown(warm.attached)
        await self._call(self._remove, warm.id)

    async def _exit_state(
        self, container: str, trailers: Trailers | None, timed_out: bool,
        cgroup_parent: str | None = None,
    ) -> dict[str, Any]:
        """Exit code and OOM kill: from a warm runner's trailer when the job exited normally
        and the cgroup counts no OOM kill, else from the engine once the container is down."""
        code = trailers.code if trailers is not None else None
        if (code is not None and code >= 0 and not timed_out
                and oom_kills(container, cgroup_parent) == 0):
            return {"ExitCode": code, "OOMKilled": False}
        state: dict[str, Any] = await self._call(self._final_state, container)
        return state
