"""`notebook_read`, `notebook_edit`: Jupyter notebooks (.ipynb) as cells, not as raw JSON.

A notebook is JSON whose cell sources are lists of strings; an agent editing it as text
breaks it easily, and reading it raw drowns the code in base64 images. These tools read
cells with a 0-based index, their source and their outputs as text, and change one cell at a
time with `nbformat`, validating the whole notebook (nbformat 4) before anything is written:
an edit that would leave an invalid file is refused and the file stays as it was. Files go
through the workspace layer (`places.place`: the workspace or /tmp, no links, the sandbox
uid); a write is audited (`file.write`) before it is made, and replaces the file atomically.
"""

from __future__ import annotations

import asyncio
import re
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Literal

import nbformat
from nbformat import v4
from pydantic import Field, model_validator

from runtime.errors import InvalidInput
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult, record_change
from runtime.tools.builtin.places import PATH_HELP, Place, place

MAX_NOTEBOOK_BYTES = 32 * 1024 * 1024
LOADS_AT_ONCE = 2  # a 28 MiB notebook of short lines takes ~400 MiB of RAM to parse
MAX_QUOTES = 2_000_000  # ~1M JSON strings (lines): parsing holds the GIL, ~0.1 s per 1M
MAX_SOURCE_CHARS = 1024 * 1024
OUTPUT_SHOWN = 4000  # characters of one output in the answer
ANSWER_CHARS = 200_000  # the whole answer of notebook_read
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CellType = Literal["code", "markdown", "raw"]
# nbformat has no type hints: its entry points, typed as what they are to us
_reads: Callable[..., Any] = nbformat.reads
_MAKERS: dict[str, Callable[[str], Any]] = {
    "code": v4.new_code_cell, "markdown": v4.new_markdown_cell, "raw": v4.new_raw_cell}


def parse(data: bytes, path: str) -> Any:
    """The notebook in ``data`` as nbformat 4 (older versions converted); ``InvalidInput``
    for what is not a notebook."""
    if data.count(b'"') > MAX_QUOTES:  # json.loads holds the GIL: the server would stall
        raise InvalidInput(f"{path} has too many lines and strings to be read as cells (at "
                           f"most about {MAX_QUOTES // 2} JSON strings)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{path} is not a notebook (not UTF-8 text)") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbformat warns (e.g. missing cell ids) as it reads
        try:
            return _reads(text, as_version=4)
        except Exception as exc:  # NotJSONError, a missing nbformat key, an unknown version
            raise InvalidInput(f"{path} is not a Jupyter notebook: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def output_text(output: Any) -> str:
    """One output as text: streams and plain-text results as they are, errors as name,
    value and traceback (colour codes dropped), other media named."""
    kind = output.get("output_type")
    if kind == "stream":
        return str(output.get("text", ""))
    if kind == "error":
        trace = "\n".join(output.get("traceback") or [])
        head = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
        return _ANSI.sub("", f"{head}\n{trace}" if trace else head)
    data = output.get("data") or {}
    parts = [str(data["text/plain"])] if "text/plain" in data else []
    parts += [f"[{mime} output]" for mime in sorted(data) if mime != "text/plain"]
    return "\n".join(parts)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more chars)"


def cells_of(nb: Any) -> list[dict[str, Any]]:
    return [{"index": i, "type": cell.cell_type, "source": cell.source,
             "execution_count": cell.get("execution_count"),
             "outputs": [_clip(output_text(o), OUTPUT_SHOWN) for o in cell.get("outputs", [])]}
            for i, cell in enumerate(nb.cells)]


def render(path: str, nb: Any, cells: list[dict[str, Any]]) -> str:
    kernel = (nb.metadata.get("kernelspec") or {}).get("name", "unknown")
    lines = [f"{path}: {len(cells)} cells (nbformat {nb.nbformat}.{nb.nbformat_minor}, "
             f"kernel {kernel})"]
    for cell in cells:
        count = cell["execution_count"]
        ran = f", execution_count {count}" if count is not None else ""
        lines.append(f"\n--- cell {cell['index']} ({cell['type']}{ran})")
        lines.append(cell["source"])
        for out in cell["outputs"]:
            lines.append(f">>> output:\n{out}")
    text = "\n".join(lines)
    if len(text) > ANSWER_CHARS:
        text = text[:ANSWER_CHARS] + "\n(the notebook is longer than shown: the cells' "
        text += "full sources are in the result's metadata)"
    return text


_loading: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary())


async def load(where: Place, path: str) -> Any:
    """Read and parse, at most ``LOADS_AT_ONCE`` in the whole server: parsing is where the
    memory goes (unbounded, 4 tenants' reads of such a notebook took the server from 194 MiB
    to 1.7 GiB); callers past the bound wait on the event loop, holding no thread."""
    loop = asyncio.get_running_loop()
    slots = _loading.setdefault(loop, asyncio.Semaphore(LOADS_AT_ONCE))
    async with slots:
        data = await asyncio.to_thread(where.files.read_bytes, where.rel,
                                       max_bytes=MAX_NOTEBOOK_BYTES)
        return await asyncio.to_thread(parse, data, path)


