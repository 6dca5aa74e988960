"""`filesystem`: read, write, list, delete and move session files, on the host, safely.

Every operation goes through `runtime.workspace.Workspace` (fd-relative, no symlinks, no
special files, size limits); nothing here calls `os` on a workspace path. Workspace calls
block, so they run in a thread.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import Field, model_validator

from runtime.errors import InvalidInput
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult, record_change
from runtime.tools.builtin.text_lines import line_range

MAX_READ_BYTES = 1024 * 1024
MAX_WRITE_CHARS = 10 * 1024 * 1024
MAX_LISTED = 1000


class FilesystemParams(ToolParams):
    action: Literal["read", "write", "list", "delete", "move"] = Field(
        description="read a text file, write (create/replace) one, list files under a "
        "directory, delete a file or directory, move/rename"
    )
    path: str = Field(
        "", max_length=1024, description="workspace-relative path, e.g. src/main.py"
    )
    content: str | None = Field(
        None, max_length=MAX_WRITE_CHARS, description="the file's new text (write)"
    )
    destination: str | None = Field(
        None, max_length=1024, description="new workspace-relative path (move)"
    )
    overwrite: bool = Field(False, description="move: replace an existing destination file")
    offset: int | None = Field(
        None, ge=1, description="read: the first line to show (1-based); lines come numbered")
    limit: int | None = Field(
        None, ge=1, le=5000, description="read: how many lines to show (default 500 with offset)")

    @model_validator(mode="after")
    def _needs(self) -> FilesystemParams:
        if self.action == "list" and self.path in (".", "./"):
            self.path = ""  # the workspace itself, as models (and people) often write it
        if self.action != "list" and not self.path:
            raise ValueError(f"action '{self.action}' needs a path")
        if self.action == "write" and self.content is None:
            raise ValueError("action 'write' needs content")
        if self.action == "move" and not self.destination:
            raise ValueError("action 'move' needs a destination")
        return self


class FilesystemTool(BuiltinTool[FilesystemParams]):
    name = "filesystem"
    description = (
        "Work with this session's files (the sandbox's working directory): read (all, or "
        "numbered lines from offset/limit), write, list, delete, move. Paths are relative to "
        "the workspace."
    )
    group = "group:fs"
    Params = FilesystemParams

    async def execute(self, params: FilesystemParams, ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        if ws is None:
            raise InvalidInput("this call has no session workspace")
        action = params.action
        if action == "read":
            data = await asyncio.to_thread(ws.read_bytes, params.path, max_bytes=MAX_READ_BYTES)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                return ToolResult.fail(
                    f"{params.path} is not a UTF-8 text file ({len(data)} bytes); "
                    "use image_view for images or code_exec to inspect binary data",
                    path=params.path, size=len(data),
                )
            if params.offset is None and params.limit is None:
                return ToolResult.ok(text, path=params.path, size=len(data))
            shown, where = line_range(text, params.offset or 1, params.limit or 500)
            return ToolResult.ok(f"{shown}\n{where}" if shown else where, path=params.path,
                                 size=len(data))
        if action == "write":
            assert params.content is not None
            await record_change(ctx, "file.write", params.path)
            entry = await asyncio.to_thread(
                ws.write_bytes, params.path, params.content.encode("utf-8")
            )
            return ToolResult.ok(
                f"wrote {entry.path} ({entry.size} bytes)", path=entry.path, size=entry.size
            )
        if action == "list":
            entries = await asyncio.to_thread(ws.list, params.path)
            listed = entries[:MAX_LISTED]
            lines = [f"{e.path}\t{e.size}" for e in listed]
            if len(entries) > MAX_LISTED:
                lines.append(f"(+{len(entries) - MAX_LISTED} more)")
            listing = [e.model_dump() for e in listed]
            return ToolResult.ok("\n".join(lines) or "(no files)", files=listing)
        if action == "delete":
            await asyncio.to_thread(ws.stat, params.path)  # a missing file: no record
            await record_change(ctx, "file.delete", params.path)
            await asyncio.to_thread(ws.delete, params.path)
            return ToolResult.ok(f"deleted {params.path}", path=params.path)
        assert params.destination is not None
        await asyncio.to_thread(ws.stat, params.path)
        await record_change(ctx, "file.move", params.path, detail=f"to {params.destination}")
        stat = await asyncio.to_thread(
            ws.move, params.path, params.destination, overwrite=params.overwrite
        )
        return ToolResult.ok(f"moved {params.path} to {stat.path}", path=stat.path)
