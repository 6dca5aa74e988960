"""`share_file` and `content_publish`: a session file behind a link that needs no bearer token.

`share_file` hands a result to someone outside: an expiring download link. `content_publish`
shows a file (image, Markdown, PDF, HTML) inline in the chat: the result's metadata carries
`published: {path, kind, url}` and the web client draws it (HTML in a sandboxed iframe,
served under a CSP that lets no script reach the API). Both are audited before the link
exists (`file.share`, `file.publish`), count against the tenant's `shares_per_tenant`
quota, and name the file only: its bytes are read when the link is used
(`runtime.api.routes.shares`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from runtime.errors import InvalidInput, NotFound, PayloadTooLarge, QuotaExceeded
from runtime.store.ids import TenantName
from runtime.store.shares import DEFAULT_EXPIRES_S, MAX_EXPIRES_S, ShareKind, ShareStore
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult, record_change
from runtime.tools.builtin.image_view import sniff_image

PublishKind = Literal["image", "markdown", "pdf", "html"]
MAX_PUBLISH_BYTES = 10 * 1024 * 1024
_SUFFIX_KINDS: dict[str, PublishKind] = {
    "md": "markdown", "markdown": "markdown", "html": "html", "htm": "html"}


def publish_kind(path: str, head: bytes) -> PublishKind | None:
    """What a published file is: images and PDFs by their magic bytes, HTML and Markdown by
    their name (text has no magic); None for anything else."""
    if sniff_image(head) is not None:
        return "image"
    if head.startswith(b"%PDF-"):
        return "pdf"
    suffix = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    return _SUFFIX_KINDS.get(suffix)


class ShareParams(ToolParams):
    path: str = Field(min_length=1, max_length=1024, description="workspace-relative file")
    expires_in_s: int = Field(DEFAULT_EXPIRES_S, ge=60, le=MAX_EXPIRES_S,
                              description="how long the link works (default 1 day, max 7)")


class PublishParams(ToolParams):
    path: str = Field(min_length=1, max_length=1024,
                      description="workspace-relative image, .md, .html or PDF file")
    expires_in_s: int = Field(DEFAULT_EXPIRES_S, ge=60, le=MAX_EXPIRES_S,
                              description="how long the link works (default 1 day, max 7)")


class Links:
    """What both tools share: the store, the quota, the link made after its audit record."""

    def __init__(self, shares: ShareStore | None = None,
                 quota: Callable[[TenantName], int] | None = None) -> None:
        self.shares = shares
        self.quota = quota

    async def make(self, ctx: ToolContext, kind: ShareKind, path: str,
                   expires_at: float | None) -> tuple[str, str]:
        """``(url, share id)`` of a new link to ``path``; ``QuotaExceeded`` past the tenant's
        ``shares_per_tenant``, ``NotFound`` where links are not available."""
        if self.shares is None:
            raise NotFound("links are not available here")
        limit = self.quota(ctx.subject.policy_tenant) if self.quota else 100
        if await self.shares.live_count(ctx.tenant) >= limit:
            raise QuotaExceeded(f"this tenant has {limit} live links (shares_per_tenant): "
                                "revoke one or let it expire", retry_after=60, limit=limit)
        await record_change(ctx, "file.share" if kind == "share" else "file.publish", path)
        token, record = await self.shares.create(ctx.tenant, ctx.session, kind, path,
                                                 expires_at)
        route = "shared" if kind == "share" else "published"
        return f"/v1/{route}/{token}", record.id


class ShareFileTool(BuiltinTool[ShareParams]):
    name = "share_file"
    description = (
        "Make a download link for a file of this session that works without a token "
        "(/v1/shared/...), to hand a result to someone. It expires (default 1 day, max 7) "
        "and can be revoked."
    )
    group = "group:fs"
    Params = ShareParams

    def __init__(self, shares: ShareStore | None = None,
                 quota: Callable[[TenantName], int] | None = None) -> None:
        self.links = Links(shares, quota)

    async def execute(self, params: ShareParams, ctx: ToolContext) -> ToolResult:
        if ctx.workspace is None:
            raise InvalidInput("this call has no session workspace")
        found = await asyncio.to_thread(ctx.workspace.stat, params.path)
        if found.kind != "file":
            return ToolResult.fail(f"{found.path} is a directory: share a file")
        expires_at = time.time() + params.expires_in_s
        url, share_id = await self.links.make(ctx, "share", found.path, expires_at)
        return ToolResult.ok(
            f"{found.path} is shared at {url} until "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(expires_at))}",
            shared={"id": share_id, "path": found.path, "url": url,
                    "expires_at": expires_at})


class ContentPublishTool(BuiltinTool[PublishParams]):
    name = "content_publish"
    description = (
        "Show a file of this session inline in the chat: an image (PNG, JPEG, GIF, WebP), "
        "a Markdown (.md) or HTML (.html) page, or a PDF, at most 10 MiB."
    )
    group = "group:meta"
    Params = PublishParams

    def __init__(self, shares: ShareStore | None = None,
                 quota: Callable[[TenantName], int] | None = None) -> None:
        self.links = Links(shares, quota)

    async def execute(self, params: PublishParams, ctx: ToolContext) -> ToolResult:
        if ctx.workspace is None:
            raise InvalidInput("this call has no session workspace")
        try:
            data = await asyncio.to_thread(ctx.workspace.read_bytes, params.path,
                                           max_bytes=MAX_PUBLISH_BYTES)
        except PayloadTooLarge:
            return ToolResult.fail(f"{params.path} is larger than {MAX_PUBLISH_BYTES} bytes")
        shown = (await asyncio.to_thread(ctx.workspace.stat, params.path)).path
        kind = publish_kind(shown, data[:16])
        if kind is None:
            return ToolResult.fail(f"{shown} is not an image, a PDF, a .md or an .html file")
        expires_at = time.time() + params.expires_in_s  # a published link expires too
        url, share_id = await self.links.make(ctx, "publish", shown, expires_at)
        return ToolResult.ok(f"published {shown} ({kind}) in the chat",
                             published={"id": share_id, "path": shown, "kind": kind,
                                        "url": url, "expires_at": expires_at})
