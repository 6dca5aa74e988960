"""`browser` (group `group:web`): a page rendered by headless Chromium, as text or a PNG.

`web_view` reads a page's HTML as served; pages that build themselves with JavaScript show
nothing there. `browser` runs Debian's Chromium in a sandbox of its own (image `browser`,
built offline like every image, on demand: `navi images build browser`) and answers the text
of the DOM after the page's scripts ran, or a screenshot. Like `web_view`:

1. the URL is checked in the supervisor (`web_params.normalize_url`: http/https, no
   credentials) and its host is part of the policy's decision (`Action.hosts`): a host off
   the tool's egress grant is denied by the engine, audited, and no container starts;
2. the run goes through the Executor (audit, limits, the profile's runtime) with the call's
   egress grant and no session files mounted; Chromium reaches the network only through the
   egress proxy, which allows the granted hosts and nothing else (every request a page makes,
   scripts and images included, passes it);
3. the driver (`browser_driver.py`, sent on each call) answers one JSON object on stdout.

A screenshot is saved in the session's files (`screenshots/<time>.png`, audited like any
write) so the user sees it too, and handed to the model as an image.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runtime.policy.decision import Decision
from runtime.tools.base import (
    BuiltinTool,
    ImageBlock,
    ToolContext,
    ToolParams,
    ToolResult,
    record_change,
)
from runtime.tools.builtin.image_view import sniff_image
from runtime.tools.builtin.web_params import normalize_url, url_host_port
from runtime.tools.sandboxed import ExecOutcome, Invocation, exec_metadata, run_sandboxed, with_run

DRIVER_SOURCE = (Path(__file__).with_name("browser_driver.py")).read_text(encoding="utf-8")
IMAGE = "browser"
PAGE_TIMEOUT_S = 30.0  # Chromium's whole run: start, load, scripts, render
STARTUP_S = 10.0  # the container and the driver, on top
SETTLE_MS = 3000  # virtual time the page's scripts get after load
WIDTH, HEIGHT = 1280, 800
MAX_CHARS = 100_000
MAX_PNG_BYTES = 5 * 1024 * 1024


class BrowserParams(ToolParams):
    url: str = Field(min_length=1, max_length=2048,
                     description="the page, http:// or https:// (a host the policy allows)")
    action: Literal["text", "screenshot"] = Field(
        "text", description="text: the page's text after its scripts ran; screenshot: a PNG")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return normalize_url(value)


class DriverAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    ok: bool
    error: str | None = None
    message: str | None = None
    title: str = ""
    text: str = ""
    truncated: bool = False
    png_b64: str | None = None


class BrowserTool(BuiltinTool[BrowserParams]):
    name = "browser"
    group = "group:web"
    runs_in_sandbox: ClassVar[bool] = True
    description = (
        "Open a web page in a headless browser (Chromium, in a sandbox, through the egress "
        "proxy) and return its text after its JavaScript ran, or a screenshot (PNG). For "
        "pages web_view shows empty."
    )
    Params = BrowserParams

    def probe_args(self) -> list[dict[str, Any]]:
        return [{"url": "https://example.org/"}]

    async def execute(self, params: BrowserParams, ctx: ToolContext) -> ToolResult:
        action = self.action(params.model_dump(mode="json"), ctx).model_copy(
            update={"hosts": (url_host_port(params.url)[0],)})
        if ctx.timeout_s is None:
            action = action.model_copy(update={"timeout_s": PAGE_TIMEOUT_S + STARTUP_S})

        def job(decision: Decision) -> Invocation:
            budget = max(5.0, min(PAGE_TIMEOUT_S, decision.limits.timeout_s - STARTUP_S))
            stdin = json.dumps({
                "url": params.url, "action": params.action, "timeout_s": budget,
                "width": WIDTH, "height": HEIGHT, "settle_ms": SETTLE_MS,
                "max_chars": MAX_CHARS}, separators=(",", ":")).encode("utf-8")
            return Invocation(argv=["python3", "-I", "-c", DRIVER_SOURCE], stdin=stdin)

        # no session files in the browser's container: the proxy socket and nothing else
        outcome = await run_sandboxed(dataclasses.replace(ctx, workspace_path=None), action,
                                      job)
        result = await self._result(params, outcome,
                                    dataclasses.replace(ctx, rule=outcome.decision.rule))
        execution = outcome.execution.model_copy(update={"stdout": ""})
        return with_run(result.model_copy(update={"execution": execution}), outcome)

    async def _result(self, params: BrowserParams, outcome: ExecOutcome,
                      ctx: ToolContext) -> ToolResult:
        meta = exec_metadata(outcome)
        meta.update(stdout="", url=params.url, action=params.action)
        res = outcome.result
        if res.egress is not None:
            meta["egress"] = res.egress.summary()
        answer = None if (res.timed_out or res.oom_killed) else _parse(res.stdout)
        if answer is None:
            if res.timed_out:
                error = f"timed out after {outcome.timeout_s:g} s"
            elif res.oom_killed:
                error = "the browser ran out of memory (the policy's memory_mb for browser)"
            elif res.exit_code == 127 or b"chromium: not found" in res.stderr:
                error = (f"this image has no Chromium: the policy must name the `{IMAGE}` "
                         f"image for the browser tool (images: {{browser: {IMAGE}}})")
            else:
                error = f"the browser ended without an answer (exit code {res.exit_code})"
            return ToolResult.fail(error, output=meta["stderr"][-2000:], **meta)
        if not answer.ok:
            return ToolResult.fail(f"{answer.error}: {answer.message}", **meta)
        if params.action == "screenshot":
            return await self._screenshot(answer, meta, ctx)
        meta.update(title=answer.title, truncated=answer.truncated)
        head = [f"Title: {answer.title}" if answer.title else "", f"URL: {params.url}", ""]
        body = answer.text + ("\n[text truncated]" if answer.truncated else "")
        return ToolResult.ok("\n".join(p for p in head[:2] if p) + "\n\n" + body, **meta)

    async def _screenshot(self, answer: DriverAnswer, meta: dict[str, Any],
                          ctx: ToolContext) -> ToolResult:
        try:
            png = base64.b64decode(answer.png_b64 or "", validate=True)
        except (binascii.Error, ValueError):
            png = b""
        if len(png) > MAX_PNG_BYTES or sniff_image(png) != "image/png":
            return ToolResult.fail("the browser's screenshot is not a PNG of at most "
                                   f"{MAX_PNG_BYTES} bytes", **meta)
        now = time.time()
        path = (f"screenshots/{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}"
                f"-{int(now * 1000) % 1000:03d}.png")
        if ctx.workspace is not None:
            await record_change(ctx, "file.write", path, detail="browser")
            path = (await asyncio.to_thread(ctx.workspace.write_bytes, path, png)).path
        else:
            path = "browser:screenshot.png"  # no session files: the image only
        block = ImageBlock(media_type="image/png",
                           data_b64=base64.b64encode(png).decode("ascii"), path=path)
        meta.update(path=path, size=len(png), images=[block.model_dump()])
        return ToolResult.ok(f"screenshot of {meta['url']} ({WIDTH}x{HEIGHT}, {len(png)} "
                             f"bytes) saved as {path}", **meta)


def _parse(stdout: bytes) -> DriverAnswer | None:
    try:
        return DriverAnswer.model_validate(json.loads(stdout))
    except (ValueError, ValidationError):
        return None
