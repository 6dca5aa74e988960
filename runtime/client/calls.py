"""Every plain request of the control API, once: what to send (`Call`) and how to read the
answer, with no I/O. `NaviClient` and `AsyncNaviClient` send the same `Call`s, each its
own way; `endpoint` turns a builder below into a method of both (returning the answer, or
an awaitable of it), so the API is written once and both clients stay typed.

Snapshots (`create_snapshot` … `fork_session`) are built like the files' calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter

from runtime.client import config
from runtime.client.errors import InvalidPathSegment
from runtime.client.models import (
    AuditRecord,
    CancelOut,
    ExecOut,
    FileEntryOut,
    HealthOut,
    MessageOut,
    SessionOut,
    SnapshotOut,
    TenantOut,
    TokenInfo,
    TokenOut,
    TokenRole,
    ToolOut,
    TurnOut,
    VerifyOut,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
P = ParamSpec("P")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    max_bytes: int | None = None  # refuse a larger answer before reading it


def one(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda resp: model.model_validate_json(resp.content)


def many(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    adapter = TypeAdapter(list[model])  # type: ignore[valid-type]
    return lambda resp: adapter.validate_json(resp.content)


def nothing(_: httpx.Response) -> None:
    return None


def raw(resp: httpx.Response) -> bytes:
    return resp.content


def text(resp: httpx.Response) -> str:
    return resp.text


def _no_dots(value: str, what: str) -> None:
    """'.' and '..' are not names: the HTTP library would collapse them into another route
    (``delete_file(s, "../../s_2")`` would have sent ``DELETE /v1/sessions/s_2``)."""
    if any(part in (".", "..") for part in value.split("/")):
        raise InvalidPathSegment(f"{what} {value!r} has a '.' or '..' segment")


def seg(value: str) -> str:
    """One path segment (an id, a name): nothing in it can reach another route."""
    _no_dots(value, "segment")
    return quote(value, safe="")


def file_path(session: str, path: str) -> str:
    """`/files/<path>`: '/' stays the separator, '?', '#' and '%' are names. `/tmp/...` is
    the session's /tmp (its leading '/' sent as `%2F`); any other leading '/' is dropped.
    A '.' or '..' segment is refused (``InvalidPathSegment``), never sent."""
    _no_dots(path, "path")
    if path == "/tmp" or path.startswith("/tmp/"):
        return f"/v1/sessions/{seg(session)}/files/%2F{quote(path[1:], safe='/')}"
    return f"/v1/sessions/{seg(session)}/files/{quote(path.lstrip('/'), safe='/')}"


def drop_none(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def exec_body(tool: str, args: dict[str, Any] | None, timeout_s: float | None
              ) -> dict[str, Any]:
    return drop_none(tool=tool, args=args or {}, timeout_s=timeout_s)


def exec_stream_request(session: str, tool: str, args: dict[str, Any] | None,
                        timeout_s: float | None) -> dict[str, Any]:
    """What both clients' `exec_stream` open (`httpx` `stream()`'s arguments)."""
    return {"method": "POST", "url": f"/v1/sessions/{seg(session)}/exec",
            "params": {"stream": "true"}, "json": exec_body(tool, args, timeout_s),
            "timeout": config.STREAM_TIMEOUT}


def events_request(session: str, last_event_id: int | None, read_timeout: float | None
                   ) -> dict[str, Any]:
    """What both clients' `events` open (`httpx` `stream()`'s arguments)."""
    return {"method": "GET", "url": f"/v1/sessions/{seg(session)}/events",
            "headers": config.last_event_headers(last_event_id),
            "timeout": config.stream_timeout(read_timeout)}


class endpoint(Generic[P, T]):  # noqa: N801 (used as a decorator-like attribute)
    """A `Call` builder as a method: `NaviClient` answers `T`, `AsyncNaviClient` an
    awaitable of `T`."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, obj: AsyncEndpoints, owner: type[Any]) -> Callable[P, Awaitable[T]]: ...

    @overload
    def __get__(self, obj: SyncEndpoints, owner: type[Any]) -> Callable[P, T]: ...

    def __get__(self, obj: Any, owner: type[Any]) -> Any:
        build = self.build

        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return obj.send(build(*args, **kwargs))

        method.__doc__ = build.__doc__
        method.__name__ = build.__name__
        return method


# ---- health ---------------------------------------------------------------------------

def health() -> Call[HealthOut]:
    """`GET /v1/healthz`: the server answers (no token needed)."""
    return Call("GET", "/v1/healthz", one(HealthOut))


