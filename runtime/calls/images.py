"""Images a tool handed back (`ToolResult.metadata["images"]`, `ImageBlock`s as JSON): the
blocks themselves for a model to see, their paths for events and stored rows."""

from __future__ import annotations

from pydantic import ValidationError

from runtime.events import ImageRef
from runtime.tools.base import ImageBlock, ToolResult

MAX_IMAGES = 4
KERNEL_IMAGE_PREFIX = "kernel:"  # `kernel_exec`'s figures: results, not files


def image_blocks(result: ToolResult) -> list[ImageBlock]:
    """At most `MAX_IMAGES` well-formed image blocks of `result` (others are skipped)."""
    raw = result.metadata.get("images")
    blocks: list[ImageBlock] = []
    for item in raw if isinstance(raw, list) else []:
        if len(blocks) >= MAX_IMAGES:
            break
        try:
            block = ImageBlock.model_validate(item)
        except ValidationError:
            continue
        blocks.append(block.model_copy(update={"path": block.path[:1024]}))
    return blocks


def image_refs(result: ToolResult) -> list[ImageRef]:
    """The images that are files of the session (a kernel's figures are not: the event's
    `kernel` results carry them)."""
    return [ImageRef(path=b.path, media_type=b.media_type) for b in image_blocks(result)
            if not b.path.startswith(KERNEL_IMAGE_PREFIX)]
