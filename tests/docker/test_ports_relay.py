"""Session ports on the real engine, under runc and gVisor: a long-running container serves a
port through the relay (it connects OUT to the session's unix socket; no network, nothing
published), the session's later calls reach it at 127.0.0.1:<port>, another session cannot."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.errors import NotFound, PortUnreachable
from runtime.ports import PortsHub
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.models import ExecRequest, ExecResult, Invocation, Limits
from tests.docker.sandbox_fixtures import new_workspace, py

pytestmark = pytest.mark.docker

PORT = 8123
SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = ("hello from " + sys.argv[1] + " " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", PORT), H).serve_forever()  # gVisor: no threads here
""".replace("PORT", str(PORT))

FETCH = """
import sys, urllib.request
try:
    print(urllib.request.urlopen("http://127.0.0.1:PORT/x", timeout=10).read().decode())
except Exception as exc:
    print("failed:", type(exc).__name__, exc)
""".replace("PORT", str(PORT))


def request(inv: Invocation, image: str, session: str, tier: str, timeout: float = 30
            ) -> ExecRequest:
    return ExecRequest(**{name: getattr(inv, name) for name in Invocation.model_fields},
                       image=image, exec_id=f"t-{uuid.uuid4().hex[:12]}", session=session,
                       tenant="test", limits=Limits(timeout_s=timeout, runtime=tier))


@contextlib.asynccontextmanager
async def served(hub: PortsHub, backend: DockerBackend, image: str, workspace: Path,
                 tier: str) -> AsyncIterator[str]:
    """A process of the session (a long call) serving PORT; yields its session id."""
    session = workspace.name
    inv = await hub.for_process(session, "p_1", [PORT],
                                Invocation(argv=[*py(SERVER), "A"], workspace=workspace))
    task = asyncio.create_task(backend.run(request(inv, image, session, tier, timeout=120)))
    try:
        for _ in range(200):
            if task.done():
                pytest.fail(f"the process ended: {task.result()!r}")
            try:
                _, writer = await hub.open(session, PORT)
                writer.close()
                break
            except PortUnreachable:
                await asyncio.sleep(0.1)
        else:
            pytest.fail("the port never became reachable")
        yield session
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await hub.process_ended("p_1")


async def call(hub: PortsHub, backend: DockerBackend, image: str, workspace: Path, tier: str
               ) -> ExecResult:
    inv = hub.for_call(workspace.name, Invocation(argv=py(FETCH), workspace=workspace))
    return await backend.run(request(inv, image, workspace.name, tier))


@pytest.mark.parametrize("tier", ["runc", "gvisor"])
async def test_a_later_call_reaches_the_port_and_another_session_does_not(
    tier: str, backend: DockerBackend, backend_config: DockerBackendConfig, sandbox_image: str,
) -> None:
    hub = PortsHub(backend_config.data_dir / f"ports-{uuid.uuid4().hex[:6]}")
    mine, other = new_workspace(backend_config), new_workspace(backend_config)
    try:
        async with served(hub, backend, sandbox_image, mine, tier) as session:
            # the supervisor's side: a byte stream to the port, HTTP over it
            reader, writer = await hub.open(session, PORT)
            writer.write(b"GET /direct HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert b"hello from A /direct" in await reader.read()
            writer.close()
            # the session's later call, at 127.0.0.1:<port> inside its own container
            result = await call(hub, backend, sandbox_image, mine, tier)
            assert result.stdout.decode().strip() == "hello from A /x", result
            # another session: no listener, no socket, no port
            result = await call(hub, backend, sandbox_image, other, tier)
            assert result.stdout.startswith(b"failed:"), result
            with pytest.raises(NotFound):
                await hub.open(other.name, PORT)
            probe = await backend.run(request(Invocation(
                argv=["sh", "-c", "ls /run/navi/ports /run/navi/serve 2>&1; echo done"],
                workspace=other), sandbox_image, other.name, tier))
            assert b"connect.sock" not in probe.stdout and b"done" in probe.stdout
    finally:
        await hub.close()


async def test_nothing_listening_is_unreachable_then_reachable(
    backend: DockerBackend, backend_config: DockerBackendConfig, sandbox_image: str,
) -> None:
    """A declared port whose process does not listen (yet): 502-style PortUnreachable."""
    hub = PortsHub(backend_config.data_dir / f"ports-{uuid.uuid4().hex[:6]}")
    workspace = new_workspace(backend_config)
    session = workspace.name
    code = "import sys, time; time.sleep(3); src = sys.argv[1]; sys.argv[1:] = ['B']; exec(src)"
    inv = await hub.for_process(session, "p_2", [PORT],
                                Invocation(argv=[*py(code), SERVER, "B"], workspace=workspace))
    task = asyncio.create_task(backend.run(request(inv, sandbox_image, session, "runc", 60)))
    try:
        with pytest.raises(PortUnreachable):
            await hub.open(session, PORT)
        for _ in range(100):
            try:
                reader, writer = await hub.open(session, PORT)
                break
            except PortUnreachable:
                await asyncio.sleep(0.1)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert b"hello from B" in await reader.read()
        writer.close()
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await hub.close()
