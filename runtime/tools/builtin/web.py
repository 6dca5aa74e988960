"""`http_request` and `web_view` (group `group:web`): the web, only through the egress proxy.

Nothing of a request runs in the supervisor. A call is:

1. the arguments validated (`web_params.py`: http/https, no userinfo, no header injection);
2. the policy's decision, by the Executor like any call: the URL's host is part of the
   `Action` (`hosts`), so a host off the grant is denied by the engine itself (rule
   `profiles.<p>.tools.<tool>.egress`, audited, 403 / a tool error naming the allowlist)
   and no container starts;
3. `web_fetch.py` run in a fresh python-image container through the Executor (audit,
   limits) with the call's egress grant (the job carries the granted allowlist) and *no*
   session workspace mounted; the job is JSON on stdin, the answer one JSON object on
   stdout.

The result is `{success, output, error, metadata}`: `output` is the body (`http_request`)
or the page's readable text with its links (`web_view`); `metadata` carries status, url,
truncated, the egress summary and the execution's fields (exec_id, audit_seq, rule, …).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.policy.decision import Decision
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult
from runtime.tools.builtin.web_params import (
    HttpRequestParams,
    WebParamsBase,
    WebViewParams,
    url_host_port,
)
from runtime.tools.sandboxed import (
    ExecOutcome,
    Invocation,
    exec_metadata,
    run_sandboxed,
    with_run,
)

FETCH_SOURCE = (Path(__file__).with_name("web_fetch.py")).read_text(encoding="utf-8")
MAX_REDIRECTS = 5
STARTUP_S = 10.0  # container start and interpreter, on top of the request's own timeout
MAX_BODY_BYTES = 1024 * 1024  # read from the server (http_request)
MAX_PAGE_BYTES = 2 * 1024 * 1024  # read from the server (web_view: HTML is bulky)
SHOWN_HEADERS = ("content-type", "content-length", "last-modified", "location", "etag")
MAX_RESULTS = 20


class FetchAnswer(BaseModel):
    """`web_fetch.py`'s answer (fields beyond these are kept and ignored)."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    error: str | None = None
    message: str | None = None
    status: int | None = None
    reason: str | None = None
    url: str | None = None
    headers: list[tuple[str, str]] = []
    truncated: bool = False
    elapsed_ms: int | None = None
    redirects: list[str] = []
    content_type: str | None = None
    binary: bool = False
    body_bytes: int = 0
    body: str | None = None
    title: str | None = None
    text: str | None = None
    links: list[tuple[str, str]] = []


W = TypeVar("W", bound=WebParamsBase)


class _WebTool(BuiltinTool[W]):
    group = "group:web"
    runs_in_sandbox: ClassVar[bool] = True
    mode: ClassVar[str]

    def probe_args(self) -> list[dict[str, Any]]:
        return [{"url": "https://example.org/"}]

    def job(self, params: W) -> dict[str, Any]:
        raise NotImplementedError

    def answer(self, params: W, reply: FetchAnswer, meta: dict[str, Any]) -> ToolResult:
        raise NotImplementedError

    async def execute(self, params: W, ctx: ToolContext) -> ToolResult:
        # the URL's host is part of what is decided: off the grant, the engine denies it
        action = self.action(params.model_dump(mode="json"), ctx).model_copy(
            update={"hosts": (url_host_port(params.url)[0],)})
        if ctx.timeout_s is None:
            action = action.model_copy(update={"timeout_s": params.timeout_s + STARTUP_S})

        def fetch(decision: Decision) -> Invocation:
            job = {**self.job(params), "mode": self.mode, "url": params.url,
                   "timeout_s": params.timeout_s, "max_redirects": MAX_REDIRECTS,
                   "allowlist": list(decision.egress_allowlist),
                   "max_output": max(1024, decision.limits.output_bytes - 256)}
            stdin = json.dumps(job, separators=(",", ":")).encode("utf-8")
            return Invocation(argv=["python3", "-I", "-c", FETCH_SOURCE], stdin=stdin)

        # No session files for a fetch: the container gets the proxy socket and nothing else.
        bare = dataclasses.replace(ctx, workspace_path=None)
        outcome = await run_sandboxed(bare, action, fetch)
        # the exec result without the fetcher's JSON answer: its contents are the result's
        execution = outcome.execution.model_copy(update={"stdout": ""})
        return with_run(self._result(params, outcome).model_copy(
            update={"execution": execution}), outcome)

    def _result(self, params: Any, outcome: ExecOutcome) -> ToolResult:
        meta = exec_metadata(outcome)
        meta["stdout"] = ""  # the fetcher's JSON answer: its contents are in output/metadata
        res = outcome.result
        if res.egress is not None:
            meta["egress"] = res.egress.summary()
        reply = _parse(res.stdout) if not (res.timed_out or res.oom_killed) else None
        if reply is None:
            if res.timed_out:
                error = f"timed out after {outcome.timeout_s:g} s"
            elif res.oom_killed:
                error = "killed: out of memory"
            else:
                error = f"the fetcher ended without an answer (exit code {res.exit_code})"
            return ToolResult.fail(error, output=meta["stderr"][-2000:], url=params.url, **meta)
        meta.update(status=reply.status, url=reply.url or params.url, truncated=reply.truncated,
                    elapsed_ms=reply.elapsed_ms, redirects=reply.redirects,
                    content_type=reply.content_type)
        if reply.error is not None and reply.status is None:
            return ToolResult.fail(f"{reply.error}: {reply.message}", **meta)
        return self.answer(params, reply, meta)


