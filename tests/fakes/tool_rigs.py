"""Tool-registry rigs over the FakeBackend, set up once for the unit and security tests.

`opened_tools` (and the `services` fixture built on it) is the registry of a data dir, opened
and closed; `open_fake_rig` adds a real Executor with a real audit file whose sandbox, the
FakeBackend, records every run. The engine-backed twin is tests/docker/tool_rig.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime.audit import AuditLog
from runtime.executor import Executor
from runtime.policy import PolicyEngine, Subject
from runtime.sandbox.fake import FakeBackend
from runtime.tools import ToolContext, ToolServices, build_tools
from tests.fakes.executors import DEFAULT_POLICY


@asynccontextmanager
async def opened_tools(data_dir: Path, engine: PolicyEngine | None = None,
                       **build: Any) -> AsyncIterator[ToolServices]:
    """`build_tools` under `engine` (the default policy if none), opened; closed after."""
    svc = build_tools(data_dir, policy=engine or PolicyEngine.from_file(DEFAULT_POLICY), **build)
    await svc.open()
    try:
        yield svc
    finally:
        await svc.close()


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[ToolServices]:
    """The tools of ``tmp_path/data`` under the default policy (import it where needed)."""
    async with opened_tools(tmp_path / "data") as svc:
        yield svc


@dataclass
class FakeRig:
    services: ToolServices
    backend: FakeBackend
    audit: AuditLog
    executor: Executor
    workspace: Path
    tenant: str = "t1"

    def ctx(self, profile: str = "developer", **kw: object) -> ToolContext:
        subject = Subject(tenant=self.tenant, user="tok", profile=profile, session="s1")
        return ToolContext(subject=subject, executor=self.executor,
                           workspace_path=self.workspace, **kw)  # type: ignore[arg-type]

    async def close(self) -> None:
        await self.services.close()
        await self.audit.close()


async def open_fake_rig(tmp_path: Path, engine: PolicyEngine, *, backend: FakeBackend | None = None,
                        tenant: str = "t1", **build: Any) -> FakeRig:
    """Opened; the caller closes it (`await rig.close()`). The tool store's data dir is
    ``tmp_path / "data"`` (a `tenant_disk` counts its copies: `objects_root` of it)."""
    backend = backend or FakeBackend()
    audit = AuditLog(tmp_path / "audit")
    await audit.open()
    executor = Executor(engine=engine, backend=backend, audit=audit,
                        resolve_image=lambda name: f"navi/{name}:latest")
    services = build_tools(tmp_path / "data", policy=engine, **build)
    await services.open()
    ws = tmp_path / "ws"
    ws.mkdir()
    return FakeRig(services, backend, audit, executor, ws, tenant)
