"""``before_start`` (the Executor's write-ahead intent) gates the job on cold and warm paths:
nothing runs in the container until it resolves, and if it fails nothing runs at all. As a
``StartGate`` it may start a warm job when it opens (on the audit writer's thread), never
before."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

import docker
import pytest

from runtime.errors import AuditUnavailable
from runtime.sandbox.backend import StartGate
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.models import ExecRequest, Limits
from tests.docker.sandbox_fixtures import py
from tests.docker.warm_fixtures import wait_ready

pytestmark = pytest.mark.docker

MARK = "import time; open('ran', 'w').write(repr(time.time()))"


@pytest.fixture
def backend_config(backend_config: DockerBackendConfig) -> DockerBackendConfig:
    return backend_config.model_copy(update={"warm": WarmPoolConfig(size=1, idle_s=30)})


def request(workspace: Path, image: str, argv: list[str]) -> ExecRequest:
    return ExecRequest(image=image, argv=argv, exec_id=f"t-{uuid.uuid4().hex[:12]}",
                       workspace=workspace, session=workspace.name, tenant="test",
                       limits=Limits(timeout_s=30))


async def later(delay_s: float, error: BaseException | None = None) -> float:
    await asyncio.sleep(delay_s)
    if error is not None:
        raise error
    return time.time()


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_the_job_starts_only_after_before_start(
    backend: DockerBackend, workspace: Path, sandbox_image: str, warm: bool
) -> None:
    if warm:
        await backend.run(request(workspace, sandbox_image, ["true"]))
        await wait_ready(backend, workspace.name)
    gate = asyncio.ensure_future(later(0.5))
    result = await backend.run(request(workspace, sandbox_image, py(MARK)), before_start=gate)
    assert result.exit_code == 0
    ran_at = float((workspace / "ran").read_text())
    assert ran_at >= gate.result(), "the job ran before before_start resolved"
    assert backend.warm.stats["taken"] == (1 if warm else 0)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
async def test_a_failing_before_start_runs_nothing(
    backend: DockerBackend, workspace: Path, sandbox_image: str, docker_api: docker.APIClient,
    warm: bool,
) -> None:
    if warm:
        await backend.run(request(workspace, sandbox_image, ["true"]))
        await wait_ready(backend, workspace.name)
    ready = [c.id for queue in backend.warm._ready.values() for c in queue]
    call = request(workspace, sandbox_image, py(MARK))
    gate = asyncio.ensure_future(later(0.3, AuditUnavailable("audit store write failed")))
    with pytest.raises(AuditUnavailable):
        await backend.run(call, before_start=gate)
    await asyncio.sleep(0.5)
    assert not (workspace / "ran").exists(), "the job ran although before_start failed"
    left = docker_api.containers(all=True, filters={"label": f"navi.exec_id={call.exec_id}"})
    left += [c for c in ready if docker_api.containers(all=True, filters={"id": c})]
    assert left == [], "the prepared container was not removed"
    assert len(ready) == (1 if warm else 0)


async def test_a_start_gate_starts_a_warm_job_when_it_opens_not_before(
    backend: DockerBackend, workspace: Path, sandbox_image: str
) -> None:
    """The Executor's gate opens on the audit writer's thread the moment the intent is
    durable; the loop learns of it later. The warm job starts at the opening, never before."""
    await backend.run(request(workspace, sandbox_image, ["true"]))
    await wait_ready(backend, workspace.name)
    loop = asyncio.get_running_loop()
    durable: asyncio.Future[None] = loop.create_future()
    gate = StartGate()
    gate.follows(durable)
    times: dict[str, float] = {}

    def writer_thread() -> None:  # as the audit writer: the record is durable, then ...
        time.sleep(0.5)
        times["opened"] = time.time()
        gate.open()
        time.sleep(1.0)  # ... the loop hears of it only later
        times["told"] = time.time()
        loop.call_soon_threadsafe(durable.set_result, None)

    thread = threading.Thread(target=writer_thread)
    thread.start()
    result = await backend.run(request(workspace, sandbox_image, py(MARK)), before_start=gate)
    thread.join()
    assert result.exit_code == 0 and backend.warm.stats["taken"] == 1
    ran_at = float((workspace / "ran").read_text())
    assert ran_at >= times["opened"], "the job ran before the gate opened"
    assert ran_at < times["told"], "the job waited for the event loop, not for the gate"


async def test_a_start_gate_that_never_opens_runs_nothing(
    backend: DockerBackend, workspace: Path, sandbox_image: str
) -> None:
    await backend.run(request(workspace, sandbox_image, ["true"]))
    await wait_ready(backend, workspace.name)
    gate = StartGate()  # its intent failed: the writer never opened it
    gate.follows(asyncio.ensure_future(later(0.3, AuditUnavailable("audit store write failed"))))
    with pytest.raises(AuditUnavailable):
        await backend.run(request(workspace, sandbox_image, py(MARK)), before_start=gate)
    await asyncio.sleep(0.5)
    assert not (workspace / "ran").exists(), "the job ran although the gate never opened"
