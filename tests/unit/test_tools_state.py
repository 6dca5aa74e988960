"""Tools that run no code, end to end through the registry with real SQLite files."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from runtime.errors import InvalidInput, NotFound
from runtime.policy import Subject
from runtime.tools import ToolContext, ToolServices, build_tools
from runtime.workspace.workspace import Workspace
from tests.fakes.calls import call
from tests.fakes.executors import audited_executor

PNG_1x1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


CtxFor = Callable[..., ToolContext]


@pytest.fixture
async def ctx_for(tmp_path: Path) -> AsyncIterator[CtxFor]:
    """Contexts whose calls an Executor decides and audits (as in the server)."""
    async with audited_executor(tmp_path / "exec-audit") as executor:
        def make(session: str = "s1", tenant: str = "t1",
                 workspace: Workspace | None = None) -> ToolContext:
            return ToolContext(subject=Subject(tenant=tenant, session=session),
                               workspace=workspace, executor=executor)
        yield make


async def test_todo_lifecycle_per_session(services: ToolServices, ctx_for: CtxFor) -> None:
    reg = services.registry
    ctx = ctx_for()
    r = await call(reg, "todo", {"action": "add", "title": "write parser"}, ctx)
    assert r.success and "[ ] 1. write parser (pending)" in r.output
    await call(reg, "todo", {"action": "add", "title": "test it", "status": "in_progress"}, ctx)
    for status in ("in_progress", "done", "failed", "skipped", "pending"):
        r = await call(reg, "todo", {"action": "update", "id": 1, "status": status}, ctx)
        assert r.metadata["items"][0]["status"] == status
    with pytest.raises(InvalidInput):
        await call(reg, "todo", {"action": "update", "id": 1, "status": "finished"}, ctx)
    with pytest.raises(NotFound):
        await call(reg, "todo", {"action": "remove", "id": 99}, ctx)
    other = await call(reg, "todo", {"action": "list"}, ctx_for(session="s2"))
    assert other.metadata["items"] == [] and "empty" in other.output
    other_tenant = await call(reg, "todo", {"action": "list"}, ctx_for(tenant="t2"))
    assert other_tenant.metadata["items"] == []
    r = await call(reg, "todo", {"action": "remove", "id": 1}, ctx)
    assert [i["title"] for i in r.metadata["items"]] == ["test it"]
    r = await call(reg, "todo", {"action": "clear"}, ctx)
    assert r.metadata["items"] == []


async def test_todo_survives_a_restart(tmp_path: Path, ctx_for: CtxFor) -> None:
    svc = build_tools(tmp_path)
    await call(svc.registry, "todo", {"action": "add", "title": "persist"}, ctx_for())
    await svc.close()
    svc2 = build_tools(tmp_path)
    r = await call(svc2.registry, "todo", {"action": "list"}, ctx_for())
    await svc2.close()
    assert r.metadata["items"][0]["title"] == "persist"


async def test_scratchpad(services: ToolServices, ctx_for: CtxFor) -> None:
    reg = services.registry
    ctx = ctx_for()
    assert "empty" in (await call(reg, "scratchpad", {"action": "read"}, ctx)).output
    await call(reg, "scratchpad", {"action": "write", "content": "line 1"}, ctx)
    await call(reg, "scratchpad", {"action": "append", "content": "line 2"}, ctx)
    r = await call(reg, "scratchpad", {"action": "read"}, ctx)
    assert r.output == "line 1\nline 2"
    assert "empty" in (await call(reg, "scratchpad", {"action": "read"}, ctx_for("s2"))).output
    await call(reg, "scratchpad", {"action": "clear"}, ctx)
    assert "empty" in (await call(reg, "scratchpad", {"action": "read"}, ctx)).output
    await services.notes.set_scratchpad("t1", "s1", "x")
    await services.notes.drop_session("t1", "s1")
    assert await services.notes.scratchpad("t1", "s1") == ""


async def test_memory_fts_per_tenant(services: ToolServices, tmp_path: Path,
                                     ctx_for: CtxFor) -> None:
    reg = services.registry
    ctx = ctx_for()
    r1 = await call(reg, 
        "memory", {"action": "save", "content": "The user prefers metric units",
                   "tags": ["prefs"]}, ctx)
    await call(reg, "memory", {"action": "save", "content": "Deploy target is a Raspberry Pi"},
                     ctx)
    await call(reg, "memory", {"action": "save", "content": "t2 secret metric"},
                     ctx_for(tenant="t2"))
    hits = (await call(reg, "memory", {"action": "search", "query": "metric"}, ctx)).metadata
    assert [h["content"] for h in hits["results"]] == ["The user prefers metric units"]
    assert hits["results"][0]["tags"] == ["prefs"]
    # FTS syntax in the query is data, not an operator or an error
    for query in ('"unbalanced', "metric AND OR NOT", "*", "units) OR (x", "NEAR(a b)"):
        r = await call(reg, "memory", {"action": "search", "query": query}, ctx)
        assert r.success
    recent = await call(reg, "memory", {"action": "search", "query": ""}, ctx)
    assert len(recent.metadata["results"]) == 2
    memory_id = r1.metadata["id"]
    with pytest.raises(NotFound):
        await call(reg, "memory", {"action": "forget", "id": memory_id}, ctx_for(tenant="t2"))
    await call(reg, "memory", {"action": "forget", "id": memory_id}, ctx)
    r = await call(reg, "memory", {"action": "search", "query": "metric"}, ctx)
    assert r.metadata["results"] == []
    assert (tmp_path / "data" / "memory.sqlite3").is_file()


async def test_list_tools_and_manual(services: ToolServices, ctx_for: CtxFor) -> None:
    reg = services.registry
    store = services.user_tools.store
    tdir = store.tenant_dir("t1", create=True)
    (tdir / "broken.py").write_text("this is not python(\n")
    await services.user_tools.reload("t1")
    r = await call(reg, "list_tools", {}, ctx_for())
    assert "- code_exec (group:exec):" in r.output
    assert "- word_count (group:user_tools):" in r.output
    assert "broken: syntax error" in r.output
    assert r.metadata["errors"]["broken"].startswith("syntax error")
    m = await call(reg, "tool_manual", {"name": "filesystem"}, ctx_for())
    assert m.output.startswith("# filesystem")
    u = await call(reg, "tool_manual", {"name": "word_count"}, ctx_for())
    assert "user tool" in u.output and '"path"' in u.output
    with pytest.raises(NotFound, match="failed to load"):
        await call(reg, "tool_manual", {"name": "broken"}, ctx_for())
    with pytest.raises(NotFound):
        await call(reg, "tool_manual", {"name": "nothing_here"}, ctx_for())


async def test_filesystem_and_image_view_through_the_workspace(
    services: ToolServices, tmp_path: Path, ctx_for: CtxFor) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("host file")
    with Workspace.at(root) as ws:
        reg = services.registry
        ctx = ctx_for(workspace=ws)
        r = await call(reg, "filesystem", {"action": "write", "path": "a/b.txt",
                                            "content": "héllo"}, ctx)
        assert r.success and r.metadata["size"] == len("héllo".encode())
        assert (await call(reg, "filesystem", {"action": "read", "path": "a/b.txt"},
                                 ctx)).output == "héllo"
        listing = await call(reg, "filesystem", {"action": "list"}, ctx)
        assert listing.metadata["files"][0]["path"] == "a/b.txt"
        await call(reg, "filesystem", {"action": "move", "path": "a/b.txt",
                                        "destination": "c.txt"}, ctx)
        assert (root / "c.txt").read_text() == "héllo"
        (root / "bin.dat").write_bytes(b"\xff\xfe\x00")
        r = await call(reg, "filesystem", {"action": "read", "path": "bin.dat"}, ctx)
        assert not r.success and "not a UTF-8" in (r.error or "")
        (root / "link.txt").symlink_to(tmp_path / "outside.txt")
        for args in ({"action": "read", "path": "../outside.txt"},
                     {"action": "read", "path": "/etc/passwd"},
                     {"action": "read", "path": "link.txt"},
                     {"action": "write", "path": "link.txt", "content": "x"}):
            with pytest.raises(InvalidInput):
                await call(reg, "filesystem", args, ctx)
        assert (tmp_path / "outside.txt").read_text() == "host file"
        await call(reg, "filesystem", {"action": "delete", "path": "c.txt"}, ctx)
        assert not (root / "c.txt").exists()
        with pytest.raises(NotFound):
            await call(reg, "filesystem", {"action": "read", "path": "c.txt"}, ctx)

        (root / "dot.png").write_bytes(PNG_1x1)
        r = await call(reg, "image_view", {"path": "dot.png"}, ctx)
        block = r.metadata["images"][0]
        assert block["type"] == "image" and block["media_type"] == "image/png"
        assert base64.b64decode(block["data_b64"]) == PNG_1x1 and block["path"] == "dot.png"
        (root / "fake.png").write_text("<svg/> not a png")
        r = await call(reg, "image_view", {"path": "fake.png"}, ctx)
        assert not r.success and "not a PNG" in (r.error or "")
        (root / "big.gif").write_bytes(b"GIF89a" + b"\0" * (5 * 1024 * 1024))
        r = await call(reg, "image_view", {"path": "big.gif"}, ctx)
        assert not r.success and "larger than" in (r.error or "")
