"""The control API's calls, each written once (`@call`, `@stream`) for both clients: health,
tenants and tokens, sessions, exec, files, snapshots, events, the agent's messages, tools and
audit. Processes, kernels, previews and questions are `navi_client.api_work`'s."""

from __future__ import annotations

from typing import Any

from navi_client import wire
from navi_client.calls import (
    Call,
    Stream,
    drop_none,
    event_stream,
    exec_stream,
    file_path,
    manual_text,
    many,
    nothing,
    one,
    raw,
    seg,
    session_path,
)
from navi_client.endpoint import call, stream
from navi_client.models import AuditRecord, Event, ExecChunk, TokenRole


def _exec_body(tool: str, args: dict[str, Any] | None, timeout_s: float | None
               ) -> dict[str, Any]:
    return drop_none(tool=tool, args=args or {}, timeout_s=timeout_s)


class CoreAPI:
    """Tenants, tokens, sessions, exec, files, snapshots, events, messages, tools, audit."""

    # ---- health, tenants and tokens (admin, tenant_admin) ---------------------------------

    @call
    def health(self) -> Call[wire.HealthOut]:
        """`GET /v1/healthz`: the server answers (no token needed)."""
        return Call("GET", "/v1/healthz", one(wire.HealthOut))

    @call
    def create_tenant(self, name: str) -> Call[wire.TenantOut]:
        """A new tenant (admin)."""
        return Call("POST", "/v1/tenants", one(wire.TenantOut), json={"name": name})

    @call
    def list_tenants(self) -> Call[list[wire.TenantOut]]:
        """Every tenant (admin), or the caller's own (tenant_admin)."""
        return Call("GET", "/v1/tenants", many(wire.TenantOut))

    @call
    def create_token(self, tenant: str, role: TokenRole, name: str | None = None,
                     expires_in_s: int | None = None) -> Call[wire.TokenOut]:
        """A token of `role` in `tenant`; its plaintext is in this answer only."""
        return Call("POST", f"/v1/tenants/{seg(tenant)}/tokens", one(wire.TokenOut),
                    json=drop_none(role=role, name=name, expires_in_s=expires_in_s))

    @call
    def list_tokens(self, tenant: str) -> Call[list[wire.TokenInfo]]:
        """The tenant's tokens (never their plaintext)."""
        return Call("GET", f"/v1/tenants/{seg(tenant)}/tokens", many(wire.TokenInfo))

    @call
    def revoke_token(self, tenant: str, token_id: str) -> Call[None]:
        """Revoke a token: it answers 401 from then on, and its open streams end."""
        return Call("DELETE", f"/v1/tenants/{seg(tenant)}/tokens/{seg(token_id)}", nothing)

    # ---- sessions ---------------------------------------------------------------------

    @call
    def create_session(self, profile: str | None = None, title: str | None = None
                       ) -> Call[wire.SessionOut]:
        """A new session (its workspace, its event stream) under `profile` (the tenant's
        default when None)."""
        return Call("POST", "/v1/sessions", one(wire.SessionOut),
                    json=drop_none(profile=profile, title=title))

    @call
    def list_sessions(self) -> Call[list[wire.SessionOut]]:
        """The tenant's sessions."""
        return Call("GET", "/v1/sessions", many(wire.SessionOut))

    @call
    def get_session(self, session: str) -> Call[wire.SessionOut]:
        """One session (`NotFoundError` for another tenant's)."""
        return Call("GET", session_path(session), one(wire.SessionOut))

    @call
    def delete_session(self, session: str) -> Call[None]:
        """Delete a session: its files, and its running sandboxes and processes end."""
        return Call("DELETE", session_path(session), nothing)

    # ---- exec -------------------------------------------------------------------------

    @call
    def exec(self, session: str, tool: str, args: dict[str, Any] | None = None,  # noqa: A003
             timeout_s: float | None = None) -> Call[wire.ExecOut]:
        """Run `tool` with `args` in a fresh sandbox (decided by the policy, audited first).
        A program that fails is still an answer (`ok: false`); a refusal raises."""
        return Call("POST", session_path(session, "exec"), one(wire.ExecOut),
                    json=_exec_body(tool, args, timeout_s))

    @stream
    def exec_stream(self, session: str, tool: str, args: dict[str, Any] | None = None,
                    timeout_s: float | None = None) -> Stream[ExecChunk | wire.ExecOut]:
        """Run a tool and yield its output as it comes (`ExecChunk`), then its result
        (`wire.ExecOut`, last). A call that fails raises, before or after its output."""
        return exec_stream(session_path(session, "exec"), _exec_body(tool, args, timeout_s))

    @stream
    def events(self, session: str, last_event_id: int | None = None,
               read_timeout: float | None = None) -> Stream[Event]:
        """The session's events as they happen; with `last_event_id` (an event's `id`), only
        those after it (what a reconnecting reader missed is replayed first). The server
        sends a keep-alive every 15 s: `read_timeout` (seconds) above that only ends a dead
        connection (`httpx.ReadTimeout`); None waits for ever."""
        return event_stream(session, last_event_id, read_timeout)

    # ---- files ------------------------------------------------------------------------

    @call
    def put_file(self, session: str, path: str, data: bytes | str) -> Call[wire.FileEntryOut]:
        """Write a workspace file (str is written as UTF-8); parents are created."""
        body = data.encode("utf-8") if isinstance(data, str) else data
        return Call("PUT", file_path(session, path), one(wire.FileEntryOut), content=body)

    @call
    def get_file(self, session: str, path: str, max_bytes: int | None = None) -> Call[bytes]:
        """A workspace file's bytes; with `max_bytes`, a larger file raises
        `ResponseTooLarge` before it is downloaded."""
        return Call("GET", file_path(session, path), raw, max_bytes=max_bytes)

    @call
    def list_files(self, session: str, path: str | None = None) -> Call[list[wire.FileEntryOut]]:
        """Every file of the workspace (or under `path`: a directory of it, or `/tmp`)."""
        return Call("GET", session_path(session, "files"), many(wire.FileEntryOut),
                    params=drop_none(path=path))

    @call
    def delete_file(self, session: str, path: str) -> Call[None]:
        """Delete a workspace file."""
        return Call("DELETE", file_path(session, path), nothing)

    # ---- snapshots --------------------------------------------------------------------

    @call
    def create_snapshot(self, session: str, name: str | None = None) -> Call[wire.SnapshotOut]:
        """A consistent copy of the session's files (`/workspace` and `/tmp`)."""
        return Call("POST", session_path(session, "snapshots"), one(wire.SnapshotOut),
                    json=drop_none(name=name))

    @call
    def list_snapshots(self, session: str) -> Call[list[wire.SnapshotOut]]:
        """The session's snapshots, oldest first."""
        return Call("GET", session_path(session, "snapshots"), many(wire.SnapshotOut))

    @call
    def restore_snapshot(self, session: str, snapshot: str) -> Call[wire.SnapshotOut]:
        """Make the session's files exactly the snapshot's (`ConflictError` `session_busy`
        while a call, file operation, process or kernel runs)."""
        return Call("POST", session_path(session, "snapshots", snapshot, "restore"),
                    one(wire.SnapshotOut))

    @call
    def delete_snapshot(self, session: str, snapshot: str) -> Call[None]:
        """Delete a snapshot (its bytes leave the tenant's quota)."""
        return Call("DELETE", session_path(session, "snapshots", snapshot), nothing)

    @call
    def fork_session(self, session: str, snapshot: str | None = None) -> Call[wire.SessionOut]:
        """A new session of the same profile with a copy of the files (now, or a
        snapshot's)."""
        return Call("POST", session_path(session, "fork"), one(wire.SessionOut),
                    json=drop_none(snapshot=snapshot))

    # ---- the agent --------------------------------------------------------------------

    @call
    def post_message(self, session: str, content: str) -> Call[wire.TurnOut]:
        """Start an agent turn; its progress streams on `events` (409 while another runs)."""
        return Call("POST", session_path(session, "messages"), one(wire.TurnOut),
                    json={"content": content})

    @call
    def list_messages(self, session: str, after: int = 0, limit: int = 1000
                      ) -> Call[list[wire.MessageOut]]:
        """The conversation (messages with an id above `after`)."""
        return Call("GET", session_path(session, "messages"), many(wire.MessageOut),
                    params={"after": after, "limit": limit})

    @call
    def cancel_turn(self, session: str) -> Call[wire.CancelOut]:
        """Cancel the running turn (404 when none runs)."""
        return Call("DELETE", session_path(session, "turn"), one(wire.CancelOut))

    # ---- tools and audit --------------------------------------------------------------

    @call
    def list_tools(self, session: str | None = None) -> Call[list[wire.ToolOut]]:
        """The tools the caller may use (with `session`: under that session's profile)."""
        return Call("GET", "/v1/tools", many(wire.ToolOut), params=drop_none(session=session))

    @call
    def get_tool(self, name: str, session: str | None = None) -> Call[wire.ToolOut]:
        """One tool: its description and JSON Schema parameters."""
        return Call("GET", f"/v1/tools/{seg(name)}", one(wire.ToolOut),
                    params=drop_none(session=session))

    @call
    def manual(self, name: str) -> Call[str]:
        """A tool's manual (Markdown)."""
        return Call("GET", f"/v1/manuals/{seg(name)}", manual_text)

    @call
    def audit(self, session: str | None = None, tool: str | None = None,
              exec_id: str | None = None, action: str | None = None,
              since: str | int | None = None, limit: int = 1000, tenant: str | None = None
              ) -> Call[list[AuditRecord]]:
        """Audit records (auditor, tenant_admin, admin); `since` is a seq or an ISO-8601
        time."""
        params = drop_none(session=session, tool=tool, exec_id=exec_id, action=action,
                           since=None if since is None else str(since), limit=limit,
                           tenant=tenant)
        return Call("GET", "/v1/audit", many(AuditRecord), params=params)

    @call
    def verify_audit(self) -> Call[wire.VerifyOut]:
        """Verify the hash chain (`ok`, `records`, `first_bad_seq`)."""
        return Call("GET", "/v1/audit/verify", one(wire.VerifyOut))
