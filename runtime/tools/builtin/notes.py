"""`todo` and `scratchpad`: the agent's per-session plan and notes (no code runs)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult
from runtime.tools.notes_store import MAX_SCRATCHPAD_CHARS, NotesStore, TodoStatus

_MARK = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]", "failed": "[!]", "skipped": "[-]"}


class TodoParams(ToolParams):
    action: Literal["add", "update", "remove", "list", "clear"] = Field(
        description="add an item, update its status/title, remove it, list all, or clear all"
    )
    title: str | None = Field(None, max_length=500, description="item text (add, update)")
    id: int | None = Field(None, ge=1, description="item id (update, remove)")
    status: TodoStatus | None = Field(
        None, description="pending, in_progress, done, failed or skipped (add, update)"
    )

    @model_validator(mode="after")
    def _needs(self) -> TodoParams:
        if self.action == "add" and not self.title:
            raise ValueError("action 'add' needs a title")
        if self.action in ("update", "remove") and self.id is None:
            raise ValueError(f"action '{self.action}' needs an id")
        if self.action == "update" and self.status is None and self.title is None:
            raise ValueError("action 'update' needs a status or a title")
        return self


def render_todos(items: list[dict[str, object]]) -> str:
    if not items:
        return "(the todo list is empty)"
    return "\n".join(f"{_MARK.get(str(i['status']), '[?]')} {i['id']}. {i['title']} "
                     f"({i['status']})" for i in items)


class TodoTool(BuiltinTool):
    name = "todo"
    description = (
        "Keep a todo list for this session: add items, update their status "
        "(pending, in_progress, done, failed, skipped), remove, list or clear them."
    )
    group = "group:memory"
    Params = TodoParams

    def __init__(self, notes: NotesStore) -> None:
        self.notes = notes

    async def execute(self, params: TodoParams, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        t, s = ctx.tenant, ctx.session
        if params.action == "add":
            assert params.title is not None
            new_id = await self.notes.add_todo(t, s, params.title, params.status or "pending")
            head = f"added item {new_id}"
        elif params.action == "update":
            assert params.id is not None
            await self.notes.update_todo(t, s, params.id, status=params.status, title=params.title)
            head = f"updated item {params.id}"
        elif params.action == "remove":
            assert params.id is not None
            await self.notes.remove_todo(t, s, params.id)
            head = f"removed item {params.id}"
        elif params.action == "clear":
            await self.notes.clear_todos(t, s)
            head = "cleared the list"
        else:
            head = "todo list"
        items = await self.notes.todos(t, s)
        return ToolResult.ok(f"{head}\n{render_todos(items)}", items=items)


class ScratchpadParams(ToolParams):
    action: Literal["read", "write", "append", "clear"] = Field(
        description="read the notes, replace them (write), add to them (append), or clear them"
    )
    content: str | None = Field(
        None, max_length=MAX_SCRATCHPAD_CHARS, description="text (write, append)"
    )

    @model_validator(mode="after")
    def _needs(self) -> ScratchpadParams:
        if self.action in ("write", "append") and self.content is None:
            raise ValueError(f"action '{self.action}' needs content")
        return self


class ScratchpadTool(BuiltinTool):
    name = "scratchpad"
    description = "Private notes for this session: read, write (replace), append or clear."
    group = "group:memory"
    Params = ScratchpadParams

    def __init__(self, notes: NotesStore) -> None:
        self.notes = notes

    async def execute(self, params: ScratchpadParams, ctx: ToolContext) -> ToolResult:  # type: ignore[override]
        t, s = ctx.tenant, ctx.session
        if params.action == "read":
            text = await self.notes.scratchpad(t, s)
            return ToolResult.ok(text or "(the scratchpad is empty)", chars=len(text))
        if params.action == "clear":
            await self.notes.set_scratchpad(t, s, "")
            return ToolResult.ok("scratchpad cleared", chars=0)
        assert params.content is not None
        text = params.content
        if params.action == "append":
            current = await self.notes.scratchpad(t, s)
            text = f"{current}\n{text}" if current else text
        await self.notes.set_scratchpad(t, s, text)
        return ToolResult.ok(f"scratchpad saved ({len(text)} characters)", chars=len(text))
