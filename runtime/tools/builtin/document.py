"""`read_document`: the text of a PDF or a text file of the session, a page at a time.

A PDF is never parsed in the supervisor: poppler's `pdftotext` runs on it in a fresh
sandbox (the python image, the session's files mounted read-write as for any call; the
policy decides and the audit records it like `code_exec`). A text file is read through the
workspace layer. Long documents come in pages of `PAGE_CHARS` characters: the answer says
where it is and which `offset` reads on.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from pydantic import Field

from runtime.errors import InvalidInput
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult
from runtime.tools.sandboxed import ExecOutcome, Invocation, exec_metadata, run_sandboxed, with_run
from runtime.workspace.paths import join_parts, split_path

PAGE_CHARS = 20_000
MAX_TEXT_FILE_BYTES = 8 * 1024 * 1024
PDF_MAGIC = b"%PDF-"


class ReadDocumentParams(ToolParams):
    path: str = Field(min_length=1, max_length=1024,
                      description="workspace-relative path of a PDF or a text file")
    offset: int = Field(0, ge=0, description="first character to return (to read on)")


def page_of(text: str, offset: int, path: str) -> tuple[str, str]:
    """`PAGE_CHARS` characters from `offset` and a line saying where they are."""
    total = len(text)
    if offset >= total and total:
        return "", f"({path}: {total} characters; offset {offset} is past the end)"
    end = min(total, offset + PAGE_CHARS)
    more = f"; read on with offset={end}" if end < total else ""
    return text[offset:end], f"({path}: characters {offset}-{end} of {total}{more})"


class ReadDocumentTool(BuiltinTool[ReadDocumentParams]):
    name = "read_document"
    description = (
        "Read the text of a PDF (extracted with pdftotext in a sandbox) or of a text file of "
        "this session, 20,000 characters at a time (`offset` reads on)."
    )
    group = "group:fs"
    Params = ReadDocumentParams
    runs_in_sandbox: ClassVar[bool] = False  # a PDF's extraction asks the Executor itself

    async def execute(self, params: ReadDocumentParams, ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        if ws is None:
            raise InvalidInput("this call has no session workspace")
        path = join_parts(split_path(params.path))  # refuses paths that leave the workspace
        with await asyncio.to_thread(ws.open_read, path) as reader:
            head = reader.read(len(PDF_MAGIC))
            size = reader.size
        if head == PDF_MAGIC:
            return await self._pdf(path, params.offset, ctx)
        data = await asyncio.to_thread(ws.read_bytes, path, max_bytes=MAX_TEXT_FILE_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolResult.fail(f"{path} is neither a PDF nor a UTF-8 text file "
                                   f"({size} bytes)", path=path)
        body, where = page_of(text, params.offset, path)
        return ToolResult.ok(f"{body}\n{where}", path=path, chars=len(text), kind="text")

    async def _pdf(self, path: str, offset: int, ctx: ToolContext) -> ToolResult:
        action = self.action({"path": path, "offset": offset}, ctx)
        # "./": a file named like an option ("-f") stays a file name
        argv = ["pdftotext", "-layout", "-enc", "UTF-8", "-q", f"./{path}", "-"]
        outcome = await run_sandboxed(ctx, action, Invocation(argv=argv))
        return with_run(_pdf_answer(path, offset, outcome), outcome)


def _pdf_answer(path: str, offset: int, outcome: ExecOutcome) -> ToolResult:
    res = outcome.result
    meta = exec_metadata(outcome)
    meta.pop("stdout", None)  # the text is the output, paged
    if not res.ok:
        why = "timed out" if res.timed_out else f"pdftotext exit code {res.exit_code}"
        detail = res.stderr.decode("utf-8", errors="replace").strip()[-500:]
        return ToolResult.fail(f"could not extract the text of {path}: {why}"
                               + (f" ({detail})" if detail else ""), path=path, **meta)
    text = res.stdout.decode("utf-8", errors="replace")
    body, where = page_of(text, offset, path)
    if res.truncated:
        where += " (the extraction was cut at the policy's output limit)"
    return ToolResult.ok(f"{body}\n{where}", path=path, chars=len(text), kind="pdf",
                         **meta)
