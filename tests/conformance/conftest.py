"""One behavioural contract for every ``SandboxBackend``: the conformance suite.

After inspect_ai's sandbox ``self_check``: the same tests run against each backend and tier,

    fake                  FakeBackend (protocol behaviour only: it runs nothing)
    runc-cold, runc-warm  DockerBackend on runc, a fresh container / a warm one per call
    gvisor-cold, -warm    DockerBackend on gVisor's runsc

so a new engine or tier is proven by adding it here, not trusted. A test that needs a real
program to run calls ``sandbox.needs_execution()`` and is skipped, with that reason, for the
fake. The confinement probes (``tests/security/test_confinement.py``) run the same tiers.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime.sandbox.backend import OutputCallback, SandboxBackend
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.warm_pool import WarmPoolConfig
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.sandbox.models import ExecRequest, ExecResult, Limits
from tests.docker.sandbox_fixtures import (  # noqa: F401 - engine fixtures, used by name
    backend,
    docker_api,
    sandbox_data_dir,
    sandbox_image,
    test_instance_id,
    workspace,
)
from tests.docker.warm_fixtures import wait_ready

KINDS = [
    pytest.param("fake", id="fake"),
    *(pytest.param(f"{tier}-{mode}", id=f"{tier}-{mode}", marks=pytest.mark.docker)
      for tier in ("runc", "gvisor") for mode in ("cold", "warm")),
]


@dataclass
class Sandbox:
    kind: str
    backend: SandboxBackend
    image: str
    workspace: Path | None
    runtime: str = "runc"
    warm: bool = False

    @property
    def executes(self) -> bool:
        return self.kind != "fake"

    def needs_execution(self) -> None:
        if not self.executes:
            pytest.skip("FakeBackend runs nothing: this behaviour is the engine's")

    def request(self, argv: list[str], **fields: Any) -> ExecRequest:
        limits = fields.pop("limits", None) or Limits(timeout_s=30)
        return ExecRequest(
            image=self.image, argv=argv,
            exec_id=fields.pop("exec_id", f"c-{uuid.uuid4().hex[:12]}"),
            workspace=self.workspace,
            session=self.workspace.name if self.workspace else "fake",
            tenant="conformance", limits=limits.model_copy(update={"runtime": self.runtime}),
            **fields)

    async def run(self, argv: list[str], *, fake: FakeResponse | None = None,
                  on_output: OutputCallback | None = None,
                  before_start: Awaitable[object] | None = None, **fields: Any) -> ExecResult:
        """Run ``argv``; the fake plays ``fake`` instead (the engine's part of the contract
        is the program's behaviour, the protocol's part is what the test checks)."""
        request = self.request(argv, **fields)
        if isinstance(self.backend, FakeBackend):
            self.backend.push(fake or FakeResponse())
            return await self.backend.run(request, on_output, before_start=before_start)
        assert isinstance(self.backend, DockerBackend)
        if not self.warm:
            return await self.backend.run(request, on_output, before_start=before_start)
        # a first call of this class makes the pool launch the next; ours must take it
        await self.backend.run(self.request(["true"], limits=request.limits))
        await wait_ready(self.backend, request.session)
        taken = self.backend.warm.stats["taken"]
        result = await self.backend.run(request, on_output, before_start=before_start)
        assert self.backend.warm.stats["taken"] == taken + 1, "the call did not run warm"
        return result


@pytest.fixture(params=KINDS)
def sandbox_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend_config(sandbox_kind: str, sandbox_data_dir: Path,  # noqa: F811
                   test_instance_id: str) -> DockerBackendConfig:  # noqa: F811
    warm = WarmPoolConfig(size=1) if sandbox_kind.endswith("-warm") else WarmPoolConfig()
    return DockerBackendConfig(data_dir=sandbox_data_dir,
                               workspaces_root=sandbox_data_dir / "workspaces",
                               sandbox_uid=65534, instance_id=test_instance_id, warm=warm)


@pytest.fixture
def sandbox(sandbox_kind: str, request: pytest.FixtureRequest) -> Sandbox:
    if sandbox_kind == "fake":
        return Sandbox("fake", FakeBackend(), image="fake:latest", workspace=None)
    tier, mode = sandbox_kind.split("-")
    return Sandbox(sandbox_kind, request.getfixturevalue("backend"),
                   image=request.getfixturevalue("sandbox_image"),
                   workspace=request.getfixturevalue("workspace"), runtime=tier,
                   warm=mode == "warm")
