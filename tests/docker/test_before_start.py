"""``before_start`` (the Executor's write-ahead intent) gates the job on cold and warm paths:
nothing runs in the container until it resolves, and if it fails nothing runs at all."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import docker
import pytest

from runtime.errors import AuditUnavailable
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
