"""`render_3d`: an STL of the session -> up to three PNG views, shown to the model.

The picture is made inside a fresh openscad container (trimesh loads the mesh, a numpy
z-buffer draws it, matplotlib's Agg writes the PNG) and saved as
`renders/<stem>_<view>.png`, so the API and the web client can show it too. The supervisor
chooses those paths itself, reads each file back through the safe workspace module (size
capped), checks that it is a PNG of the expected size and returns it as an image block.
"""

from __future__ import annotations

import asyncio
import base64
import posixpath
import re
import struct
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from runtime.errors import InvalidInput, InvalidPath, NotFound, PayloadTooLarge
from runtime.tools.base import BuiltinTool, ImageBlock, ToolContext, ToolParams, ToolResult
from runtime.tools.cad.protocol import failure, run_cad
from runtime.tools.sandboxed import exec_metadata, with_run
from runtime.workspace import split_path

View = Literal["isometric", "front", "back", "left", "right", "top", "bottom"]
DEFAULT_VIEWS: tuple[View, ...] = ("isometric", "front", "top")
WIDTH = HEIGHT = 800
MAX_STL_BYTES = 48 * 1024 * 1024
MAX_FACES = 1_000_000
MAX_PNG_BYTES = 4 * 1024 * 1024
RENDERS_DIR = "renders"
# What the in-container helper accepts (it re-checks): a plain relative path.
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./ -]{1,512}$")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Render3DParams(ToolParams):
    path: str = Field(min_length=1, max_length=512,
                      description="workspace-relative STL file, e.g. models/gear.stl")
    views: list[View] | None = Field(
        None, min_length=1, max_length=3,
        description="up to 3 views; default isometric, front, top",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        try:
            parts = split_path(value)
        except InvalidPath as exc:
            raise ValueError(exc.message) from None
        if not value.lower().endswith(".stl"):
            raise ValueError("path must name an .stl file")
        if not SAFE_PATH.fullmatch(value):
            raise ValueError("path may use letters, digits, space, '_', '-', '.' and '/'")
        return "/".join(parts)

    @field_validator("views")
    @classmethod
    def _views(cls, value: list[View] | None) -> list[View] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("each view at most once")
        return value


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a PNG, or None when `data` is not one."""
    if len(data) < 33 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def output_paths(path: str, views: list[View]) -> list[str]:
    stem = re.sub(r"[^A-Za-z0-9_-]", "_", posixpath.splitext(posixpath.basename(path))[0])
    return [f"{RENDERS_DIR}/{stem[:64] or 'model'}_{view}.png" for view in views]


class Render3DTool(BuiltinTool[Render3DParams]):
    name = "render_3d"
    description = (
        "Render an STL file of this session to PNG images (up to 3 views: isometric, front, "
        "top, back, left, right, bottom) in a sandbox; saves them under renders/ and shows "
        "them to you."
    )
    group = "group:cad"
    Params = Render3DParams
    runs_in_sandbox: ClassVar[bool] = True

    async def execute(self, params: Render3DParams, ctx: ToolContext) -> ToolResult:
        views = list(params.views or DEFAULT_VIEWS)
        outputs = output_paths(params.path, views)
        request = {"op": "render", "path": params.path, "views": views, "outputs": outputs,
                   "width": WIDTH, "height": HEIGHT, "max_input_bytes": MAX_STL_BYTES,
                   "max_faces": MAX_FACES}
        args = params.model_dump(mode="json")
        outcome, reply = await run_cad(ctx, self.action(args, ctx), request)
        if reply is None:
            return with_run(failure(outcome, "", path=params.path), outcome)
        meta = {**exec_metadata(outcome), "path": params.path,
                "render_ms": reply.field("render_ms")}
        if not reply.ok:
            return with_run(ToolResult.fail(reply.error or "rendering failed", **meta), outcome)
        if ctx.workspace is None:
            raise InvalidInput("this call has no session workspace")
        images: list[dict[str, Any]] = []
        problems: list[str] = []
        for view, out in zip(views, outputs, strict=True):
            block, problem = await _read_png(ctx, out)
            if block is None:
                problems.append(f"{view}: {problem}")
            else:
                images.append(block.model_dump())
        if problems:
            return with_run(ToolResult.fail("; ".join(problems), **meta, renders=outputs),
                            outcome)
        text = (f"rendered {params.path} ({reply.field('triangles')} triangles): "
                + ", ".join(f"{v} -> {o}" for v, o in zip(views, outputs, strict=True))
                + f"; {WIDTH}x{HEIGHT} px each")
        return with_run(ToolResult.ok(text, **meta, renders=outputs, images=images), outcome)


async def _read_png(ctx: ToolContext, path: str) -> tuple[ImageBlock | None, str]:
    if ctx.workspace is None:
        return None, "this call has no session workspace"
    try:
        data = await asyncio.to_thread(ctx.workspace.read_bytes, path, max_bytes=MAX_PNG_BYTES)
    except PayloadTooLarge:
        return None, f"{path} is larger than {MAX_PNG_BYTES} bytes"
    except (NotFound, InvalidPath) as exc:
        return None, f"{path}: {exc.message}"
    if png_size(data) != (WIDTH, HEIGHT):
        return None, f"{path} is not a {WIDTH}x{HEIGHT} PNG"
    block = ImageBlock(media_type="image/png", data_b64=base64.b64encode(data).decode("ascii"),
                       path=path)
    return block, ""
