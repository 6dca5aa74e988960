"""Images sent with a message (`POST /v1/sessions/{id}/messages {content, images}`).

Each is a file of the session (`{path}`) or inline bytes (`{data, mime}`, base64). The type
is taken from the bytes (PNG, JPEG, GIF or WebP), never from a name or the claimed `mime`; at
most `MAX_IMAGES` per message and `MAX_IMAGE_BYTES` each. Inline images are written into the
session's files (`uploads/`, audited `file.write` first) so later turns and tools can name
them; the message row keeps only paths, the turn gets the bytes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import secrets
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.errors import PayloadTooLarge, Unprocessable
from runtime.policy.decision import Subject
from runtime.tools.builtin.image_view import MAX_IMAGE_BYTES, sniff_image

if TYPE_CHECKING:
    from runtime.executor import Executor
    from runtime.nodes import Nodes
    from runtime.store.models import SessionRecord

MAX_IMAGES = 4
UPLOAD_DIR = "uploads"
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif",
              "image/webp": "webp"}
Mime = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


class ImageIn(BaseModel):
    """One image of a message: a session file, or base64 bytes with their type."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(None, min_length=1, max_length=1024)
    data: str | None = Field(None, min_length=1, max_length=(MAX_IMAGE_BYTES * 4) // 3 + 8)
    mime: Mime | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ImageIn:
        if (self.path is None) == (self.data is None):
            raise ValueError("an image is either {path} or {data, mime}")
        if self.data is not None and self.mime is None:
            raise ValueError("inline image data needs its mime type")
        return self


@dataclass(frozen=True)
class TakenImage:
    path: str
    media_type: str
    data_b64: str


class ImageDeps(Protocol):
    @property
    def nodes(self) -> Nodes: ...

    @property
    def executor(self) -> Executor: ...


async def take_images(services: ImageDeps, record: SessionRecord, subject: Subject,
                      items: list[ImageIn]) -> list[TakenImage]:
    """Read, check and (inline ones) store the images; 413 too big, 422 not an image."""
    if len(items) > MAX_IMAGES:
        raise Unprocessable(f"at most {MAX_IMAGES} images per message")
    if not items:
        return []
    node = services.nodes.for_session(record)
    files = await asyncio.to_thread(partial(node.open, record.tenant_id, record.id))
    try:
        taken: list[TakenImage] = []
        for n, item in enumerate(items, start=1):
            if item.path is not None:
                data = await asyncio.to_thread(partial(files.read_bytes, item.path,
                                                       max_bytes=MAX_IMAGE_BYTES))
                media_type = _sniffed(data, item.path)
                path = item.path
            else:
                assert item.data is not None
                data = _decoded(item.data, n)
                media_type = _sniffed(data, f"image {n}")
                path = (f"{UPLOAD_DIR}/{secrets.token_hex(6)}-{n}."
                        f"{EXTENSIONS[media_type]}")
                await services.executor.record_action(subject, "file.write", path,
                                                      rule=f"roles.{subject.role}")
                await asyncio.to_thread(partial(files.write_bytes, path, data,
                                                max_bytes=MAX_IMAGE_BYTES))
            taken.append(TakenImage(path, media_type,
                                    base64.b64encode(data).decode("ascii")))
        return taken
    finally:
        await asyncio.to_thread(files.close)


def _decoded(data: str, n: int) -> bytes:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise Unprocessable(f"image {n}: data is not valid base64") from None
    if len(raw) > MAX_IMAGE_BYTES:
        raise PayloadTooLarge(f"image {n} is larger than {MAX_IMAGE_BYTES} bytes")
    return raw


def _sniffed(data: bytes, what: str) -> str:
    media_type = sniff_image(data)
    if media_type is None:
        raise Unprocessable(f"{what} is not a PNG, JPEG, GIF or WebP image")
    return media_type
