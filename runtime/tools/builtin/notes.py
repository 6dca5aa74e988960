"""`todo` and `scratchpad`: the agent's per-session plan and notes (no code runs).

Every change (a todo add/update/remove/clear/set, a scratchpad write/append/clear) is audited
as `note.write` before it is made (object `todo`, `scratchpad` or `note:<name>`, detail the
action): no audit, no change. Reads and lists are not recorded. A sub-agent's calls read and
change its own todo and notes, not the session's (`owner_key`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult, record_change
from runtime.tools.notes_store import (
    MAX_SCRATCHPAD_CHARS,
    MAX_TODO_CHARS,
    MAX_TODOS,
    NOTE_NAME_PATTERN,
    NotesStore,
    TodoStatus,
    owner_key,
)

_MARK = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]", "failed": "[!]", "skipped": "[-]"}


class TodoItem(ToolParams):
    title: str = Field(min_length=1, max_length=MAX_TODO_CHARS)
    status: TodoStatus = "pending"


class TodoParams(ToolParams):
    action: Literal["add", "update", "remove", "list", "clear", "set"] = Field(
        description="add an item, update its status/title, remove it, list all, clear all, "
        "or set the whole list at once (items)"
    )
    items: list[TodoItem] | None = Field(
        None, max_length=MAX_TODOS, description="set: the whole list, in order (ids from 1)")
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
        if self.action == "set" and self.items is None:
            raise ValueError("action 'set' needs items (an empty list clears)")
        return self


def render_todos(items: list[dict[str, object]]) -> str:
    if not items:
        return "(the todo list is empty)"
    return "\n".join(f"{_MARK.get(str(i['status']), '[?]')} {i['id']}. {i['title']} "
                     f"({i['status']})" for i in items)


class TodoTool(BuiltinTool[TodoParams]):
    name = "todo"
    description = (
        "Keep a todo list for this session: add items, update their status "
        "(pending, in_progress, done, failed, skipped), remove, list or clear them, or set "
        "the whole list at once."
    )
    group = "group:memory"
    Params = TodoParams

    def __init__(self, notes: NotesStore) -> None:
        self.notes = notes

    async def execute(self, params: TodoParams, ctx: ToolContext) -> ToolResult:
        t, s = ctx.tenant, owner_key(ctx.session, ctx.subject.agent_id)
        if params.action != "list":
            await record_change(ctx, "note.write", "todo", detail=params.action)
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
        elif params.action == "set":
            assert params.items is not None
            await self.notes.set_todos(t, s, [(i.title, i.status) for i in params.items])
            head = f"set the list ({len(params.items)} items)"
        else:
            head = "todo list"
        items = await self.notes.todos(t, s)
        return ToolResult.ok(f"{head}\n{render_todos(items)}", items=items)


class ScratchpadParams(ToolParams):
    action: Literal["read", "write", "append", "clear", "list"] = Field(
        description="read a note, replace it (write), add to it (append), clear it, or list "
        "the named notes"
    )
    name: str | None = Field(
        None, pattern=NOTE_NAME_PATTERN,
        description="a named note (e.g. 'plan', 'api findings'); omitted: the default note")
    content: str | None = Field(
        None, max_length=MAX_SCRATCHPAD_CHARS, description="text (write, append)"
    )

    @model_validator(mode="after")
    def _needs(self) -> ScratchpadParams:
        if self.action in ("write", "append") and self.content is None:
            raise ValueError(f"action '{self.action}' needs content")
        return self


class ScratchpadTool(BuiltinTool[ScratchpadParams]):
    name = "scratchpad"
    description = (
        "Private notes for this session: one default note and named ones (name). Read, "
        "write (replace), append, clear, or list the named notes."
    )
    group = "group:memory"
    Params = ScratchpadParams

    def __init__(self, notes: NotesStore) -> None:
        self.notes = notes

    async def execute(self, params: ScratchpadParams, ctx: ToolContext) -> ToolResult:
        t, s = ctx.tenant, owner_key(ctx.session, ctx.subject.agent_id)
        if params.action == "list":
            named = await self.notes.notes(t, s)
            default = len(await self.notes.scratchpad(t, s))
            lines = [f"(default note)\t{default} characters"] if default else []
            lines += [f"{name}\t{chars} characters" for name, chars in named]
            return ToolResult.ok("\n".join(lines) or "(no notes)",
                                 notes=[{"name": n, "chars": c} for n, c in named])
        label = f"note {params.name!r}" if params.name else "scratchpad"
        current = await self._get(t, s, params.name)
        if params.action == "read":
            if params.name and current is None:
                return ToolResult.fail(f"no note named {params.name!r}; "
                                       "scratchpad list shows the names")
            return ToolResult.ok(current or f"(the {label} is empty)", chars=len(current or ""))
        obj = f"note:{params.name}" if params.name else "scratchpad"
        await record_change(ctx, "note.write", obj, detail=params.action)
        if params.action == "clear":
            await self._put(t, s, params.name, "")
            return ToolResult.ok(f"{label} cleared", chars=0)
        assert params.content is not None
        text = params.content
        if params.action == "append" and current:
            text = f"{current}\n{text}"
        await self._put(t, s, params.name, text)
        return ToolResult.ok(f"{label} saved ({len(text)} characters)", chars=len(text))

    async def _get(self, tenant: str, session: str, name: str | None) -> str | None:
        if name:
            return await self.notes.note(tenant, session, name)
        return await self.notes.scratchpad(tenant, session)

    async def _put(self, tenant: str, session: str, name: str | None, text: str) -> None:
        if name:
            await self.notes.set_note(tenant, session, name, text)
        else:
            await self.notes.set_scratchpad(tenant, session, text)
