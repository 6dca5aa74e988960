"""Roles, tokens and audited state changes, in-process through ASGI (`create_app` + httpx's
`ASGITransport`, a tmp data dir, the scripted FakeBackend): the tenant_admin scoping matrix,
the token API (no plaintext in listings, revoke and expiry answer 401), who may answer an
approval under default.yaml and lab.yaml, and the `action`/`object` of each audit record."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from unittest.mock import patch

import httpx
import pytest
import yaml

from runtime.api.app import create_app
from runtime.config import PROJECT_ROOT, Settings
from runtime.sandbox.fake import FakeBackend
from runtime.store import tokens as store_tokens
from tests.fakes.agent_app import InProcessApi

POLICIES = PROJECT_ROOT / "policies"


class Api(InProcessApi):
    async def tenant(self, name: str | None = None) -> str:
        resp = await self.call(self.admin_token, "POST", "/v1/tenants",
                               json={"name": name or f"t{secrets.token_hex(4)}"})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    async def mint(self, tenant_id: str, role: str, by: str | None = None,
                   **extra: Any) -> dict[str, Any]:
        resp = await self.call(by or self.admin_token, "POST", f"/v1/tenants/{tenant_id}/tokens",
                               json={"role": role, **extra})
        assert resp.status_code == 201, resp.text
        return resp.json()  # type: ignore[no-any-return]

    async def records(self, tenant_id: str) -> list[dict[str, Any]]:
        resp = await self.call(self.admin_token, "GET", "/v1/audit",
                               params={"tenant": tenant_id})
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]


@asynccontextmanager
async def running(tmp_path: Path, policy: Path) -> AsyncIterator[Api]:
    admin_token = "navi_admin_" + secrets.token_urlsafe(24)
    settings = Settings(data_dir=tmp_path / "data", policy=policy, admin_token=admin_token,
                        embedded_model="off", disk_overcommit=1000, disk_reserve_mb=0,
                        approval_timeout_s=30, log_level="warning")
    app = create_app(settings, backend=FakeBackend())
    async with app.router.lifespan_context(app):
        yield Api(app, admin_token)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running(tmp_path, POLICIES / "default.yaml") as api:
        yield api


def _error(resp: httpx.Response, status: int) -> str:
    assert resp.status_code == status, resp.text
    return str(resp.json()["error"]["code"])


# -- roles -----------------------------------------------------------------------------------

async def test_tenant_admin_manages_its_own_tenant_only(api: Api) -> None:
    a, b = await api.tenant("alpha"), await api.tenant("beta")
    boss = (await api.mint(a, "tenant_admin"))["token"]
    b_user = await api.mint(b, "user")
    async with api.client(b_user["token"]) as client:
        b_session = (await client.post("/v1/sessions", json={})).json()["id"]

    assert _error(await api.call(boss, "POST", "/v1/tenants", json={"name": "x"}),
                  403) == "forbidden"
    for method, url, body in [
        ("POST", f"/v1/tenants/{b}/tokens", {"role": "user"}),
        ("GET", f"/v1/tenants/{b}/tokens", None),
        ("DELETE", f"/v1/tenants/{b}/tokens/{b_user['id']}", None),
        ("GET", f"/v1/sessions/{b_session}", None),
        ("DELETE", f"/v1/sessions/{b_session}", None),
        ("GET", "/v1/audit?tenant=" + b, None),
    ]:
        assert _error(await api.call(boss, method, url, json=body), 404) == "not_found", url
    assert (await api.call(b_user["token"], "GET", "/v1/sessions")).status_code == 200

    # its own tenant: tokens (not admin), sessions, audit
    mine = await api.mint(a, "user", by=boss, name="ci")
    assert mine["role"] == "user" and mine["name"] == "ci"
    assert (await api.mint(a, "tenant_admin", by=boss))["role"] == "tenant_admin"
    assert (await api.mint(a, "auditor", by=boss))["role"] == "auditor"
    assert _error(await api.call(boss, "POST", f"/v1/tenants/{a}/tokens",
                                 json={"role": "admin"}), 403) == "forbidden"
    assert (await api.call(boss, "GET", f"/v1/tenants/{a}/tokens")).status_code == 200
    assert (await api.call(boss, "DELETE", f"/v1/tenants/{a}/tokens/{mine['id']}")
            ).status_code == 204
    async with api.client(boss) as client:
        session = await client.post("/v1/sessions", json={})
        assert session.status_code == 201, session.text
        assert (await client.get(f"/v1/sessions/{session.json()['id']}")).status_code == 200
        assert (await client.get("/v1/audit")).status_code == 200
        assert (await client.get("/v1/audit", params={"tenant": a})).status_code == 200
        assert [t["id"] for t in (await client.get("/v1/tenants")).json()] == [a]
        assert _error(await client.get("/v1/policies"), 403) == "forbidden"
        # server_admin: the operator's profile
        assert _error(await client.post("/v1/sessions", json={"profile": "server_admin"}),
                      403) == "forbidden"

    # users and auditors manage nothing
    user = (await api.mint(a, "user"))["token"]
    auditor = (await api.mint(a, "auditor"))["token"]
    for token in (user, auditor):
        assert _error(await api.call(token, "POST", f"/v1/tenants/{a}/tokens",
                                     json={"role": "user"}), 403) == "forbidden"
        assert _error(await api.call(token, "GET", f"/v1/tenants/{a}/tokens"), 403) == \
            "forbidden"


async def test_admin_exists_only_in_the_operator_tenant(api: Api) -> None:
    operator = await api.services.store.operator_tenant()
    assert operator is not None
    assert (await api.services.store.get_tenant(operator)).name == "admin"  # type: ignore[union-attr]
    other = await api.tenant()
    resp = await api.call(api.admin_token, "POST", f"/v1/tenants/{other}/tokens",
                          json={"role": "admin"})
    assert _error(resp, 403) == "forbidden" and "operator tenant" in resp.text
    assert (await api.mint(other, "tenant_admin"))["role"] == "tenant_admin"
    second = await api.mint(operator, "admin")
    async with api.client(second["token"]) as client:
        assert (await client.post("/v1/tenants", json={"name": "by-second"})).status_code == 201
        # the operator tenant's admin may use server_admin; no other tenant is offered it
        made = await client.post("/v1/sessions", json={"profile": "server_admin"})
        assert made.status_code == 201, made.text
    resp = await api.call(api.admin_token, "GET", "/v1/tenants/t_0000000000000000/tokens")
    assert _error(resp, 404) == "not_found"


# -- tokens ----------------------------------------------------------------------------------

async def test_token_listing_never_shows_the_plaintext(api: Api) -> None:
    tenant = await api.tenant()
    made = await api.mint(tenant, "user", name="laptop", expires_in_s=3600)
    assert set(made) >= {"id", "token", "role", "name", "expires_at"}
    assert made["token"].startswith("navi_") and made["name"] == "laptop"
    assert made["expires_at"] == pytest.approx(store_tokens.now() + 3600, abs=60)
    listed = await api.call(api.admin_token, "GET", f"/v1/tenants/{tenant}/tokens")
    assert listed.status_code == 200
    assert made["token"] not in listed.text and "token_hash" not in listed.text
    (row,) = listed.json()
    assert row["id"] == made["id"] and row["role"] == "user" and row["name"] == "laptop"
    assert row["expires_at"] == made["expires_at"] and row["revoked_at"] is None
    assert "token" not in row


async def test_revoked_token_gets_401(api: Api) -> None:
    tenant = await api.tenant()
    made = await api.mint(tenant, "user")
    assert (await api.call(made["token"], "GET", "/v1/sessions")).status_code == 200
    url = f"/v1/tenants/{tenant}/tokens/{made['id']}"
    resp = await api.call(api.admin_token, "DELETE", url)
    assert resp.status_code == 204 and resp.content == b""
    assert _error(await api.call(made["token"], "GET", "/v1/sessions"), 401) == "unauthorized"
    assert (await api.call(api.admin_token, "DELETE", url)).status_code == 204  # no-op
    revokes = [r for r in await api.records(tenant) if r["action"] == "token.revoke"]
    assert len(revokes) == 1  # a second revoke changes nothing and records nothing
    assert _error(await api.call(api.admin_token, "DELETE",
                                 f"/v1/tenants/{tenant}/tokens/k_0000000000000000"),
                  404) == "not_found"


async def test_expired_token_gets_401(api: Api) -> None:
    tenant = await api.tenant()
    made = await api.mint(tenant, "user", expires_in_s=60)
    assert (await api.call(made["token"], "GET", "/v1/sessions")).status_code == 200
    later = store_tokens.now() + 61
    with patch("runtime.store.tokens.now", return_value=later):
        assert _error(await api.call(made["token"], "GET", "/v1/sessions"), 401) == \
            "unauthorized"
    before = len(await api.records(tenant))
    for bad in ({"expires_in_s": 0}, {"expires_in_s": -5}, {"expires_in_s": "soon"},
                {"name": "tab\there"}, {"role": "root"}):
        resp = await api.call(api.admin_token, "POST", f"/v1/tenants/{tenant}/tokens",
                              json={"role": "user", **bad})
        assert resp.status_code in (400, 422), bad
    assert len(await api.records(tenant)) == before  # refused: nothing recorded


# -- the audit -------------------------------------------------------------------------------

async def test_each_change_is_audited_before_it_applies(api: Api) -> None:
    tenant = await api.tenant("audited")
    made = await api.mint(tenant, "auditor")
    await api.call(api.admin_token, "DELETE", f"/v1/tenants/{tenant}/tokens/{made['id']}")
    records = await api.records(tenant)
    admin_id = (await api.services.store.authenticate(api.admin_token)).id  # type: ignore[union-attr]
    got = [(r["kind"], r["action"], r["object"], r["user"]) for r in records]
    assert got == [("action", "tenant.create", tenant, admin_id),
                   ("action", "token.create", made["id"], admin_id),
                   ("action", "token.revoke", made["id"], admin_id)]
    assert all(r["decision"] == "allow" and r["rule"] == "roles.admin.manage"
               for r in records)
    assert records[0]["detail"] == "name: audited" and records[1]["detail"] == "role: auditor"
    only = await api.call(api.admin_token, "GET", "/v1/audit",
                          params={"tenant": tenant, "action": "token.revoke"})
    assert [r["seq"] for r in only.json()] == [records[2]["seq"]]

    # fail closed: with the audit log unavailable nothing changes
    before = await api.services.store.list_tokens(tenant)
    await api.services.audit.close()
    resp = await api.call(api.admin_token, "POST", f"/v1/tenants/{tenant}/tokens",
                          json={"role": "user"})
    assert _error(resp, 503) == "audit_unavailable"
    assert await api.services.store.list_tokens(tenant) == before
    resp = await api.call(api.admin_token, "POST", "/v1/tenants", json={"name": "unaudited"})
    assert resp.status_code == 503
    assert await api.services.store.get_tenant_by_name("unaudited") is None


async def test_execution_records_say_exec(api: Api) -> None:
    tenant = await api.tenant()
    user = (await api.mint(tenant, "user"))["token"]
    async with api.client(user) as client:
        session = (await client.post("/v1/sessions", json={"profile": "secretary"})).json()["id"]
        denied = await client.post(f"/v1/sessions/{session}/exec", json={
            "tool": "code_exec", "args": {"language": "python", "code": "1"}})
        assert denied.status_code == 403
    (record,) = [r for r in await api.records(tenant) if r["kind"] == "denied"]
    assert record["action"] == "exec" and record["object"] is None


# -- approvals -------------------------------------------------------------------------------

def _asking_policy(tmp_path: Path, base: str) -> Path:
    """`base` as shipped (its `approvals:` block included) plus an `ask: always` for todo."""
    policy = yaml.safe_load((POLICIES / base).read_text())
    for profile in policy["profiles"].values():
        profile.setdefault("approvals", []).append({"tools": ["todo"], "when": "always"})
    path = tmp_path / f"asking-{base}"
    path.write_text(yaml.safe_dump(policy))
    return path


async def _ask(api: Api, asker: str, session: str) -> tuple[asyncio.Task[httpx.Response],
                                                                dict[str, Any]]:
    """Start a call that asks; return it (running) and its pending approval."""
    async def call() -> httpx.Response:
        return await api.call(asker, "POST", f"/v1/sessions/{session}/exec",
                              json={"tool": "todo", "args": {"action": "list"}})

    task = asyncio.create_task(call())
    for _ in range(500):
        pending = (await api.call(asker, "GET", "/v1/approvals")).json()
        if pending:
            return task, pending[0]
        await asyncio.sleep(0.01)
    raise AssertionError("no approval was requested")



async def _answer(api: Api, token: str, approval: str, decision: str = "approve"
                  ) -> httpx.Response:
    return await api.call(token, "POST", f"/v1/approvals/{approval}",
                          json={"decision": decision})


async def test_self_approval_refused_under_lab(tmp_path: Path) -> None:
    async with running(tmp_path, _asking_policy(tmp_path, "lab.yaml")) as api:
        tenant = await api.tenant("physics")
        student = (await api.mint(tenant, "user"))["token"]
        teacher = (await api.mint(tenant, "tenant_admin"))["token"]
        auditor = (await api.mint(tenant, "auditor"))["token"]
        session = (await api.call(student, "POST", "/v1/sessions",
                                  json={"profile": "developer"})).json()["id"]
        task, approval = await _ask(api, student, session)
        assert approval["self_approve"] is False and "tool_hash" in approval
        assert approval["requested_by"] == (
            await api.services.store.authenticate(student)).id  # type: ignore[union-attr]
        resp = await _answer(api, student, approval["id"])
        assert _error(resp, 403) == "forbidden" and "self_approve" in resp.text
        assert _error(await _answer(api, auditor, approval["id"]), 403) == "forbidden"
        other = await api.tenant()
        stranger = (await api.mint(other, "tenant_admin"))["token"]
        assert _error(await _answer(api, stranger, approval["id"]), 404) == "not_found"
        assert not task.done()
        decided = await _answer(api, teacher, approval["id"])
        assert decided.status_code == 200 and decided.json()["status"] == "approved"
        result = await asyncio.wait_for(task, 30)
        assert result.status_code == 200 and result.json()["ok"] is True, result.text
        assert _error(await _answer(api, teacher, approval["id"]), 409) == "conflict"
        records = await api.records(tenant)
        (decide,) = [r for r in records if r["action"] == "approval.decide"]
        teacher_id = (await api.services.store.authenticate(teacher)).id  # type: ignore[union-attr]
        assert decide["kind"] == "action" and decide["object"] == approval["id"]
        assert decide["user"] == teacher_id and decide["session"] == session
        assert decide["tool"] == "todo" and decide["detail"] == "decision: approve"
        (granted,) = [r for r in records if r["kind"] == "approval"]
        assert granted["seq"] > decide["seq"]  # recorded before the decision took effect
        assert granted["action"] == "exec" and granted["detail"] == f"decided_by: {teacher_id}"


async def test_self_approval_allowed_under_default(tmp_path: Path) -> None:
    async with running(tmp_path, _asking_policy(tmp_path, "default.yaml")) as api:
        tenant = await api.tenant()
        user = (await api.mint(tenant, "user"))["token"]
        auditor = (await api.mint(tenant, "auditor"))["token"]
        session = (await api.call(user, "POST", "/v1/sessions", json={})).json()["id"]
        task, approval = await _ask(api, user, session)
        assert approval["self_approve"] is True
        assert _error(await _answer(api, auditor, approval["id"]), 403) == "forbidden"
        decided = await _answer(api, user, approval["id"], "deny")
        assert decided.status_code == 200 and decided.json()["status"] == "denied"
        result = await asyncio.wait_for(task, 30)
        assert _error(result, 403) == "policy_denied"
        (decide,) = [r for r in await api.records(tenant) if r["action"] == "approval.decide"]
        assert decide["detail"] == "decision: deny"


TOOL = '''name = "shout"
description = "Upper-cases a text."
parameters = {"type": "object", "properties": {"text": {"type": "string"}},
              "required": ["text"], "additionalProperties": False}


async def execute(params):
    return params["text"].upper()
'''


async def test_an_agent_written_tools_approval_shows_its_hash(tmp_path: Path) -> None:
    async with running(tmp_path, POLICIES / "lab.yaml") as api:  # developer: ask first_use
        tenant = await api.tenant("chemistry")
        user = (await api.mint(tenant, "user"))["token"]
        lead = (await api.mint(tenant, "tenant_admin"))["token"]
        session = (await api.call(user, "POST", "/v1/sessions",
                                  json={"profile": "developer"})).json()["id"]
        for tool, args in [("write_tool", {"name": "shout", "code": TOOL}),
                           ("reload_tools", {})]:
            resp = await api.call(user, "POST", f"/v1/sessions/{session}/exec",
                                  json={"tool": tool, "args": args})
            assert resp.status_code == 200 and resp.json()["ok"], resp.text

        async def call() -> httpx.Response:
            return await api.call(user, "POST", f"/v1/sessions/{session}/exec",
                                  json={"tool": "shout", "args": {"text": "hi"}})

        task = asyncio.create_task(call())
        for _ in range(500):
            pending = (await api.call(lead, "GET", "/v1/approvals")).json()
            if pending or task.done():
                break
            await asyncio.sleep(0.01)
        assert pending, (await task).text
        (approval,) = pending
        assert approval["tool"] == "shout" and len(approval["tool_hash"] or "") >= 32
        assert (await _answer(api, lead, approval["id"])).status_code == 200
        await asyncio.wait_for(task, 30)
        (decide,) = [r for r in await api.records(tenant) if r["action"] == "approval.decide"]
        assert decide["tool_hash"] == approval["tool_hash"] and decide["tool"] == "shout"
        (granted,) = [r for r in await api.records(tenant) if r["kind"] == "approval"]
        assert granted["tool_hash"] == approval["tool_hash"]
