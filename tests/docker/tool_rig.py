"""The tool registry on a real Docker backend, set up once for the engine-backed tool tests
(tests/docker, tests/security): a registry, a real Executor and audit file, a fresh tenant's
session workspace, and the context a call from that session has. The FakeBackend twin is
tests/fakes/tool_rigs.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from runtime.audit import AuditLog
from runtime.config import PROJECT_ROOT
from runtime.executor import Approver, Executor
from runtime.policy import PolicyEngine, Subject
from runtime.sandbox.docker.backend import DockerBackend, DockerBackendConfig
from runtime.sandbox.docker.images import image_ref
from runtime.store.ids import new_session_id, new_tenant_id
from runtime.tools import ToolContext, ToolServices, build_tools
from runtime.workspace import Workspaces
from runtime.workspace.workspace import Workspace

RUNNER_IMAGE = image_ref("tools-runner")


def present_image(api: docker.APIClient, ref: str, name: str) -> str:
    """``ref``, once the engine has it; the test fails (never skips) without it."""
    try:
        api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        pytest.fail(f"{ref} is missing; build it with `navi images build {name}`")
    return ref


@pytest.fixture(scope="session")
def runner_image(docker_api: docker.APIClient) -> str:
    """The image agent-written tools run in."""
    return present_image(docker_api, RUNNER_IMAGE, "tools-runner")


@dataclass
class DockerToolRig:
    services: ToolServices
    executor: Executor
    audit: AuditLog
    ws_path: Path
    ws: Workspace
    subject: Subject

    @property
    def tenant(self) -> str:
        return self.subject.tenant

    def ctx(self, **kw: object) -> ToolContext:
        return ToolContext(subject=self.subject, executor=self.executor, workspace=self.ws,
                           workspace_path=self.ws_path, **kw)  # type: ignore[arg-type]


@asynccontextmanager
async def docker_tool_rig(
    tmp_path: Path, backend: DockerBackend, backend_config: DockerBackendConfig, *,
    policy: str = "default.yaml", images: Mapping[str, str] | None = None,
    approver: Approver | None = None, **subject: Any,
) -> AsyncIterator[DockerToolRig]:
    """A rig under ``policies/<policy>``; ``images`` replace the default image of a name,
    ``subject`` adds to the new tenant's and session's Subject (user, profile, ...)."""
    engine = PolicyEngine.from_file(PROJECT_ROOT / "policies" / policy)
    chosen = dict(images or {})
    tenant, session = new_tenant_id(), new_session_id()
    workspaces = Workspaces(backend_config.workspaces_root)
    async with AsyncExitStack() as stack:
        audit = AuditLog(tmp_path / "audit")
        await audit.open()
        stack.push_async_callback(audit.close)
        executor = Executor(engine=engine, backend=backend, audit=audit, approver=approver,
                            resolve_image=lambda name: chosen.get(name, image_ref(name)))
        services = build_tools(tmp_path / "data", policy=engine)
        stack.push_async_callback(services.close)
        await services.open()
        path = workspaces.create(tenant, session)
        stack.callback(workspaces.remove, tenant, session)
        ws = stack.enter_context(workspaces.open(tenant, session))
        yield DockerToolRig(services, executor, audit, path, ws,
                            Subject(tenant=tenant, session=session, **subject))
