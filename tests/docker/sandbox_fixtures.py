"""Fixtures for tests against a real Docker engine (imported by tests/docker and tests/security).

Each test run gets its own ``navi.instance`` label value; every container the run creates
carries it, and the sweep removes exactly those (after each test and at the end), never
anything else on the engine.

Image: ``NAVI_TEST_IMAGE``, default ``navi/python:latest`` -- an image `make test` builds, so
nothing here depends on an image made by hand on one machine.

A conftest takes the fixtures with ``from tests.docker.sandbox_fixtures import *`` (they are
this module's ``__all__``); ``engine_config``, ``started_backend`` and ``new_workspace`` are
the same set-up for code that makes its own backend (the conformance harness's adapters).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.hostmounts import mount_options
from runtime.sandbox.models import ExecRequest, ExecResult, Limits

__all__ = [  # the fixtures, for a conftest's star import
    "backend",
    "backend_config",
    "docker_api",
    "run",
    "sandbox_data_dir",
    "sandbox_image",
    "test_instance_id",
    "workspace",
]

DEFAULT_IMAGE = "navi/python:latest"
SANDBOX_UID = 65534

RunFn = Callable[..., Awaitable[ExecResult]]


def sweep(api: docker.APIClient, instance_id: str) -> list[str]:
    """Remove the containers of this test run (by its unique instance label) only."""
    label = {"label": f"navi.instance={instance_id}"}
    found = api.containers(all=True, filters=label)
    for container in found:
        try:
            api.remove_container(container["Id"], force=True)
        except docker.errors.APIError as exc:  # gone already, or its removal is under way
            if exc.status_code not in (404, 409):
                raise
    for _ in range(50):
        if not api.containers(all=True, filters=label):
            break
        time.sleep(0.1)
    return [c["Id"] for c in found]


@pytest.fixture(scope="session")
def docker_api() -> Iterator[docker.APIClient]:
    api = docker.APIClient(version="auto", timeout=60)
    yield api
    api.close()


@pytest.fixture(scope="session")
def sandbox_image(docker_api: docker.APIClient) -> str:
    wanted = os.environ.get("NAVI_TEST_IMAGE", DEFAULT_IMAGE)
    try:
        docker_api.inspect_image(wanted)
        return wanted
    except docker.errors.ImageNotFound:
        pytest.fail(f"test image {wanted} is missing; build it with `navi images build`")


@pytest.fixture(scope="session")
def test_instance_id(docker_api: docker.APIClient) -> Iterator[str]:
    instance_id = f"navi-test-{uuid.uuid4().hex[:12]}"
    yield instance_id
    sweep(docker_api, instance_id)


@pytest.fixture(scope="session")
def sandbox_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    data_dir = tmp_path_factory.mktemp("navi-data")
    data_dir.chmod(0o755)
    yield data_dir
    root = os.path.realpath(data_dir / "workspaces")
    if mount_options(Path(root))[0] == root:  # the backend bind-remounted it nosuid,nodev
        subprocess.run(["umount", root], check=False)


def engine_config(data_dir: Path, instance_id: str) -> DockerBackendConfig:
    return DockerBackendConfig(
        data_dir=data_dir,
        workspaces_root=data_dir / "workspaces",
        sandbox_uid=SANDBOX_UID,
        instance_id=instance_id,
    )


@contextlib.asynccontextmanager
async def started_backend(
    config: DockerBackendConfig, api: docker.APIClient, instance_id: str
) -> AsyncIterator[DockerBackend]:
    """A started ``DockerBackend``; closed, and the run's containers swept, after."""
    sandbox = DockerBackend(config)
    await sandbox.start()
    try:
        yield sandbox
    finally:
        await sandbox.close()
        sweep(api, instance_id)


def new_workspace(config: DockerBackendConfig) -> Path:
    """A fresh workspace under the backend's root, owned by the sandbox uid."""
    path = config.workspaces_root / f"ws-{uuid.uuid4().hex[:10]}"
    path.mkdir(parents=True)
    os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


@pytest.fixture
def backend_config(sandbox_data_dir: Path, test_instance_id: str) -> DockerBackendConfig:
    return engine_config(sandbox_data_dir, test_instance_id)


@pytest.fixture
async def backend(
    backend_config: DockerBackendConfig, docker_api: docker.APIClient, test_instance_id: str
) -> AsyncIterator[DockerBackend]:
    async with started_backend(backend_config, docker_api, test_instance_id) as sandbox:
        yield sandbox


@pytest.fixture
def workspace(backend: DockerBackend, backend_config: DockerBackendConfig) -> Path:
    return new_workspace(backend_config)


@pytest.fixture
def run(backend: DockerBackend, sandbox_image: str, workspace: Path) -> RunFn:
    """``await run(argv, stdin=..., limits=..., **request_fields)`` in the test workspace."""

    async def _run(
        argv: list[str], *, limits: Limits | None = None, on_output: Any = None, **fields: Any
    ) -> ExecResult:
        request = ExecRequest(
            image=fields.pop("image", sandbox_image),
            argv=argv,
            exec_id=fields.pop("exec_id", f"t-{uuid.uuid4().hex[:12]}"),
            workspace=fields.pop("workspace", workspace),
            session=fields.pop("session", workspace.name),
            tenant="test",
            limits=limits or Limits(timeout_s=30),
            **fields,
        )
        return await backend.run(request, on_output)

    return _run


def py(code: str) -> list[str]:
    return ["python3", "-c", code]
