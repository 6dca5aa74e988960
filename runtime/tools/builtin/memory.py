"""`memory`: long-term notes per tenant (save, full-text search, forget); no code runs.

A save or a forget is audited (`memory.save`, `memory.forget`) before it is made: no audit,
no change. The record names the memory (`memory:<id>`) and the saved text's digest and size,
never the text.

Two sections are different: `update_section` replaces the text of `user_profile` (about the
person: kept per token, so it follows them into every session) or `project` (about this
session's work); both are put in the system prompt of every turn (audited `memory.section`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from runtime.audit.records import sha256_hex
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult, record_change
from runtime.tools.memory_store import MAX_CONTENT_CHARS, MAX_SECTION_BYTES, MemoryStore

Section = Literal["user_profile", "project"]


def section_scope(section: str, token: str, session: str) -> str:
    """Where a section is kept: the person's per token, the project's per session."""
    return f"token:{token}" if section == "user_profile" else f"session:{session}"


class MemoryParams(ToolParams):
    action: Literal["save", "search", "forget", "update_section"] = Field(
        description="save a memory, search memories by words, forget one by id, or replace "
        "the text of a section shown in every prompt (update_section)"
    )
    section: Section | None = Field(
        None, description="update_section: user_profile (the person) or project (this work)")
    text: str | None = Field(
        None, max_length=MAX_SECTION_BYTES,
        description="update_section: the section's whole new text (empty clears it)")
    content: str | None = Field(None, max_length=MAX_CONTENT_CHARS, description="text (save)")
    tags: list[str] | None = Field(None, max_length=10, description="optional tags (save)")
    query: str | None = Field(
        None, max_length=1000, description="words to look for (search); empty = most recent"
    )
    id: int | None = Field(None, ge=1, description="memory id (forget)")
    limit: int = Field(5, ge=1, le=50, description="how many results (search)")

    @model_validator(mode="after")
    def _needs(self) -> MemoryParams:
        if self.action == "save" and not (self.content and self.content.strip()):
            raise ValueError("action 'save' needs content")
        if self.action == "forget" and self.id is None:
            raise ValueError("action 'forget' needs an id")
        if self.action == "update_section" and (self.section is None or self.text is None):
            raise ValueError("action 'update_section' needs section and text")
        return self


class MemoryTool(BuiltinTool[MemoryParams]):
    name = "memory"
    description = (
        "Long-term memory shared by all sessions of this tenant: save facts, search them "
        "by words, forget them by id."
    )
    group = "group:memory"
    Params = MemoryParams

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def execute(self, params: MemoryParams, ctx: ToolContext) -> ToolResult:
        if params.action == "update_section":
            return await self._update_section(params, ctx)
        if params.action == "save":
            assert params.content is not None
            text = params.content.strip()
            await record_change(ctx, "memory.save", "memory", detail=(
                f"sha256:{sha256_hex(text.encode())} chars:{len(text)}"))
            memory_id = await self.store.save(ctx.tenant, params.content, params.tags)
            return ToolResult.ok(f"saved memory {memory_id}", id=memory_id)
        if params.action == "forget":
            assert params.id is not None
            await record_change(ctx, "memory.forget", f"memory:{params.id}")
            await self.store.forget(ctx.tenant, params.id)
            return ToolResult.ok(f"forgot memory {params.id}", id=params.id)
        hits = await self.store.search(ctx.tenant, params.query or "", params.limit)
        if not hits:
            return ToolResult.ok("no memories found", results=[])
        lines = []
        for hit in hits:
            tags = f" [{', '.join(hit['tags'])}]" if hit["tags"] else ""
            lines.append(f"#{hit['id']}{tags}: {hit['content']}")
        return ToolResult.ok("\n".join(lines), results=hits)

    async def _update_section(self, params: MemoryParams, ctx: ToolContext) -> ToolResult:
        assert params.section is not None and params.text is not None
        text = params.text.strip()
        size = len(text.encode())
        if size > MAX_SECTION_BYTES:
            return ToolResult.fail(f"a section holds at most {MAX_SECTION_BYTES} bytes "
                                   f"(this text is {size}); shorten it")
        scope = section_scope(params.section, ctx.subject.user, ctx.session)
        await record_change(ctx, "memory.section", params.section, detail=(
            f"scope:{scope.split(':')[0]} sha256:{sha256_hex(text.encode())} bytes:{size}"))
        await self.store.set_section(ctx.tenant, scope, params.section, text)
        return ToolResult.ok(f"section {params.section} {'updated' if text else 'cleared'} "
                             f"({size} bytes); it is in every prompt from now on",
                             section=params.section, bytes=size)
