"""`POST /v1/sessions/{id}/exec`'s contract, in-process through ASGI (`create_app` + httpx's
`ASGITransport`, a tmp data dir, the scripted FakeBackend): the result's fields
(docs/api.md), `ok`, the events a call publishes, and the error envelopes (400/403/404/422/429).
The real-server e2e tests (tests/e2e/test_api_sandbox.py) keep what needs a real engine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from runtime.events import ToolResultEvent
from runtime.sandbox.fake import FakeBackend, FakeResponse
from tests.unit.test_api_roles import POLICIES, Api, running

EXEC_FIELDS = {"ok", "exit_code", "stdout", "stderr", "timed_out", "oom_killed", "truncated",
               "duration_ms", "exec_id", "audit_seq", "timeout_s", "runtime", "node"}
PY = {"language": "python", "code": "print(42)"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with running(tmp_path, POLICIES / "default.yaml") as api:
        yield api


@asynccontextmanager
async def user_session(api: Api) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    tenant = await api.tenant()
    token = (await api.mint(tenant, "user"))["token"]
    async with api.client(token) as client:
        resp = await client.post("/v1/sessions", json={})
        assert resp.status_code == 201, resp.text
        yield client, str(resp.json()["id"])


def backend(api: Api) -> FakeBackend:
    fake = api.services.backend
    assert isinstance(fake, FakeBackend)
    return fake


def envelope(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])
    return body["error"]  # type: ignore[no-any-return]


def bus_events(api: Api, session: str) -> list[dict[str, Any]]:
    return [e.as_json() for e in api.services.hub.bus(session).replay]


async def test_a_run_answers_designs_fields_and_publishes_its_events(api: Api) -> None:
    backend(api).push(FakeResponse(stdout=b"42\n", stderr=b"warn\n"))
    async with user_session(api) as (client, session):
        resp = await client.post(f"/v1/sessions/{session}/exec",
                                 json={"tool": "code_exec", "args": PY})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert EXEC_FIELDS <= set(out)
    assert out["ok"] is True and out["exit_code"] == 0
    assert out["stdout"] == "42\n" and out["stderr"] == "warn\n"
    assert out["timed_out"] is False and out["oom_killed"] is False and out["truncated"] is False
    assert out["exec_id"].startswith("ex_") and isinstance(out["audit_seq"], int)
    assert out["timeout_s"] == 30 and out["runtime"] == "runc"
    assert isinstance(out["duration_ms"], int)
    assert not EXEC_FIELDS & set(out["metadata"])  # no field twice
    (request,) = backend(api).requests
    assert request.exec_id == out["exec_id"] and request.session == session

    call, result = [e for e in bus_events(api, session) if e["type"] != "exec_output"]
    assert call["type"] == "tool_call" and call["tool"] == "code_exec" and call["args"] == PY
    assert call["exec_id"] == result["exec_id"] == out["exec_id"] and "turn_id" not in call
    assert result["type"] == "tool_result" and result["success"] is True
    assert result["output"] and result["error"] is None
    for field in EXEC_FIELDS - {"exec_id"}:
        assert result[field] == out[field], field
    ToolResultEvent.model_validate({k: v for k, v in result.items() if k not in ("id", "ts")})


@pytest.mark.parametrize(("response", "flag"), [
    (FakeResponse(exit_code=3, stderr=b"boom\n"), None),
    (FakeResponse(exit_code=None, timed_out=True), "timed_out"),
    (FakeResponse(exit_code=0, oom_killed=True), "oom_killed"),
])
async def test_a_failing_program_is_a_200_with_ok_false(
        api: Api, response: FakeResponse, flag: str | None) -> None:
    backend(api).push(response)
    async with user_session(api) as (client, session):
        resp = await client.post(f"/v1/sessions/{session}/exec",
                                 json={"tool": "code_exec", "args": PY})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["ok"] is False and out["exit_code"] == response.exit_code
    if flag is not None:
        assert out[flag] is True
    (result,) = [e for e in bus_events(api, session) if e["type"] == "tool_result"]
    assert result["ok"] is False and result["success"] is False and result["error"]


async def test_a_large_timeout_is_clamped_and_said(api: Api) -> None:
    async with user_session(api) as (client, session):
        resp = await client.post(f"/v1/sessions/{session}/exec",
                                 json={"tool": "code_exec", "args": PY, "timeout_s": 10_000})
    assert resp.status_code == 200, resp.text
    assert resp.json()["timeout_s"] == 300


async def test_a_tool_that_runs_no_program_maps_onto_the_same_fields(api: Api) -> None:
    async with user_session(api) as (client, session):
        resp = await client.post(f"/v1/sessions/{session}/exec",
                                 json={"tool": "filesystem", "args": {"action": "list",
                                                                      "path": ""}})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert EXEC_FIELDS <= set(out) and out["ok"] is True and out["exit_code"] is None
    assert backend(api).requests == []
    (result,) = [e for e in bus_events(api, session) if e["type"] == "tool_result"]
    assert result["success"] is True and "exit_code" not in result  # no execution ran


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"tool": "code_exec", "args": {"language": "cobol", "code": "x"}}, 400, "invalid_input"),
    ({"tool": "code_exec", "args": {"code": "print(1)", "extra": 1}}, 400, "invalid_input"),
    ({"tool": "no_such_tool", "args": {}}, 404, "not_found"),
    ({"tool": "http_request", "args": {"url": "https://example.com/"}}, 403, "policy_denied"),
    ({"tool": "code_exec", "args": PY, "timeout_s": -1}, 422, "invalid_request"),
    ({"tool": "code_exec", "args": PY, "stray": True}, 422, "invalid_request"),
    ({"args": PY}, 422, "invalid_request"),
    ({"tool": "../etc", "args": {}}, 422, "invalid_request"),
])
async def test_refused_requests_answer_the_error_envelope_and_run_nothing(
        api: Api, body: dict[str, Any], status: int, code: str) -> None:
    async with user_session(api) as (client, session):
        resp = await client.post(f"/v1/sessions/{session}/exec", json=body)
    error = envelope(resp, status)
    assert error["code"] == code
    assert backend(api).requests == []
    events = bus_events(api, session)
    if code == "policy_denied":  # a valid call the policy refuses: announced, then refused
        assert error["rule"] == "profiles.developer.deny[group:web]"
        assert [e["type"] for e in events] == ["tool_call", "tool_result"]
        assert events[1]["success"] is False and events[1]["rule"] == error["rule"]
        assert events[1]["code"] == code and "ok" not in events[1]
    else:  # refused before the call (no tool, bad arguments, bad body): nothing announced
        assert events == []


async def test_wrong_role_is_403_and_another_tenants_session_404(api: Api) -> None:
    async with user_session(api) as (_, session):
        other = await api.tenant()
        auditor = (await api.mint(other, "auditor"))["token"]
        stranger = (await api.mint(other, "user"))["token"]
        body = {"tool": "code_exec", "args": PY}
        url = f"/v1/sessions/{session}/exec"
        assert envelope(await api.call(auditor, "POST", url, json=body), 403)["code"] == \
            "forbidden"
        assert envelope(await api.call(stranger, "POST", url, json=body), 404)["code"] == \
            "not_found"
        assert envelope(await api.call(None, "POST", url, json=body), 401)["code"] == \
            "unauthorized"
    assert backend(api).requests == []


async def test_a_quota_is_429_with_retry_after(tmp_path: Path) -> None:
    policy = yaml.safe_load((POLICIES / "default.yaml").read_text())
    policy["defaults"]["quotas"]["execs_per_minute"] = 2
    path = tmp_path / "quota.yaml"
    path.write_text(yaml.safe_dump(policy))
    async with running(tmp_path, path) as api, user_session(api) as (client, session):
        url = f"/v1/sessions/{session}/exec"
        for _ in range(2):
            assert (await client.post(url, json={"tool": "code_exec", "args": PY})
                    ).status_code == 200
        resp = await client.post(url, json={"tool": "code_exec", "args": PY})
        error = envelope(resp, 429)
        assert error["code"] == "quota_exceeded" and int(resp.headers["Retry-After"]) >= 1
        assert len(backend(api).requests) == 2
        (*_, result) = [e for e in bus_events(api, session) if e["type"] == "tool_result"]
        assert result["success"] is False and result["code"] == "quota_exceeded"


def sse_frames(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: "):]) for line in body.splitlines()
            if line.startswith("data: ")]


async def test_a_streamed_run_answers_its_events_then_ends(api: Api) -> None:
    """`?stream=true`: the call's `tool_call`, live `exec_output` and `tool_result`, read from
    the session bus while the call runs (`runtime.streaming.until_failed`); the stream ends at
    the result."""
    backend(api).push(FakeResponse(stdout=b"42\n", stderr=b"warn\n"))
    async with user_session(api) as (client, session):
        resp = await client.post(f"/v1/sessions/{session}/exec?stream=true",
                                 json={"tool": "code_exec", "args": PY})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    frames = sse_frames(resp.text)
    kinds = [f["type"] for f in frames]
    assert kinds[0] == "tool_call" and kinds[-1] == "tool_result", kinds
    output = "".join(f["data"] for f in frames if f["type"] == "exec_output")
    assert "42\n" in output and "warn\n" in output
    assert frames[-1]["ok"] is True and frames[-1]["stdout"] == "42\n"
    assert len({f["exec_id"] for f in frames}) == 1


async def test_a_streamed_run_that_fails_before_its_result_ends_with_an_error(api: Api) -> None:
    """A call refused after it was announced publishes no `tool_result` on this stream's
    terms: the stream does not wait for one, it ends with the caller's own `error` frame."""
    async with user_session(api) as (client, session):
        resp = await asyncio.wait_for(  # a stream waiting for a result that never comes
            client.post(f"/v1/sessions/{session}/exec?stream=true",
                        json={"tool": "no_such_tool", "args": {}}), 20)
    frames = sse_frames(resp.text)
    assert frames and frames[-1]["type"] == "error", frames
    assert frames[-1]["code"] == "not_found"
