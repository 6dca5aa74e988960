"""A real Executor (policy engine, audit log on disk) over the `FakeBackend`, for tests of
tools that run no code: every call is decided and audited by an Executor, as in the server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from runtime.audit import AuditLog
from runtime.config import PROJECT_ROOT
from runtime.executor import Executor
from runtime.policy import PolicyEngine
from runtime.sandbox.fake import FakeBackend

DEFAULT_POLICY = PROJECT_ROOT / "policies" / "default.yaml"


@asynccontextmanager
async def audited_executor(audit_dir: Path, engine: PolicyEngine | None = None
                           ) -> AsyncIterator[Executor]:
    audit = AuditLog(audit_dir)
    await audit.open()
    try:
        yield Executor(engine=engine or PolicyEngine.from_file(DEFAULT_POLICY),
                       backend=FakeBackend(), audit=audit,
                       resolve_image=lambda name: f"navi/{name}:latest")
    finally:
        await audit.close()