# ---- tenants and tokens (admin, tenant_admin) --------------------------------------------

def create_tenant(name: str) -> Call[TenantOut]:
    """A new tenant (admin)."""
    return Call("POST", "/v1/tenants", one(TenantOut), json={"name": name})


def list_tenants() -> Call[list[TenantOut]]:
    """Every tenant (admin), or the caller's own (tenant_admin)."""
    return Call("GET", "/v1/tenants", many(TenantOut))


def create_token(tenant: str, role: TokenRole, name: str | None = None,
                 expires_in_s: int | None = None) -> Call[TokenOut]:
    """A token of `role` in `tenant`; its plaintext is in this answer only."""
    return Call("POST", f"/v1/tenants/{seg(tenant)}/tokens", one(TokenOut),
                json=drop_none(role=role, name=name, expires_in_s=expires_in_s))


def list_tokens(tenant: str) -> Call[list[TokenInfo]]:
    """The tenant's tokens (never their plaintext)."""
    return Call("GET", f"/v1/tenants/{seg(tenant)}/tokens", many(TokenInfo))


def revoke_token(tenant: str, token_id: str) -> Call[None]:
    """Revoke a token: it answers 401 from then on, and its open streams end."""
    return Call("DELETE", f"/v1/tenants/{seg(tenant)}/tokens/{seg(token_id)}", nothing)


# ---- sessions -------------------------------------------------------------------------

def create_session(profile: str | None = None, title: str | None = None) -> Call[SessionOut]:
    """A new session (its workspace, its event stream)."""
    return Call("POST", "/v1/sessions", one(SessionOut),
                json=drop_none(profile=profile, title=title))


def list_sessions() -> Call[list[SessionOut]]:
    """The tenant's sessions."""
    return Call("GET", "/v1/sessions", many(SessionOut))


def get_session(session: str) -> Call[SessionOut]:
    return Call("GET", f"/v1/sessions/{seg(session)}", one(SessionOut))


def delete_session(session: str) -> Call[None]:
    """Delete a session: its files, and its running sandboxes end."""
    return Call("DELETE", f"/v1/sessions/{seg(session)}", nothing)


# ---- exec -----------------------------------------------------------------------------

def exec(session: str, tool: str, args: dict[str, Any] | None = None,  # noqa: A001
         timeout_s: float | None = None) -> Call[ExecOut]:
    """Run `tool` with `args` in a fresh sandbox (decided by the policy, audited first).
    A program that fails is still an answer (`ok: false`); a refusal raises."""
    return Call("POST", f"/v1/sessions/{seg(session)}/exec", one(ExecOut),
                json=exec_body(tool, args, timeout_s))


# ---- files ----------------------------------------------------------------------------

def put_file(session: str, path: str, data: bytes | str) -> Call[FileEntryOut]:
    """Write a workspace file (str is written as UTF-8); parents are created."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    return Call("PUT", file_path(session, path), one(FileEntryOut), content=body)


def get_file(session: str, path: str, max_bytes: int | None = None) -> Call[bytes]:
    """A workspace file's bytes; with `max_bytes`, a larger file raises `ResponseTooLarge`
    before it is downloaded."""
    return Call("GET", file_path(session, path), raw, max_bytes=max_bytes)


def list_files(session: str, path: str | None = None) -> Call[list[FileEntryOut]]:
    """Every file of the workspace (or under `path`: a directory of it, or `/tmp`):
    `[{path, size, mtime}]`."""
    return Call("GET", f"/v1/sessions/{seg(session)}/files", many(FileEntryOut),
                params=drop_none(path=path))


def delete_file(session: str, path: str) -> Call[None]:
    return Call("DELETE", file_path(session, path), nothing)


# ---- snapshots ------------------------------------------------------------------------

def create_snapshot(session: str, name: str | None = None) -> Call[SnapshotOut]:
    """A consistent copy of the session's files (`/workspace` and `/tmp`)."""
    return Call("POST", f"/v1/sessions/{seg(session)}/snapshots", one(SnapshotOut),
                json=drop_none(name=name))


def list_snapshots(session: str) -> Call[list[SnapshotOut]]:
    """The session's snapshots, oldest first."""
    return Call("GET", f"/v1/sessions/{seg(session)}/snapshots", many(SnapshotOut))


