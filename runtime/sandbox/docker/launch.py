"""How a call's container comes to run: two strategies over one ``DockerEngine``.

- **cold**: create (the call's ``ContainerSpec``) → [the caller's ``before_start``] →
  attach → start. ``stdin`` is the call's.
- **warm**: a container the pool launched earlier (``WarmLauncher.launch``: the same spec
  with the runner as argv, created → attached → started → the runner's ready frame read) is
  taken → [``before_start``]; the job goes to the runner as a frame before ``stdin`` (sent by
  the ``StartGate``'s step, on the thread that opens it, when it is one), and the call ends
  at the runner's end trailers.

Either way the result is a ``Started`` for ``drive.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from typing import Any

from runtime.errors import SandboxError
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.drive import Started
from runtime.sandbox.docker.engine import DockerEngine
from runtime.sandbox.docker.late_bind import BindRoot, is_template, slotted
from runtime.sandbox.docker.spec import (
    LABEL_EXEC_ID,
    LABEL_LEASE,
    LABEL_SESSION,
    LABEL_TENANT,
    ContainerSpec,
    relayed,
)
from runtime.sandbox.docker.warm_pool import WarmContainer, WarmPoolConfig
from runtime.sandbox.docker.warm_runner import LINGER_S, READY, RUNNER_ARGV, job_frame
from runtime.sandbox.docker.warm_stream import Trailers
from runtime.sandbox.models import ExecRequest


async def start_cold(engine: DockerEngine, container: str, stdin: bytes) -> Started:
    """Attach, then start, a created container (attached first: no output is missed)."""
    attached = await engine.acquire(attach.shutdown, engine.attach, container)
    try:
        await engine.call(engine.start, container)
    except BaseException:
        attach.shutdown(attached)
        raise
    return Started(container=container, attached=attached, stdin=stdin)


def start_warm(warm: WarmContainer, request: ExecRequest, *, linger: bool = False) -> Started:
    """The job for a taken warm container's runner: argv in a frame, then stdin.
    ``linger``: the runner waits to be removed after a normal exit (``warm_runner.py``)."""
    nonce = os.urandom(16).hex()
    sock = attach.raw_socket(warm.attached)

    def ended() -> None:  # both trailers seen: the job is over, stop reading
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    return Started(container=warm.id, attached=warm.attached,
                   stdin=job_frame(request.argv, nonce, LINGER_S if linger else 0.0)
                   + request.stdin,
                   trailers=Trailers(nonce, ended), lingering=linger)


class WarmLauncher:
    """Launches and discards the pool's containers (the pool is ``warm_pool.py``)."""

    def __init__(self, engine: DockerEngine, config: WarmPoolConfig, lease_grace_s: float
                 ) -> None:
        self.engine = engine
        self.config = config
        self.lease_grace_s = lease_grace_s
        self.bind_root: BindRoot | None = None  # open: pooled containers can be launched

    def spec_for(self, spec: ContainerSpec, request: ExecRequest) -> ContainerSpec:
        """The call's own spec, running the runner, with a lease covering idle + call."""
        lease = (time.time() + self.config.ready_timeout_s + self.config.idle_s
                 + request.limits.timeout_s)
        labels = {
            **spec.labels,
            LABEL_EXEC_ID: f"warm-{os.urandom(6).hex()}",
            LABEL_LEASE: str(int(lease + self.lease_grace_s) + 1),
        }
        return spec.model_copy(update={"argv": relayed(spec.argv, RUNNER_ARGV),
                                       "labels": labels})

    async def launch(self, spec: ContainerSpec, key: str) -> WarmContainer:
        """A ready container of ``spec``'s class; a tenant's template (``late_bind``) gets
        a slot of its own, bound at its workdir and /tmp."""
        engine, slot, tenant = self.engine, None, spec.labels[LABEL_TENANT]
        if is_template(spec):
            if self.bind_root is None or not self.bind_root.opened:
                raise SandboxError("pooled containers need the bind root (root, started)")
            slot = self.bind_root.slot()
            spec = slotted(spec, slot)
        try:
            container = await engine.acquire(engine.remove, engine.create, spec)
            try:
                attached = await engine.acquire(attach.shutdown, self._start_ready, container)
            except BaseException:
                await asyncio.shield(engine.call(engine.remove, container))
                raise
        except BaseException:
            if slot is not None:
                BindRoot.release(slot)
            raise
        return WarmContainer(id=container, key=key,
                             session=spec.labels[LABEL_SESSION] or f"@{tenant}",
                             tenant=tenant, image_id=spec.image, attached=attached, slot=slot)

    async def discard(self, warm: WarmContainer, *, used: bool = False) -> None:
        """Remove a warm container (unused, or ``used`` by its one call: its call closed
        the attach socket) and free its slot."""
        if not used:
            attach.shutdown(warm.attached)
        try:
            await self.engine.call(self.engine.remove, warm.id)
        finally:
            if warm.slot is not None:
                BindRoot.release(warm.slot)

    def _start_ready(self, container: str) -> Any:
        """Attach, start, and wait for the runner's ready frame; returns the attach socket."""
        attached = self.engine.attach(container)
        try:
            sock = attach.raw_socket(attached)
            self.engine.start(container)
            sock.settimeout(self.config.ready_timeout_s)
            want = bytes([attach.STDOUT, 0, 0, 0]) + len(READY).to_bytes(4, "big") + READY
            got = b""
            try:
                while len(got) < len(want) and (piece := sock.recv(len(want) - len(got))):
                    got += piece
            except OSError as exc:
                raise SandboxError(f"the warm runner did not start: {exc}") from exc
            if got != want:
                raise SandboxError(f"the warm runner did not report ready ({_said(sock, got)})")
            sock.settimeout(None)
        except BaseException:
            attach.shutdown(attached)
            raise
        return attached


def _said(sock: socket.socket, got: bytes) -> str:
    """What a runner that did not report ready wrote: its stderr line (e.g. why it stopped),
    else the raw bytes."""
    if len(got) < 8 or got[0] != attach.STDERR:
        return f"got {got[:32]!r}"
    size = min(int.from_bytes(got[4:8], "big"), 300)
    text = got[8:]
    with contextlib.suppress(OSError):
        while len(text) < size and (piece := sock.recv(size - len(text))):
            text += piece
    return text.decode(errors="replace").strip()
