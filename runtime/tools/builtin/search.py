"""`grep`, `glob`, `tree`: search and survey a session's files without running a container.

Profiles without code execution (the `secretary`) could not search files at all, and a
`terminal` call costs a container start for what a directory walk answers. These three read
the workspace and the session's /tmp on the host through the workspace layer
(`Workspace.grep/glob/tree`: fd-relative, no link followed, acting as the sandbox uid,
bounded in entries, bytes and time, RE2 patterns that cannot backtrack). They change nothing.
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult
from runtime.tools.builtin.places import PATH_HELP, place
from runtime.workspace.search import SearchEnd

MAX_GREP_RESULTS = 500
GLOB_RESULTS = 500
TREE_ENTRIES = 500
TREE_MAX_DEPTH = 8


def ending(end: SearchEnd, what: str) -> str:
    """The footer saying how a search ended when it did not simply finish."""
    notes = []
    if end.truncated:
        notes.append(f"more {what} than shown: narrow the pattern or the path")
    if end.timed_out:
        notes.append("stopped at the time limit: search a smaller directory")
    if end.exhausted:
        notes.append("stopped at the size limit: search a smaller directory")
    if end.unreadable:
        notes.append(f"{end.unreadable} unreadable (permissions) skipped")
    if end.skipped:
        notes.append(f"{end.skipped} binary, large, linked or special files skipped")
    return "; ".join(notes)


def summary(end: SearchEnd) -> dict[str, object]:
    return end.model_dump(include={"truncated", "timed_out", "exhausted", "unreadable",
                                   "skipped"})


class GrepParams(ToolParams):
    pattern: str = Field(min_length=1, max_length=1000,
                         description="regular expression (RE2 syntax: no back-references "
                                     "or look-around), matched against each line")
    path: str = Field("", max_length=1100,
                      description=f"where to look (a file or a directory), {PATH_HELP}")
    glob: str | None = Field(None, max_length=1000,
                             description="only files matching this glob, e.g. *.py or "
                                         "src/**/*.ts")
    ignore_case: bool = Field(False, description="match upper and lower case alike")
    max_results: int = Field(100, ge=1, le=MAX_GREP_RESULTS,
                             description="stop after this many matching lines")


class GrepTool(BuiltinTool[GrepParams]):
    name = "grep"
    description = (
        "Search the contents of this session's files for a regular expression; answers "
        "`path:line: text` for each matching line. Read-only; skips binary files and .git."
    )
    group = "group:fs"
    Params = GrepParams

    async def execute(self, params: GrepParams, ctx: ToolContext) -> ToolResult:
        async with place(ctx, params.path) as where:
            found = await asyncio.to_thread(
                where.files.grep, params.pattern, where.rel, glob=params.glob,
                ignore_case=params.ignore_case, max_results=params.max_results)
        lines = [f"{where.shown(m.path)}:{m.line}: {m.text}" for m in found.matches]
        files = len({m.path for m in found.matches})
        tail = (f"({len(found.matches)} matching lines in {files} files; "
                f"{found.files_searched} files searched)")
        if note := ending(found, "matches"):
            tail += f"\n({note})"
        return ToolResult.ok("\n".join([*lines, tail]),
                             matches=[{"path": where.shown(m.path), "line": m.line,
                                       "text": m.text} for m in found.matches],
                             files_searched=found.files_searched, **summary(found))


class GlobParams(ToolParams):
    pattern: str = Field(min_length=1, max_length=1000,
                         description="glob: `*.py` (a name at any depth), `src/**/*.ts` (a "
                                     "path), `**` any directories, `*` `?` `[abc]` in a name")
    path: str = Field("", max_length=1100, description="the directory, " + PATH_HELP)


class GlobTool(BuiltinTool[GlobParams]):
    name = "glob"
    description = (
        "Find this session's files by name or path pattern (e.g. `*.py`, `src/**/test_*.py`); "
        "answers the matching paths, sorted. Read-only."
    )
    group = "group:fs"
    Params = GlobParams

    async def execute(self, params: GlobParams, ctx: ToolContext) -> ToolResult:
        async with place(ctx, params.path) as where:
            found = await asyncio.to_thread(where.files.glob, params.pattern, where.rel,
                                            max_results=GLOB_RESULTS)
        paths = [where.shown(p) for p in found.paths]
        text = "\n".join(paths) or "(no files match)"
        if note := ending(found, "files"):
            text += f"\n({note})"
        return ToolResult.ok(text, paths=paths, **summary(found))


class TreeParams(ToolParams):
    path: str = Field("", max_length=1100, description="the directory, " + PATH_HELP)
    depth: int = Field(3, ge=1, le=TREE_MAX_DEPTH, description="how many levels to show")


class TreeTool(BuiltinTool[TreeParams]):
    name = "tree"
    description = (
        "Show the directory tree of this session's files (directories end with `/`, files "
        "show their size), a few levels deep. Read-only."
    )
    group = "group:fs"
    Params = TreeParams

    async def execute(self, params: TreeParams, ctx: ToolContext) -> ToolResult:
        async with place(ctx, params.path) as where:
            found = await asyncio.to_thread(where.files.tree, where.rel, depth=params.depth,
                                            max_entries=TREE_ENTRIES)
        top = where.shown(where.rel) or "."
        lines = [top.rstrip("/") + "/"]
        for entry in found.entries:
            name = entry.path.rsplit("/", 1)[-1]
            indent = "  " * entry.depth
            lines.append(f"{indent}{name}/" if entry.kind == "dir"
                         else f"{indent}{name}  ({entry.size} B)")
        if not found.entries:
            lines.append("  (empty)")
        if note := ending(found, "entries"):
            lines.append(f"({note})")
        entries = [{"path": where.shown(e.path), "kind": e.kind, "size": e.size}
                   for e in found.entries]
        return ToolResult.ok("\n".join(lines), entries=entries, **summary(found))