class NotebookReadParams(ToolParams):
    path: str = Field(min_length=1, max_length=1100,
                      description=f"the .ipynb file, {PATH_HELP}")


class NotebookReadTool(BuiltinTool[NotebookReadParams]):
    name = "notebook_read"
    description = (
        "Read a Jupyter notebook (.ipynb) of this session as cells: each with its 0-based "
        "index, type (code, markdown, raw), source and outputs as text."
    )
    group = "group:fs"
    Params = NotebookReadParams

    async def execute(self, params: NotebookReadParams, ctx: ToolContext) -> ToolResult:
        async with place(ctx, params.path) as where:
            shown = where.shown(where.rel)
            nb = await load(where, shown)
        cells = cells_of(nb)
        return ToolResult.ok(render(shown, nb, cells), path=shown, cells=cells)


class NotebookEditParams(ToolParams):
    path: str = Field(min_length=1, max_length=1100,
                      description=f"the .ipynb file, {PATH_HELP}")
    cell: int = Field(ge=-1, description="0-based index of the cell to replace or delete, or "
                                         "to insert after (-1: insert at the top)")
    action: Literal["replace", "insert", "delete"] = Field(
        description="replace the cell's source, insert a new cell after it, or delete it")
    source: str | None = Field(None, max_length=MAX_SOURCE_CHARS,
                               description="the cell's new source (replace, insert)")
    cell_type: CellType | None = Field(
        None, description="insert: the new cell's type (default code); replace: change it")

    @model_validator(mode="after")
    def _needs(self) -> NotebookEditParams:
        if self.action != "delete" and self.source is None:
            raise ValueError(f"action '{self.action}' needs a source")
        if self.action != "insert" and self.cell < 0:
            raise ValueError(f"action '{self.action}' needs a cell index >= 0")
        return self


def new_cell(cell_type: CellType, source: str, *, with_id: bool) -> Any:
    cell = _MAKERS[cell_type](source)
    if not with_id:  # nbformat before 4.5 has no cell ids: one would make it invalid
        cell.pop("id", None)
    return cell


def apply(nb: Any, params: NotebookEditParams) -> str:
    """Change ``nb`` as asked; the answer's first line. ``InvalidInput`` for a bad index or
    a result that is not valid nbformat 4 (then nothing is written)."""
    cells = nb.cells
    _validate(nb, "the notebook is not valid nbformat 4 as it is")
    if params.cell >= len(cells):
        have = f"cells 0-{len(cells) - 1}" if cells else "no cells (insert with cell -1)"
        raise InvalidInput(f"no cell {params.cell}: the notebook has {have}")
    with_id = (nb.nbformat, nb.nbformat_minor) >= (4, 5)
    source = params.source or ""
    if params.action == "delete":
        del cells[params.cell]
        said = f"deleted cell {params.cell}"
    elif params.action == "insert":
        cells.insert(params.cell + 1, new_cell(params.cell_type or "code", source,
                                               with_id=with_id))
        said = f"inserted cell {params.cell + 1} ({params.cell_type or 'code'})"
    else:
        old = cells[params.cell]
        kind = params.cell_type or old.cell_type
        if kind != old.cell_type:
            fresh = new_cell(kind, source, with_id=with_id)
            if with_id and "id" in old:
                fresh["id"] = old["id"]
            cells[params.cell] = fresh
        else:
            old.source = source
            if kind == "code":  # the outputs were those of the old source
                old.outputs = []
                old.execution_count = None
        said = f"replaced cell {params.cell} ({kind})"
    _validate(nb, "the edit would leave an invalid notebook")
    return said


def _validate(nb: Any, problem: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            nbformat.validate(nb)
        except nbformat.ValidationError as exc:
            raise InvalidInput(f"{problem}: {_first_line(exc)}") from None


class NotebookEditTool(BuiltinTool[NotebookEditParams]):
    name = "notebook_edit"
    description = (
        "Change one cell of a Jupyter notebook (.ipynb) of this session: replace its source "
        "(code cells lose their stale outputs), insert a new cell after it, or delete it. "
        "The file stays a valid notebook. Read it first with notebook_read."
    )
    group = "group:fs"
    Params = NotebookEditParams

    async def execute(self, params: NotebookEditParams, ctx: ToolContext) -> ToolResult:
        async with place(ctx, params.path) as where:
            shown = where.shown(where.rel)
            nb = await load(where, shown)
            said = await asyncio.to_thread(apply, nb, params)
            data = (await asyncio.to_thread(nbformat.writes, nb)).encode("utf-8") + b"\n"
            await record_change(ctx, "file.write", shown, detail="notebook_edit")
            entry = await asyncio.to_thread(where.files.write_bytes, where.rel, data)
        return ToolResult.ok(f"{said}; {shown} now has {len(nb.cells)} cells",
                             path=shown, size=entry.size, cells=len(nb.cells))
