"""`image_view`: hand an image file of the session to the model as an image block.

The file is read through the safe workspace module, capped in size, and its type is taken
from its magic bytes (PNG, JPEG, GIF, WebP), never from its name: a file that is not one
of those is refused, whatever it is called.
"""

from __future__ import annotations

import asyncio
import base64

from pydantic import Field

from runtime.errors import InvalidInput, PayloadTooLarge
from runtime.tools.base import BuiltinTool, ImageBlock, ToolContext, ToolParams, ToolResult

MAX_IMAGE_BYTES = 5 * 1024 * 1024


def sniff_image(data: bytes) -> str | None:
    """The media type of `data` by its magic bytes, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class ImageViewParams(ToolParams):
    path: str = Field(min_length=1, max_length=1024, description="workspace-relative image path")


class ImageViewTool(BuiltinTool[ImageViewParams]):
    name = "image_view"
    description = (
        "Look at an image file of this session (PNG, JPEG, GIF or WebP, at most 5 MiB), "
        "e.g. a plot or a render."
    )
    group = "group:meta"
    Params = ImageViewParams

    async def execute(self, params: ImageViewParams, ctx: ToolContext) -> ToolResult:
        if ctx.workspace is None:
            raise InvalidInput("this call has no session workspace")
        try:
            data = await asyncio.to_thread(
                ctx.workspace.read_bytes, params.path, max_bytes=MAX_IMAGE_BYTES
            )
        except PayloadTooLarge:
            return ToolResult.fail(
                f"{params.path} is larger than {MAX_IMAGE_BYTES} bytes", path=params.path
            )
        media_type = sniff_image(data)
        if media_type is None:
            return ToolResult.fail(
                f"{params.path} is not a PNG, JPEG, GIF or WebP image", path=params.path
            )
        block = ImageBlock(
            media_type=media_type,
            data_b64=base64.b64encode(data).decode("ascii"),
            path=params.path,
        )
        return ToolResult.ok(
            f"image {params.path} ({media_type}, {len(data)} bytes)",
            images=[block.model_dump()],
        )
