"""edit_file's one-match rule, numbered line ranges, paged documents, todo `set` and named
scratchpad notes: the parts that run no container, on real SQLite files and workspaces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.errors import InvalidInput
from runtime.policy import Subject
from runtime.store.ids import new_session_id, new_tenant_id
from runtime.tools import ToolContext, ToolServices, build_tools
from runtime.tools.builtin.document import PAGE_CHARS, page_of
from runtime.tools.builtin.edit import replace_once
from runtime.tools.builtin.text_lines import line_range
from runtime.workspace import Workspaces
from tests.fakes.calls import call
from tests.fakes.executors import audited_executor


def test_replace_once_demands_exactly_one_match() -> None:
    text = "a = 1\nb = 2\nc = 3\n"
    updated, first, last = replace_once(text, "b = 2", "b = 20\nbb = 21", "f.py")
    assert updated == "a = 1\nb = 20\nbb = 21\nc = 3\n" and (first, last) == (2, 3)
    with pytest.raises(InvalidInput, match="found 0 times"):
        replace_once(text, "d = 4", "x", "f.py")
    with pytest.raises(InvalidInput, match="found 2 times.*surrounding"):
        replace_once("x\nx\n", "x", "y", "f.py")


def test_line_ranges_are_numbered_and_say_where_they_are() -> None:
    text = "".join(f"line {n}\n" for n in range(1, 13))
    shown, where = line_range(text, 9, 2)
    assert shown == " 9\tline 9\n10\tline 10"
    assert where == "(lines 9-10 of 12; more from offset=11)"
    assert line_range(text, 11, 50)[1] == "(lines 11-12 of 12)"
    assert "past its end" in line_range(text, 99, 5)[1]


def test_documents_come_in_pages() -> None:
    text = "x" * (PAGE_CHARS + 10)
    body, where = page_of(text, 0, "d.txt")
    assert len(body) == PAGE_CHARS and f"read on with offset={PAGE_CHARS}" in where
    body, where = page_of(text, PAGE_CHARS, "d.txt")
    assert len(body) == 10 and "read on" not in where


@pytest.fixture
async def tools(tmp_path: Path) -> AsyncIterator[tuple[ToolServices, ToolContext]]:
    services = build_tools(tmp_path / "data")
    await services.open()
    tenant, session = new_tenant_id(), new_session_id()
    workspaces = Workspaces(tmp_path / "ws")
    workspaces.create(tenant, session)
    ws = workspaces.open(tenant, session)
    async with audited_executor(tmp_path / "exec-audit") as executor:
        ctx = ToolContext(subject=Subject(tenant=tenant, session=session), workspace=ws,
                          executor=executor)
        yield services, ctx
    ws.close()
    await services.close()


async def test_edit_file_and_read_ranges_through_the_registry(
        tools: tuple[ToolServices, ToolContext]) -> None:
    services, ctx = tools
    reg = services.registry
    body = "".join(f"row {n}\n" for n in range(1, 21))
    await call(reg, "filesystem", {"action": "write", "path": "t.txt", "content": body}, ctx)
    edited = await call(reg, "edit_file", {"path": "t.txt", "old": "row 7\n",
                                            "new": "row seven\n"}, ctx)
    assert edited.output == ("edited t.txt (lines 7-7):\n"
                             "5\trow 5\n6\trow 6\n7\trow seven\n8\trow 8\n9\trow 9")
    seen = await call(reg, "filesystem", {"action": "read", "path": "t.txt", "offset": 6,
                                           "limit": 3}, ctx)
    assert seen.output == ("6\trow 6\n7\trow seven\n8\trow 8\n"
                           "(lines 6-8 of 20; more from offset=9)")
    plain = await call(reg, "filesystem", {"action": "read", "path": "t.txt"}, ctx)
    assert plain.output.startswith("row 1\n")  # no offset/limit: the file as it is
    for args, message in [({"old": "row", "new": "x"}, "found 20 times"),
                          ({"old": "nope", "new": "x"}, "found 0 times"),
                          ({"old": "row 1\n", "new": "row 1\n"}, "the same")]:
        with pytest.raises(InvalidInput, match=message):
            await call(reg, "edit_file", {"path": "t.txt", **args}, ctx)
    with pytest.raises(InvalidInput):
        await call(reg, "edit_file", {"path": "../t.txt", "old": "a", "new": "b"}, ctx)


async def test_read_document_reads_text_files_in_pages(
        tools: tuple[ToolServices, ToolContext]) -> None:
    services, ctx = tools
    reg = services.registry
    await call(reg, "filesystem", {"action": "write", "path": "doc.md",
                                    "content": "# Title\n" + "word " * 5000}, ctx)
    first = await call(reg, "read_document", {"path": "doc.md"}, ctx)
    assert first.success and first.output.startswith("# Title")
    assert "read on with offset=20000" in first.output
    rest = await call(reg, "read_document", {"path": "doc.md", "offset": 20000}, ctx)
    assert rest.output.endswith("of 25008)")
    ctx.workspace.write_bytes("blob.bin", b"\xff\xfe\x00binary")  # type: ignore[union-attr]
    binary = await call(reg, "read_document", {"path": "blob.bin"}, ctx)
    assert not binary.success and "neither a PDF nor" in (binary.error or "")
    with pytest.raises(InvalidInput):
        await call(reg, "read_document", {"path": "/etc/passwd"}, ctx)


async def test_todo_set_and_named_notes(tools: tuple[ToolServices, ToolContext]) -> None:
    services, ctx = tools
    reg = services.registry
    await call(reg, "todo", {"action": "add", "title": "old item"}, ctx)
    done = await call(reg, "todo", {"action": "set", "items": [
        {"title": "read", "status": "done"}, {"title": "plot"}]}, ctx)
    assert done.metadata["items"] == [{"id": 1, "title": "read", "status": "done"},
                                      {"id": 2, "title": "plot", "status": "pending"}]
    assert (await call(reg, "todo", {"action": "set", "items": []}, ctx)).metadata["items"] == []
    await call(reg, "scratchpad", {"action": "write", "content": "default"}, ctx)
    await call(reg, "scratchpad", {"action": "write", "name": "api", "content": "10/s"}, ctx)
    await call(reg, "scratchpad", {"action": "append", "name": "api", "content": "retry"}, ctx)
    assert (await call(reg, "scratchpad", {"action": "read", "name": "api"}, ctx)).output \
        == "10/s\nretry"
    assert (await call(reg, "scratchpad", {"action": "read"}, ctx)).output == "default"
    listing = await call(reg, "scratchpad", {"action": "list"}, ctx)
    assert listing.metadata["notes"] == [{"name": "api", "chars": 10}]
    missing = await call(reg, "scratchpad", {"action": "read", "name": "nope"}, ctx)
    assert not missing.success and "no note named" in (missing.error or "")
    with pytest.raises(InvalidInput):
        await call(reg, "scratchpad", {"action": "read", "name": "../x"}, ctx)
    await call(reg, "scratchpad", {"action": "clear", "name": "api"}, ctx)
    assert (await call(reg, "scratchpad", {"action": "list"}, ctx)).metadata["notes"] == []
