"""Fixtures the unit tests share: the opened tools of a data dir (`services`, from
tests/fakes/tool_rigs), a real audit log on disk (`audit`) and a fake Ollama on loopback, fresh
for each test (`ollama`), session disks under a temporary root (`disks`: loop mounts, root only;
none left mounted after the test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from runtime.audit import AuditLog
from runtime.workspace.disk import SessionDisks
from runtime.workspace.mount_table import mounts_under
from tests.fakes.ollama import FakeOllama
from tests.fakes.tool_rigs import services  # noqa: F401 - the fixture, used by name


@pytest.fixture
async def audit(tmp_path: Path) -> AsyncIterator[AuditLog]:
    log = AuditLog(tmp_path / "data")
    await log.open()
    yield log
    await log.close()


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    with FakeOllama() as fake:
        yield fake  # type: ignore[misc]


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[SessionDisks]:
    root = tmp_path / "workspaces"
    (root / "t").mkdir(parents=True)
    found = SessionDisks(root, reserve_bytes=0)
    yield found
    found.close()
    assert mounts_under(root) == []
