"""`memory`: long-term notes per tenant (save, full-text search, forget); no code runs.

A save or a forget is audited (`memory.save`, `memory.forget`) before it is made: no audit,
no change. The record names the memory (`memory:<id>`) and the saved text's digest and size,
never the text."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from runtime.audit.records import sha256_hex
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult, record_change
from runtime.tools.memory_store import MAX_CONTENT_CHARS, MemoryStore


class MemoryParams(ToolParams):
    action: Literal["save", "search", "forget"] = Field(
        description="save a memory, search memories by words, or forget one by id"
    )
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