def restore_snapshot(session: str, snapshot: str) -> Call[SnapshotOut]:
    """Make the session's files exactly the snapshot's (`ConflictError` `session_busy`
    while a call or file operation is in flight)."""
    return Call("POST", f"/v1/sessions/{seg(session)}/snapshots/{seg(snapshot)}/restore",
                one(SnapshotOut))


def delete_snapshot(session: str, snapshot: str) -> Call[None]:
    return Call("DELETE", f"/v1/sessions/{seg(session)}/snapshots/{seg(snapshot)}", nothing)


def fork_session(session: str, snapshot: str | None = None) -> Call[SessionOut]:
    """A new session of the same profile with a copy of the files (now, or a snapshot's)."""
    return Call("POST", f"/v1/sessions/{seg(session)}/fork", one(SessionOut),
                json=drop_none(snapshot=snapshot))


# ---- the agent ------------------------------------------------------------------------

def post_message(session: str, content: str) -> Call[TurnOut]:
    """Start an agent turn; its progress streams on `events` (409 while another runs)."""
    return Call("POST", f"/v1/sessions/{seg(session)}/messages", one(TurnOut),
                json={"content": content})


def list_messages(session: str, after: int = 0, limit: int = 1000) -> Call[list[MessageOut]]:
    """The conversation (messages with an id above `after`)."""
    return Call("GET", f"/v1/sessions/{seg(session)}/messages", many(MessageOut),
                params={"after": after, "limit": limit})


def cancel_turn(session: str) -> Call[CancelOut]:
    """Cancel the running turn (404 when none runs)."""
    return Call("DELETE", f"/v1/sessions/{seg(session)}/turn", one(CancelOut))


# ---- tools ----------------------------------------------------------------------------

def list_tools(session: str | None = None) -> Call[list[ToolOut]]:
    """The tools the caller may use (with `session`: under that session's profile)."""
    return Call("GET", "/v1/tools", many(ToolOut), params=drop_none(session=session))


def get_tool(name: str, session: str | None = None) -> Call[ToolOut]:
    return Call("GET", f"/v1/tools/{seg(name)}", one(ToolOut),
                params=drop_none(session=session))


def manual(name: str) -> Call[str]:
    """A tool's manual (Markdown)."""
    return Call("GET", f"/v1/manuals/{seg(name)}", text)


# ---- audit ----------------------------------------------------------------------------

def audit(session: str | None = None, tool: str | None = None, exec_id: str | None = None,
          action: str | None = None, since: str | int | None = None, limit: int = 1000,
          tenant: str | None = None) -> Call[list[AuditRecord]]:
    """Audit records (auditor, tenant_admin, admin); `since` is a seq or an ISO-8601 time."""
    params = drop_none(session=session, tool=tool, exec_id=exec_id, action=action,
                       since=None if since is None else str(since), limit=limit, tenant=tenant)
    return Call("GET", "/v1/audit", many(AuditRecord), params=params)


def verify_audit() -> Call[VerifyOut]:
    """Verify the hash chain (`ok`, `records`, `first_bad_seq`)."""
    return Call("GET", "/v1/audit/verify", one(VerifyOut))


class Endpoints:
    """The plain calls, shared by both clients (each defines `send`)."""

    health = endpoint(health)
    create_tenant = endpoint(create_tenant)
    list_tenants = endpoint(list_tenants)
    create_token = endpoint(create_token)
    list_tokens = endpoint(list_tokens)
    revoke_token = endpoint(revoke_token)
    create_session = endpoint(create_session)
    list_sessions = endpoint(list_sessions)
    get_session = endpoint(get_session)
    delete_session = endpoint(delete_session)
    exec = endpoint(exec)
    put_file = endpoint(put_file)
    get_file = endpoint(get_file)
    list_files = endpoint(list_files)
    delete_file = endpoint(delete_file)
    create_snapshot = endpoint(create_snapshot)
    list_snapshots = endpoint(list_snapshots)
    restore_snapshot = endpoint(restore_snapshot)
    delete_snapshot = endpoint(delete_snapshot)
    fork_session = endpoint(fork_session)
    post_message = endpoint(post_message)
    list_messages = endpoint(list_messages)
    cancel_turn = endpoint(cancel_turn)
    list_tools = endpoint(list_tools)
    get_tool = endpoint(get_tool)
    manual = endpoint(manual)
    audit = endpoint(audit)
    verify_audit = endpoint(verify_audit)


class SyncEndpoints(Endpoints):
    """`NaviClient`'s base: its `send` answers the value itself."""


class AsyncEndpoints(Endpoints):
    """`AsyncNaviClient`'s base: its `send` answers an awaitable."""
