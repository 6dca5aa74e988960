"""The MCP requests Navi answers: tools (list, call) and the session's files as resources.

Every call goes through `SessionToolCall`, the path of `POST /v1/sessions/{id}/exec`:
policy, audit, container. A refusal (policy, quota, bad arguments) is a tool result with
`isError` whose text says why (the policy rule for a denial), so a model can read it. Live
output becomes `notifications/progress` when the client asked for progress. An unexpected
error is logged and answered, as on the REST API, with an opaque reference only (the SDK
would send the exception's own text, internals and all).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import mimetypes
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from urllib.parse import quote, unquote

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from runtime import __version__
from runtime.api.mcp.sessions import McpSessions
from runtime.calls import CallRequest, describe_failure
from runtime.errors import NaviError
from runtime.logging import get_logger
from runtime.sessions.principal import Principal, subject_for
from runtime.store import SessionRecord

if TYPE_CHECKING:
    from runtime.api.mcp.deps import McpDeps

PRINCIPAL_KEY = "navi.principal"
RESOURCE_PREFIX = "navi://sessions/"
MAX_RESOURCE_BYTES = 8 * 1024 * 1024
PROGRESS_TEXT = 2000

log = get_logger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


def _opaque_errors(handler: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """What a handler did not expect reaches the client as a reference, never as its text."""
    @functools.wraps(handler)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await handler(*args, **kwargs)
        except MCPError:
            raise
        except Exception as exc:
            ref = uuid.uuid4().hex[:12]
            log.error("mcp_unhandled_error", ref=ref, exc_info=exc)
            raise MCPError(types.INTERNAL_ERROR, f"internal error (reference {ref})") from None
    return guarded


def _principal(ctx: ServerRequestContext[Any, Any]) -> tuple[Principal, dict[str, str]]:
    request = ctx.request
    if request is None:
        raise MCPError(types.INVALID_REQUEST, "not authenticated")
    principal = request.scope.get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):  # the endpoint authenticates every request
        raise MCPError(types.INVALID_REQUEST, "not authenticated")
    return principal, {k.lower(): v for k, v in request.headers.items()}


def _fail(exc: NaviError) -> MCPError:
    return MCPError(types.INVALID_PARAMS, f"{exc.code}: {exc.message}")


def resource_uri(session: str, path: str) -> str:
    return f"{RESOURCE_PREFIX}{session}/files/{quote(path)}"


def build_server(services_of: Callable[[], McpDeps], sessions: McpSessions) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        services = services_of()
        principal, headers = _principal(ctx)
        try:
            record = await sessions.find(services, principal, headers)
            subject = await subject_for(services, principal, record)
            specs = await services.tools.registry.specs(subject)
        except NaviError as exc:
            raise _fail(exc) from None
        return types.ListToolsResult(tools=[
            types.Tool(name=s.name, description=s.description, input_schema=s.parameters)
            for s in specs])

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        services = services_of()
        principal, headers = _principal(ctx)
        try:
            record = await sessions.get(services, principal, headers)
            subject = await subject_for(services, principal, record)
        except NaviError as exc:
            return _error_result(exc)
        request = CallRequest(tool=params.name, args=params.arguments or {})
        wants_progress = bool(ctx.meta and ctx.meta.get("progress_token") is not None)
        relay = (asyncio.ensure_future(_relay_progress(ctx, services, record, request.exec_id))
                 if wants_progress else None)
        try:
            if relay is not None:
                await asyncio.sleep(0)  # subscribed before the call can publish
            result = await services.calls(subject, request)
        except NaviError as exc:
            return _error_result(exc)
        finally:
            if relay is not None:
                relay.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay
        run = result.execution
        text = result.output if result.output is not None else (run.stdout if run else "")
        if not result.success:
            text = f"{result.error or 'failed'}\n{text}".rstrip()
        structured: dict[str, Any] = {"exec_id": request.exec_id, "session": record.id}
        if run is not None:
            structured.update(run.model_dump(mode="json"))
        return types.CallToolResult(content=[types.TextContent(text=text or "")],
                                    structured_content=structured, is_error=not result.success)

    async def list_resources(ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None
                             ) -> types.ListResourcesResult:
        services = services_of()
        principal, headers = _principal(ctx)
        try:
            record = await sessions.get(services, principal, headers)
            entries = await _files(services, record)
        except NaviError as exc:
            raise _fail(exc) from None
        return types.ListResourcesResult(resources=[
            types.Resource(uri=resource_uri(record.id, e.path), name=e.path, size=e.size,
                           mime_type=mimetypes.guess_type(e.path)[0])
            for e in entries])

    async def read_resource(ctx: ServerRequestContext[Any, Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        services = services_of()
        principal, headers = _principal(ctx)
        uri = str(params.uri)
        session_id, _, path = uri.removeprefix(RESOURCE_PREFIX).partition("/files/")
        if not uri.startswith(RESOURCE_PREFIX) or not session_id or not path:
            raise MCPError(types.INVALID_PARAMS, f"not a Navi file URI: {uri[:200]}")
        try:
            record = await sessions.find(services, principal,
                                         {**headers, "x-navi-session": session_id})
            assert record is not None
            data = await _read(services, record, unquote(path))
        except NaviError as exc:
            raise _fail(exc) from None
        mime = mimetypes.guess_type(path)[0]
        try:
            contents: types.TextResourceContents | types.BlobResourceContents = \
                types.TextResourceContents(uri=uri, text=data.decode("utf-8"),
                                           mime_type=mime or "text/plain")
        except UnicodeDecodeError:
            contents = types.BlobResourceContents(
                uri=uri, blob=base64.b64encode(data).decode("ascii"),
                mime_type=mime or "application/octet-stream")
        return types.ReadResourceResult(contents=[contents])

    return Server("navi", version=__version__,
                  instructions="Navi Runtime: every tool call is decided by the server's "
                               "policy, written to its audit log and run in a fresh sandbox.",
                  on_list_tools=_opaque_errors(list_tools),
                  on_call_tool=_opaque_errors(call_tool),
                  on_list_resources=_opaque_errors(list_resources),
                  on_read_resource=_opaque_errors(read_resource))


def _error_result(exc: NaviError) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=describe_failure(exc))],
                                structured_content={"code": exc.code}, is_error=True)


async def _files(services: McpDeps, record: SessionRecord) -> list[Any]:
    node = services.nodes.for_session(record)

    def listing() -> list[Any]:
        ws = node.open(record.tenant_id, record.id)
        try:
            return ws.list()
        finally:
            ws.close()
    return await asyncio.to_thread(listing)


async def _read(services: McpDeps, record: SessionRecord, path: str) -> bytes:
    node = services.nodes.for_session(record)

    def read() -> bytes:
        ws = node.open(record.tenant_id, record.id)
        try:
            return ws.read_bytes(path, max_bytes=MAX_RESOURCE_BYTES)
        finally:
            ws.close()
    return await asyncio.to_thread(read)


async def _relay_progress(ctx: ServerRequestContext[Any, Any], services: McpDeps,
                          record: SessionRecord, exec_id: str) -> None:
    """This call's live output as progress notifications (count of chunks; the text)."""
    step = 0
    async for event in services.hub.bus(record.id).subscribe():
        if event.exec_id != exec_id or event.type != "exec_output":
            continue
        step += 1
        data = event.as_json().get("data")
        await ctx.session.report_progress(step, None, str(data)[:PROGRESS_TEXT])
