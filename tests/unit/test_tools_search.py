"""`grep`, `glob`, `tree` over a real workspace and /tmp, as the sandbox uid, through
`SessionToolCall` with a real Executor: results, RE2 (a catastrophic pattern stays fast),
symlinks never followed, unreadable files skipped, every bound honoured."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runtime.errors import InvalidInput, InvalidPath
from runtime.policy import Subject
from runtime.store.ids import new_session_id, new_tenant_id
from runtime.tools import ToolContext, ToolServices, build_tools
from runtime.workspace import Workspace
from runtime.workspace.patterns import Glob
from runtime.workspace.search import SearchLimits
from tests.fakes.calls import call
from tests.fakes.executors import audited_executor

UID = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another uid needs root")


def _sandbox_dir(path: Path) -> Path:
    path.mkdir(mode=0o770)
    os.chown(path, UID, UID)
    return path


@pytest.fixture
async def tools(tmp_path: Path) -> AsyncIterator[tuple[ToolServices, ToolContext, Path]]:
    os.chmod(tmp_path, 0o711)
    root, tmp = _sandbox_dir(tmp_path / "ws"), _sandbox_dir(tmp_path / "tmp")
    services = build_tools(tmp_path / "data")
    await services.open()
    ws = Workspace.at(root, owner=(UID, UID), acting=(UID, UID))
    async with audited_executor(tmp_path / "audit") as executor:
        ctx = ToolContext(subject=Subject(tenant=new_tenant_id(), session=new_session_id()),
                          workspace=ws, workspace_path=root, tmp_path=tmp, executor=executor)
        yield services, ctx, tmp_path
    ws.close()
    await services.close()


def _write(ws: Workspace, files: dict[str, str | bytes]) -> None:
    for path, body in files.items():
        ws.write_bytes(path, body.encode() if isinstance(body, str) else body)


async def test_grep_glob_and_tree_answer_paths_lines_and_levels(
        tools: tuple[ToolServices, ToolContext, Path]) -> None:
    services, ctx, _ = tools
    reg, ws = services.registry, ctx.workspace
    assert isinstance(ws, Workspace)
    _write(ws, {"src/app.py": "import os\ndef main():\n    return TODO\n",
                "src/lib/util.py": "# todo: tidy\nx = 1\n",
                "docs/readme.md": "TODO write docs\n",
                ".git/config": "TODO never searched\n",
                "data.bin": b"TODO\x00\x01binary"})
    found = await call(reg, "grep", {"pattern": "TODO"}, ctx)
    assert found.success
    assert [(m["path"], m["line"]) for m in found.metadata["matches"]] == [
        ("docs/readme.md", 1), ("src/app.py", 3)]
    assert "src/app.py:3:     return TODO" in found.output
    assert found.metadata["skipped"] == 1  # data.bin is binary
    nocase = await call(reg, "grep", {"pattern": "todo", "ignore_case": True,
                                      "glob": "*.py"}, ctx)
    assert [m["path"] for m in nocase.metadata["matches"]] == ["src/app.py", "src/lib/util.py"]
    one_file = await call(reg, "grep", {"pattern": "^def ", "path": "src/app.py"}, ctx)
    assert one_file.metadata["matches"] == [{"path": "src/app.py", "line": 2,
                                             "text": "def main():"}]
    anchored = await call(reg, "grep", {"pattern": "^x = 1$", "path": "/workspace/src"}, ctx)
    assert [m["path"] for m in anchored.metadata["matches"]] == ["src/lib/util.py"]

    py = await call(reg, "glob", {"pattern": "*.py"}, ctx)
    assert py.metadata["paths"] == ["src/app.py", "src/lib/util.py"]
    deep = await call(reg, "glob", {"pattern": "src/**/*.py"}, ctx)
    assert deep.metadata["paths"] == ["src/app.py", "src/lib/util.py"]
    assert (await call(reg, "glob", {"pattern": "lib/*.py", "path": "src"}, ctx)
            ).metadata["paths"] == ["src/lib/util.py"]
    assert (await call(reg, "glob", {"pattern": "*.rs"}, ctx)).output == "(no files match)"

    shallow = await call(reg, "tree", {"depth": 1}, ctx)
    assert [e["path"] for e in shallow.metadata["entries"]] == [
        ".git", "data.bin", "docs", "src"]
    full = await call(reg, "tree", {"path": "src"}, ctx)
    assert full.output.splitlines() == ["src/", "  app.py  (38 B)", "  lib/",
                                        "    util.py  (19 B)"]


async def test_tmp_is_searched_through_the_same_layer(
        tools: tuple[ToolServices, ToolContext, Path]) -> None:
    services, ctx, base = tools
    tmp = Workspace.at(base / "tmp", acting=(UID, UID))
    _write(tmp, {"cache/notes.txt": "needle in tmp\n"})
    tmp.close()
    assert isinstance(ctx.workspace, Workspace)
    _write(ctx.workspace, {"w.txt": "needle in workspace\n"})
    found = await call(services.registry, "grep", {"pattern": "needle", "path": "/tmp"}, ctx)
    assert [m["path"] for m in found.metadata["matches"]] == ["/tmp/cache/notes.txt"]
    listed = await call(services.registry, "glob", {"pattern": "*.txt", "path": "/tmp/"}, ctx)
    assert listed.metadata["paths"] == ["/tmp/cache/notes.txt"]
    tree = await call(services.registry, "tree", {"path": "/tmp/cache"}, ctx)
    assert tree.output.splitlines()[0] == "/tmp/cache/"


async def test_a_catastrophic_pattern_finishes_fast(
        tools: tuple[ToolServices, ToolContext, Path]) -> None:
    services, ctx, _ = tools
    assert isinstance(ctx.workspace, Workspace)
    # a backtracking engine needs ~2^28 steps per line for (a+)+$ against this
    _write(ctx.workspace, {f"evil{i}.txt": ("a" * 28 + "!\n") * 200 for i in range(5)})
    started = time.monotonic()
    found = await call(services.registry, "grep", {"pattern": "(a+)+$"}, ctx)
    assert time.monotonic() - started < 2.0
    assert found.success and found.metadata["matches"] == []
    assert found.metadata["timed_out"] is False
    with pytest.raises(InvalidInput, match="RE2"):
        await call(services.registry, "grep", {"pattern": r"(a)\1"}, ctx)


async def test_symlinks_are_never_followed(
        tools: tuple[ToolServices, ToolContext, Path]) -> None:
    services, ctx, base = tools
    reg = services.registry
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET host data\n")
    root = base / "ws"
    (root / "inner").mkdir()
    (root / "inner" / "ok.txt").write_text("SECRET-free\n")
    os.symlink(outside, root / "escape")
    os.symlink(outside / "secret.txt", root / "inner" / "leak.txt")
    os.symlink("/etc", root / "etc")
    for args in ({"pattern": "SECRET"}, {"pattern": "root", "glob": "passwd"}):
        found = await call(reg, "grep", args, ctx)
        assert all("host data" not in m["text"] and "root:" not in m["text"]
                   for m in found.metadata["matches"]), found.output
    found = await call(reg, "grep", {"pattern": "SECRET"}, ctx)
    assert [m["path"] for m in found.metadata["matches"]] == ["inner/ok.txt"]
    assert found.metadata["skipped"] >= 3  # the three links
    listed = await call(reg, "glob", {"pattern": "**"}, ctx)
    assert listed.metadata["paths"] == ["inner/ok.txt"]
    tree = await call(reg, "tree", {"depth": 5}, ctx)
    assert [e["path"] for e in tree.metadata["entries"]] == ["inner", "inner/ok.txt"]
    for tool, args in (("grep", {"pattern": "x", "path": "escape"}),
                       ("grep", {"pattern": "x", "path": "inner/leak.txt"}),
                       ("glob", {"pattern": "*", "path": "escape"}),
                       ("tree", {"path": "etc"}),
                       ("grep", {"pattern": "x", "path": "../outside"})):
        with pytest.raises(InvalidPath):
            await call(reg, tool, args, ctx)


async def test_what_the_sandbox_uid_cannot_read_is_skipped(
        tools: tuple[ToolServices, ToolContext, Path]) -> None:
    services, ctx, base = tools
    ws = ctx.workspace
    assert isinstance(ws, Workspace)
    _write(ws, {"open.txt": "needle\n", "locked.txt": "needle locked\n",
                "closed/inside.txt": "needle closed\n"})
    os.chmod(base / "ws" / "locked.txt", 0)
    os.chmod(base / "ws" / "closed", 0)
    found = await call(services.registry, "grep", {"pattern": "needle"}, ctx)
    assert [m["path"] for m in found.metadata["matches"]] == ["open.txt"]
    assert found.metadata["unreadable"] == 2
    assert "2 unreadable" in found.output
    listed = await call(services.registry, "glob", {"pattern": "*.txt"}, ctx)
    assert listed.metadata["paths"] == ["locked.txt", "open.txt"]  # a name, not content
    assert listed.metadata["unreadable"] == 1


async def test_results_bytes_entries_and_time_are_bounded(
        tools: tuple[ToolServices, ToolContext, Path]) -> None:
    services, ctx, _ = tools
    ws = ctx.workspace
    assert isinstance(ws, Workspace)
    _write(ws, {f"d/f{i:03}.txt": "hit\n" * 3 for i in range(120)})
    _write(ws, {"big.txt": "hit\n" * (2 * 1024 * 1024)})  # 8 MiB: above the per-file cap
    capped = await call(services.registry, "grep", {"pattern": "hit", "max_results": 10}, ctx)
    assert len(capped.metadata["matches"]) == 10 and capped.metadata["truncated"] is True
    assert "more matches than shown" in capped.output
    assert all(m["path"] != "big.txt" for m in capped.metadata["matches"])
    everything = await call(services.registry, "grep", {"pattern": "hit", "max_results": 500},
                            ctx)
    assert len(everything.metadata["matches"]) == 360
    assert everything.metadata["skipped"] == 1  # big.txt
    with pytest.raises(InvalidInput):
        await call(services.registry, "grep", {"pattern": "hit", "max_results": 501}, ctx)

    few_entries = ws.grep("hit", limits=SearchLimits(max_entries=20))
    assert few_entries.exhausted and few_entries.files_searched < 20
    few_bytes = ws.grep("hit", limits=SearchLimits(max_total_bytes=100))
    assert few_bytes.exhausted and len(few_bytes.matches) <= 3 * 8
    no_time = ws.grep("hit", limits=SearchLimits(max_time_s=1e-9))
    assert no_time.timed_out and no_time.matches == []
    tree = ws.tree(max_entries=5)
    assert len(tree.entries) == 5 and tree.truncated
    assert len(ws.glob("*.txt", max_results=7).paths) == 7


def test_globs_translate_to_anchored_name_or_path_patterns() -> None:
    assert Glob.compile("*.py").matches("a/b/c.py") and not Glob.compile("*.py").matches("c.pyc")
    assert Glob.compile("src/*.py").matches("src/a.py")
    assert not Glob.compile("src/*.py").matches("src/x/a.py")
    assert Glob.compile("src/**/*.py").matches("src/x/y/a.py")
    assert Glob.compile("src/**/*.py").matches("src/a.py")
    assert Glob.compile("f[0-9].txt").matches("f7.txt")
    assert not Glob.compile("f[!0-9].txt").matches("f7.txt")
    assert Glob.compile("a+b(c).txt").matches("a+b(c).txt")  # regex characters are literal
    assert not Glob.compile("?.md").matches("ab.md")
    with pytest.raises(InvalidInput):
        Glob.compile("")
