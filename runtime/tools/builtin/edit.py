"""`edit_file`: replace exactly one occurrence of a text in a session file.

The agent changes a line without rewriting the file: `old` must occur exactly once (0 or
several matches is a tool error saying how many, so the agent adds context); the answer
shows the changed lines, numbered, with a little context. The write goes through the
workspace layer (fd-relative, no links, the session's disk limit) and is audited
(`file.write`) before it is made.
"""

from __future__ import annotations

import asyncio

from pydantic import Field, model_validator

from runtime.errors import InvalidInput
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult, record_change
from runtime.tools.builtin.text_lines import numbered

MAX_EDIT_FILE_BYTES = 4 * 1024 * 1024
MAX_EDIT_CHARS = 1024 * 1024
CONTEXT_LINES = 2


class EditFileParams(ToolParams):
    path: str = Field(min_length=1, max_length=1024,
                      description="workspace-relative path of a UTF-8 text file")
    old: str = Field(min_length=1, max_length=MAX_EDIT_CHARS,
                     description="the exact text to replace; must occur exactly once "
                                 "(include surrounding lines to make it unique)")
    new: str = Field(max_length=MAX_EDIT_CHARS, description="the replacement text")

    @model_validator(mode="after")
    def _changes(self) -> EditFileParams:
        if self.old == self.new:
            raise ValueError("old and new are the same: nothing to change")
        return self


def replace_once(text: str, old: str, new: str, path: str) -> tuple[str, int, int]:
    """The new text and the first and last changed line (1-based) in it; `InvalidInput`
    unless `old` occurs exactly once."""
    count = text.count(old)
    if count != 1:
        hint = ("" if count == 0 else "; include more of the surrounding text to pick one")
        raise InvalidInput(f"old text found {count} times in {path} (it must occur exactly "
                           f"once){hint}")
    at = text.index(old)
    first = text.count("\n", 0, at) + 1
    last = first + max(new.count("\n") - (1 if new.endswith("\n") else 0), 0)
    return text[:at] + new + text[at + len(old):], first, last


def changed_lines(text: str, first: int, last: int) -> str:
    lines = text.splitlines()
    start = max(1, first - CONTEXT_LINES)
    end = min(len(lines), last + CONTEXT_LINES)
    return numbered(lines[start - 1:end], start)


class EditFileTool(BuiltinTool[EditFileParams]):
    name = "edit_file"
    description = (
        "Replace exactly one occurrence of `old` with `new` in a text file of this session "
        "(0 or several matches: an error saying how many). Answers the changed lines, "
        "numbered. Read the file first (filesystem read with offset/limit)."
    )
    group = "group:fs"
    Params = EditFileParams

    async def execute(self, params: EditFileParams, ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        if ws is None:
            raise InvalidInput("this call has no session workspace")
        data = await asyncio.to_thread(ws.read_bytes, params.path,
                                       max_bytes=MAX_EDIT_FILE_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"{params.path} is not a UTF-8 text file") from None
        updated, first, last = replace_once(text, params.old, params.new, params.path)
        await record_change(ctx, "file.write", params.path, detail="edit_file")
        entry = await asyncio.to_thread(ws.write_bytes, params.path, updated.encode("utf-8"))
        shown = changed_lines(updated, first, last)
        return ToolResult.ok(f"edited {entry.path} (lines {first}-{last}):\n{shown}",
                             path=entry.path, size=entry.size, first_line=first,
                             last_line=last)
