"""The reaper on a real engine: leases, start-up reconcile, a supervisor killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from tests.docker.sandbox_fixtures import sweep

pytestmark = pytest.mark.docker


@pytest.fixture
def other_instance(docker_api: docker.APIClient, test_instance_id: str) -> Iterator[str]:
    """Another supervisor's instance id on the same engine (its containers we made ourselves)."""
    other = f"{test_instance_id}-other"
    yield other
    sweep(docker_api, other)


def make_container(api: docker.APIClient, image: str, instance: str, lease: str) -> str:
    labels = {"navi.instance": instance, "navi.lease_until": lease, "navi.exec_id": "reaper-t"}
    return str(api.create_container(image, command=["true"], labels=labels)["Id"])


def exists(api: docker.APIClient, container: str) -> bool:
    try:
        api.inspect_container(container)
        return True
    except docker.errors.NotFound:
        return False


async def test_reap_expired_removes_only_our_expired_containers(
    backend: DockerBackend, docker_api: docker.APIClient, sandbox_image: str, other_instance: str
) -> None:
    now = int(time.time())
    ours = backend.instance_id
    expired = make_container(docker_api, sandbox_image, ours, str(now - 10))
    broken = make_container(docker_api, sandbox_image, ours, "not-a-number")
    live = make_container(docker_api, sandbox_image, ours, str(now + 600))
    foreign = make_container(docker_api, sandbox_image, other_instance, str(now - 10))

    removed = await backend.reaper().reap_expired()

    assert set(removed) == {expired, broken}
    assert not exists(docker_api, expired) and not exists(docker_api, broken)
    assert exists(docker_api, live) and exists(docker_api, foreign)


async def test_reconcile_startup_removes_all_of_ours_and_nothing_else(
    backend: DockerBackend, docker_api: docker.APIClient, sandbox_image: str, other_instance: str
) -> None:
    now = int(time.time())
    live = make_container(docker_api, sandbox_image, backend.instance_id, str(now + 600))
    foreign = make_container(docker_api, sandbox_image, other_instance, str(now + 600))

    removed = await backend.reaper().reconcile_startup()

    assert removed == [live] and not exists(docker_api, live)
    assert exists(docker_api, foreign)


async def test_periodic_reaper_sweeps(
    backend: DockerBackend, docker_api: docker.APIClient, sandbox_image: str
) -> None:
    expired = make_container(docker_api, sandbox_image, backend.instance_id, "1")
    task = backend.reaper().start_periodic(0.2)
    try:
        for _ in range(50):
            if not exists(docker_api, expired):
                break
            await asyncio.sleep(0.1)
        assert not exists(docker_api, expired)
    finally:
        task.cancel()


CHILD = """
import asyncio, sys
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.models import ExecRequest, Limits

async def main():
    backend = DockerBackend(DockerBackendConfig.model_validate_json(sys.argv[1]))
    request = ExecRequest(image=sys.argv[2], argv=["sleep", "300"], exec_id="orphan-1",
                          limits=Limits(timeout_s=300))
    await backend.run(request)

asyncio.run(main())
"""


async def test_reconcile_removes_containers_of_a_supervisor_killed_with_sigkill(
    tmp_path: Path, docker_api: docker.APIClient, sandbox_image: str, test_instance_id: str
) -> None:
    config = DockerBackendConfig(
        data_dir=tmp_path,
        workspaces_root=tmp_path / "workspaces",
        instance_id=test_instance_id,
        harden_workspaces_root=False,
    )
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, config.model_dump_json(), sandbox_image],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    label = {"label": [f"navi.instance={test_instance_id}", "navi.exec_id=orphan-1"]}
    try:
        for _ in range(200):
            running = docker_api.containers(filters=label)
            if running:
                break
            await asyncio.sleep(0.1)
        assert running, "the child supervisor never started its call"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    orphan = running[0]["Id"]
    await asyncio.sleep(0.5)
    assert docker_api.inspect_container(orphan)["State"]["Running"], "orphan should outlive it"

    restarted = DockerBackend(config)
    await restarted.start()
    try:
        removed = await restarted.reaper().reconcile_startup()
    finally:
        await restarted.close()

    assert orphan in removed
    assert not exists(docker_api, orphan)
