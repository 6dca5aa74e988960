"""One kernel's container: started on the hardened spec, spoken to in JSON lines over stdio.

The container is the call's ``ContainerSpec`` (same image, limits, runtime tier, tenant uid,
seccomp profile, no network, the session's ``/workspace`` and ``/tmp``) with two changes:
its argv is the kernel runner (``runtime/kernels/runner.py``, passed inline; behind the
ports relay, which follows the session's running ports: ``PortsHub.for_kernel``) and the
kernel's own state directory (on the session's disk, mounted nowhere else) is bound
read-write at ``/run/navi/kernel``. It lives until the kernel is saved, reset or killed, so its
lease label is set far ahead (the service stops it; a restart's sweep removes what is left).

The runner's stdout is JSON lines (``KernelEvent``s, validated: the runner shares its
sandbox with tenant code); its stderr is kept (the last 4 KiB) to say why a kernel died.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runtime.errors import SandboxError
from runtime.kernels.models import KernelEvent
from runtime.logging import get_logger
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.docker.launch import start_cold
from runtime.sandbox.docker.spec import BindMount
from runtime.sandbox.models import ExecRequest

log = get_logger(__name__)

STATE_TARGET = "/run/navi/kernel"
WORKDIR = "/workspace"  # where the workspace is, unless the caller says (E2B: /home/user)
RUNNER_SOURCE = (Path(__file__).parent / "runner.py").read_text(encoding="utf-8")
MAX_LINE = 64 * 1024 * 1024  # a result line (PNG base64) longer than this: the kernel is broken
LEASE_S = 7 * 24 * 3600.0
STDERR_KEPT = 4096
START_TIMEOUT_S = 120.0


def runner_argv() -> tuple[str, ...]:
    return ("python3", "-I", "-c", RUNNER_SOURCE)


class KernelContainer:
    """A started kernel container: ``send`` a job, ``events`` carries what it says; ``None``
    on the queue is its end (EOF: it exited or was killed)."""

    def __init__(self, backend: DockerBackend, container: str, attached: Any) -> None:
        self.backend = backend
        self.id = container
        self.attached = attached
        self.sock = attach.raw_socket(attached)
        self.events: asyncio.Queue[KernelEvent | None] = asyncio.Queue()
        self.stderr = b""
        self.ended = asyncio.Event()
        self._reader: asyncio.Future[None] | None = None
        self._killed = False

    @classmethod
    async def launch(cls, backend: DockerBackend, request: ExecRequest, state_dir: Path
                     ) -> KernelContainer:
        """Create, attach, start, and wait for the runner's ``ready`` (``SandboxError`` if
        it does not come: the container is removed). ``request.argv`` is what goes before
        the runner (the ports relay's prefix, or nothing)."""
        request = request.model_copy(update={"argv": [*request.argv, *runner_argv()],
                                             "stdin": b""})
        spec = await backend.long_lived_spec(request, lease_s=LEASE_S)
        spec = spec.model_copy(update={"mounts": (*spec.mounts, BindMount(
            source=str(state_dir), target=STATE_TARGET, read_only=False))})
        if request.workdir != WORKDIR:  # E2B's /home/user: the workspace is HOME there
            spec = spec.model_copy(update={"env": {**spec.env, "HOME": request.workdir}})
        engine = backend.engine
        container = await engine.acquire(engine.remove, engine.create, spec)
        try:  # attached, then started (the sandbox layer's cold start): no output missed
            attached = (await start_cold(engine, container, b"")).attached
            kernel = cls(backend, container, attached)
            kernel._reader = attach.in_thread(kernel._read, asyncio.get_running_loop(),
                                              name=f"navi-kernel-{container[:12]}")
            try:
                async with asyncio.timeout(START_TIMEOUT_S):
                    first = await kernel.events.get()
            except TimeoutError:
                first = None
            if first is None or first.ev != "ready":
                said = kernel.stderr.decode(errors="replace").strip()[-300:]
                raise SandboxError(f"the kernel did not start{': ' + said if said else ''}")
        except BaseException:
            await asyncio.shield(engine.call(engine.remove, container))
            raise
        return kernel

    async def send(self, job: dict[str, Any]) -> None:
        line = json.dumps(job, separators=(",", ":")).encode() + b"\n"
        try:
            try:  # what the socket takes now, from the loop (no thread hop for a short job)
                sent = self.sock.send(line, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            if sent < len(line):
                await attach.in_thread(self.sock.sendall, line[sent:], name="navi-kernel-send")
        except OSError as exc:
            raise SandboxError(f"the kernel's stdin is closed: {exc}") from exc

    async def kill(self) -> None:
        """Kill and remove the container (its events end with ``None``); once."""
        if self._killed:
            return
        self._killed = True
        engine = self.backend.engine
        with contextlib.suppress(Exception):
            await engine.call(engine.kill_quietly, self.id)
        attach.shutdown(self.attached)
        await engine.call(engine.remove, self.id)

    async def oom_killed(self) -> bool:
        engine = self.backend.engine
        try:
            state = await engine.call(engine.final_state, self.id)
        except Exception:  # gone already: not known
            return False
        return bool(state.get("OOMKilled"))

    # -- the reader thread ---------------------------------------------------------------

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        put: Callable[[KernelEvent | None], None] = self.events.put_nowait
        buffer = b""
        try:
            with self.sock.makefile("rb", buffering=attach.READ_SIZE) as reader:
                while True:
                    header = reader.read(8)
                    if len(header) < 8:
                        return
                    kind, size = header[0], int.from_bytes(header[4:8], "big")
                    payload = reader.read(size)
                    if len(payload) < size:
                        return
                    if kind == attach.STDERR:
                        self.stderr = (self.stderr + payload)[-STDERR_KEPT:]
                        continue
                    buffer += payload
                    while (cut := buffer.find(b"\n")) >= 0:
                        line, buffer = buffer[:cut], buffer[cut + 1:]
                        event = _parse(line)
                        if event is not None:
                            loop.call_soon_threadsafe(put, event)
                    if len(buffer) > MAX_LINE:
                        log.warning("kernel_line_too_long", container=self.id[:12])
                        return
        except OSError:
            pass
        finally:
            loop.call_soon_threadsafe(put, None)
            loop.call_soon_threadsafe(self.ended.set)


def _parse(line: bytes) -> KernelEvent | None:
    try:
        return KernelEvent.model_validate(json.loads(line))
    except (ValueError, ValidationError):
        log.debug("kernel_line_ignored", size=len(line))
        return None