def _parse(stdout: bytes) -> FetchAnswer | None:
    try:
        return FetchAnswer.model_validate(json.loads(stdout))
    except (ValueError, ValidationError):
        return None


class HttpRequestTool(_WebTool[HttpRequestParams]):
    name = "http_request"
    description = (
        "Send one HTTP(S) request (GET, HEAD, POST, PUT, PATCH, DELETE) to a host the policy "
        "allows, from a sandbox through the egress proxy; returns status, headers and the "
        "body as text (capped). Redirects are followed (at most 5) within the allowed hosts."
    )
    Params = HttpRequestParams
    mode = "request"

    def job(self, params: HttpRequestParams) -> dict[str, Any]:
        return {"method": params.method, "headers": params.headers, "body": params.body,
                "max_body_bytes": MAX_BODY_BYTES, "max_chars": 0}

    def answer(self, params: HttpRequestParams, reply: FetchAnswer,
               meta: dict[str, Any]) -> ToolResult:
        meta["headers"] = {k: v for k, v in reply.headers}
        meta["reason"] = reply.reason
        shown = [f"{k}: {v}" for k, v in reply.headers if k.lower() in SHOWN_HEADERS]
        head = "\n".join([f"HTTP {reply.status} {reply.reason or ''}".rstrip(), *shown])
        body = reply.body or ""
        if reply.binary:
            body = f"[binary body: {reply.body_bytes} bytes of {reply.content_type}; not shown]"
        cut = "\n[body truncated]" if reply.truncated else ""
        output = f"{head}\n\n{body}{cut}"
        if not reply.ok:
            return ToolResult.fail(reply.message or f"HTTP {reply.status}", output=output, **meta)
        return ToolResult.ok(output, **meta)


class WebViewTool(_WebTool[WebViewParams]):
    name = "web_view"
    description = (
        "Read a web page (GET) from a host the policy allows, from a sandbox through the "
        "egress proxy; returns its title, readable text (headings, paragraphs) and its links "
        "as [n] text -> url."
    )
    Params = WebViewParams
    mode = "view"

    def job(self, params: WebViewParams) -> dict[str, Any]:
        return {"method": "GET", "headers": {"Accept": "text/html,text/plain;q=0.8,*/*;q=0.5"},
                "body": None, "max_body_bytes": MAX_PAGE_BYTES, "max_chars": params.max_chars}

    def answer(self, params: WebViewParams, reply: FetchAnswer,
               meta: dict[str, Any]) -> ToolResult:
        meta.update(title=reply.title or "", links=len(reply.links))
        parts = [f"Title: {reply.title}" if reply.title else "", f"URL: {reply.url}", "",
                 reply.text or ""]
        if reply.truncated:
            parts.append("[text truncated]")
        if reply.links:
            parts += ["", "Links:", *(f"[{i}] {t} -> {u}" for i, (t, u) in
                                      enumerate(reply.links, 1))]
        output = "\n".join(p for i, p in enumerate(parts) if p or i > 0).strip("\n")
        if not reply.ok:
            return ToolResult.fail(reply.message or f"HTTP {reply.status}", output=output, **meta)
        return ToolResult.ok(output, **meta)


