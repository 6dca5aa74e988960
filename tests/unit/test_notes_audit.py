"""`memory`, `todo` and `scratchpad` changes are audited before they are made (`memory.save`,
`memory.forget`, `note.write`), reads are not, and with the audit log unwritable nothing
changes (docs/security.md). Real registry, real SQLite files, a real audit log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.errors import AuditUnavailable
from runtime.executor import Executor
from runtime.policy import Subject
from runtime.tools import ToolContext, ToolServices
from tests.fakes.calls import call
from tests.fakes.executors import audited_executor


@pytest.fixture
async def executor(tmp_path: Path) -> AsyncIterator[Executor]:
    async with audited_executor(tmp_path / "audit") as ex:
        yield ex


def ctx(executor: Executor) -> ToolContext:
    return ToolContext(subject=Subject(tenant="t1", session="s1", user="k_0123456789abcdef"),
                       executor=executor)


CHANGES = [
    ("memory", {"action": "save", "content": " the user likes tea ", "tags": ["prefs"]}),
    ("memory", {"action": "search", "query": "tea"}),
    ("memory", {"action": "forget", "id": 1}),
    ("todo", {"action": "add", "title": "plan"}),
    ("todo", {"action": "list"}),
    ("todo", {"action": "update", "id": 1, "status": "done"}),
    ("todo", {"action": "set", "items": [{"title": "a"}, {"title": "b"}]}),
    ("todo", {"action": "remove", "id": 2}),
    ("todo", {"action": "clear"}),
    ("scratchpad", {"action": "write", "content": "x"}),
    ("scratchpad", {"action": "read"}),
    ("scratchpad", {"action": "append", "content": "y", "name": "plan"}),
    ("scratchpad", {"action": "list"}),
    ("scratchpad", {"action": "clear"}),
]


async def test_memory_todo_and_scratchpad_changes_are_audited(
        services: ToolServices, executor: Executor) -> None:
    for tool, args in CHANGES:
        result = await call(services.registry, tool, args, ctx(executor))
        assert result.success, (tool, args, result.output)
    records = [r for r in await executor.audit.records(tenant="t1") if r.kind == "action"]
    got = [(r.action, r.object, r.detail) for r in records]
    save = got[0]
    assert save[:2] == ("memory.save", "memory")
    assert save[2] is not None and save[2].endswith("chars:18") and "tea" not in save[2]
    assert got[1:] == [
        ("memory.forget", "memory:1", None),
        ("note.write", "todo", "add"), ("note.write", "todo", "update"),
        ("note.write", "todo", "set"), ("note.write", "todo", "remove"),
        ("note.write", "todo", "clear"),
        ("note.write", "scratchpad", "write"), ("note.write", "note:plan", "append"),
        ("note.write", "scratchpad", "clear"),
    ]  # searches, lists and reads are not changes
    assert all(r.session == "s1" and r.user == "k_0123456789abcdef" and r.rule
               for r in records)


async def test_with_the_audit_unwritable_nothing_changes(
        services: ToolServices, executor: Executor) -> None:
    reg = services.registry
    await call(reg, "memory", {"action": "save", "content": "kept"}, ctx(executor))
    await call(reg, "todo", {"action": "add", "title": "kept"}, ctx(executor))
    await call(reg, "scratchpad", {"action": "write", "content": "kept"}, ctx(executor))
    await executor.audit.close()
    for tool, args in [("memory", {"action": "save", "content": "lost"}),
                       ("memory", {"action": "forget", "id": 1}),
                       ("todo", {"action": "add", "title": "lost"}),
                       ("todo", {"action": "clear"}),
                       ("scratchpad", {"action": "write", "content": "lost"}),
                       ("scratchpad", {"action": "write", "content": "lost", "name": "n"}),
                       ("scratchpad", {"action": "clear"})]:
        with pytest.raises(AuditUnavailable):
            await call(reg, tool, args, ctx(executor))
    assert [m["content"] for m in await services.memory.search("t1", "")] == ["kept"]
    assert [i["title"] for i in await services.notes.todos("t1", "s1")] == ["kept"]
    assert await services.notes.scratchpad("t1", "s1") == "kept"
    assert await services.notes.notes("t1", "s1") == []
