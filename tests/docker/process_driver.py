"""Drive one program in a background process's container (``ProcessContainers``) to its
exit, as an ``ExecResult``: for the confinement probes (tests/conformance/harness.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from runtime.processes.container import ProcessContainers
from runtime.sandbox.backend import OutputCallback
from runtime.sandbox.docker import attach
from runtime.sandbox.docker.backend import DockerBackend
from runtime.sandbox.fake import FakeResponse
from runtime.sandbox.models import ExecRequest, ExecResult


def _read_all(attached: Any) -> tuple[bytes, bytes]:
    streams = {attach.STDOUT: bytearray(), attach.STDERR: bytearray()}
    with attach.raw_socket(attached).makefile("rb") as reader:
        while len(header := reader.read(8)) == 8:
            size = int.from_bytes(header[4:8], "big")
            streams.get(header[0], bytearray()).extend(reader.read(size))
    return bytes(streams[attach.STDOUT]), bytes(streams[attach.STDERR])


def process_driver(backend: DockerBackend) -> Any:
    containers = ProcessContainers(backend)

    async def drive(call: ExecRequest, on_output: OutputCallback | None,
                    before_start: Awaitable[object] | None,
                    scripted: FakeResponse | None) -> ExecResult:
        began = time.monotonic()
        spec = await containers.spec(call, record_id=call.exec_id, lifetime_s=60)
        container = await containers.create(spec)
        try:
            attached = await containers.attach_and_start(container)
            try:
                if call.stdin:
                    await asyncio.to_thread(attach.raw_socket(attached).sendall, call.stdin)
                out, err = await asyncio.wait_for(asyncio.to_thread(_read_all, attached),
                                                  call.limits.timeout_s)
            finally:
                attach.shutdown(attached)
            state = await containers.final_state(container) or {}
        finally:
            await containers.remove(container)
        return ExecResult(exec_id=call.exec_id, exit_code=state.get("ExitCode"), stdout=out,
                          stderr=err, oom_killed=bool(state.get("OOMKilled")),
                          duration_ms=int((time.monotonic() - began) * 1000))

    return drive