class WebSearchParams(ToolParams):
    query: str = Field(min_length=1, max_length=500, description="what to search for")
    max_results: int = Field(8, ge=1, le=MAX_RESULTS, description="results to return")


class _SearchFetch(_WebTool[HttpRequestParams]):
    """The request `web_search` makes, decided and audited as `web_search`."""

    name = "web_search"
    description = "the search service's JSON answer"
    Params = HttpRequestParams
    mode = "request"

    def job(self, params: HttpRequestParams) -> dict[str, Any]:
        return {"method": "GET", "headers": params.headers, "body": None,
                "max_body_bytes": MAX_BODY_BYTES, "max_chars": 0}

    def answer(self, params: HttpRequestParams, reply: FetchAnswer,
               meta: dict[str, Any]) -> ToolResult:
        if not reply.ok:
            return ToolResult.fail(f"the search service answered HTTP {reply.status}", **meta)
        results = search_results(reply.body or "", MAX_RESULTS)
        if results is None:
            return ToolResult.fail("the search service's answer is not SearXNG JSON", **meta)
        meta["results"] = results
        return ToolResult.ok(render_results(results), **meta)


class WebSearchTool(BuiltinTool[WebSearchParams]):
    """`web_search`: a SearXNG-compatible JSON endpoint (`NAVI_SEARCH_URL`), asked exactly
    like `http_request` asks a host: from a sandbox, through the call's egress proxy, so the
    policy must grant the tool the search host."""

    name = "web_search"
    group = "group:web"
    runs_in_sandbox: ClassVar[bool] = True
    description = (
        "Search the web (a SearXNG-compatible service the operator runs); returns results as "
        "title, url and snippet. Read a result with web_view."
    )
    Params = WebSearchParams

    def __init__(self, search_url: str | None = None) -> None:
        self.search_url = search_url
        self._fetch = _SearchFetch()

    def probe_args(self) -> list[dict[str, Any]]:
        return [{"query": "navi"}]

    async def execute(self, params: WebSearchParams, ctx: ToolContext) -> ToolResult:
        if not self.search_url:
            return ToolResult.fail("web search is not configured on this server "
                                   "(NAVI_SEARCH_URL is unset)")
        sep = "&" if "?" in self.search_url else "?"
        url = f"{self.search_url}{sep}{urlencode({'q': params.query, 'format': 'json'})}"
        try:
            request = HttpRequestParams(url=url, method="GET",
                                        headers={"Accept": "application/json"})
        except ValidationError as exc:
            return ToolResult.fail(f"NAVI_SEARCH_URL is not a usable URL: {exc.errors()[0]['msg']}")
        result = await self._fetch.execute(request, ctx)
        meta = {**result.metadata, "query": params.query}
        if not result.success:
            return result.model_copy(update={"metadata": meta})
        results = meta.get("results", [])[:params.max_results]
        meta["results"] = results
        return result.model_copy(update={"output": render_results(results), "metadata": meta})


def render_results(results: list[dict[str, str]]) -> str:
    lines = [f"{i}. {r['title']}\n   {r['url']}" + (f"\n   {r['snippet']}" if r["snippet"]
                                                   else "")
             for i, r in enumerate(results, 1)]
    return "\n".join(lines) or "(no results)"


def search_results(body: str, wanted: int) -> list[dict[str, str]] | None:
    """`[{title, url, snippet}]` from a SearXNG JSON answer (untrusted: shapes checked,
    sizes capped, only http(s) URLs); None when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    items = data.get("results") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    found: list[dict[str, str]] = []
    for item in items:
        if len(found) >= wanted:
            break
        if not isinstance(item, dict):
            continue
        url, title, snippet = item.get("url"), item.get("title"), item.get("content")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            continue
        found.append({"title": _clean(title, 200) or url[:200], "url": url[:2048],
                      "snippet": _clean(snippet, 400)})
    return found


def _clean(value: Any, limit: int) -> str:
    return " ".join(value.split())[:limit] if isinstance(value, str) else ""
