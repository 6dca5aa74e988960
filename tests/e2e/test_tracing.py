"""Tracing end to end: a real `navi serve` with NAVI_OTEL_ENDPOINT pointing at an OTLP/HTTP
receiver this test runs on 127.0.0.1, the scripted fake Ollama driving one turn that calls
`code_exec` in a real container, and a direct exec of a user tool holding a secret. The
exported spans form the tree turn -> model calls / tool call -> execution, carry the GenAI
attributes and the audit seq of the execution's outcome, and no exported byte holds the
code, the message, the secret or a bearer token. Unset: nothing is exported."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.docker.test_tool_secrets import TOOL_HASH
from tests.e2e.conftest import start_server, stop_server
from tests.e2e.test_agent_api import audit_of, new_session, send, watch
from tests.e2e.test_agent_workday import PROFILE, policy
from tests.fakes.json_api import json_api
from tests.fakes.ollama import FakeOllama
from tests.fakes.otlp import Receiver, Span, otlp_receiver
from tests.fakes.script import Call, Reply

KEY = "wx-TRACE-" + secrets.token_hex(12)  # fresh per run: found only if it leaked
CODE_MARK = "trace-" + secrets.token_hex(8)
MESSAGE = "please compute " + secrets.token_hex(8)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as got:
        yield got


def weather_api() -> Any:
    def answer(request: BaseHTTPRequestHandler) -> tuple[int, Any]:
        return 200, {"temp_c": 3.5, "summary": "fog"}
    return json_api(answer)


def one_named(spans: list[Span], prefix: str) -> Span:
    (found,) = [s for s in spans if s.name.startswith(prefix)]
    return found


@pytest.mark.docker
def test_turn_tool_call_and_execution_spans_reach_the_collector(
        tmp_path: Path, ollama: FakeOllama, receiver: Receiver) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "developer.yaml").write_text(PROFILE)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(policy(TOOL_HASH))
    with weather_api() as port:
        server = start_server(tmp_path, policy=policy_file, extra_env={
            "NAVI_OLLAMA_HOST": ollama.url, "NAVI_PROFILES_DIR": str(profiles),
            "NAVI_MODEL": "gemma3:270m", "NAVI_OPENAI_BASE_URL": "",
            "NAVI_EMBEDDED_MODEL": "off", "NAVI_EGRESS_ALLOW_LOOPBACK": "1",
            "NAVI_EGRESS_PORTS": json.dumps([port]), "NAVI_OTEL_ENDPOINT": receiver.url})
        try:
            tenant, user = server.tenant_with_user(role="tenant_admin")
            auditor = server.token_for(tenant, "auditor")
            code = f"print('{CODE_MARK}'[:6], 6 * 7)"
            ollama.model.add(Reply(calls=[Call("code_exec", {"language": "python",
                                                             "code": code})]),
                             Reply(content="it printed 42"))
            session = new_session(server, user)
            turn_id = send(server, user, session, MESSAGE)
            events = watch(server, user, session, timeout=90)
            assert events[-1]["type"] == "stream_end", events[-1]
            (call,) = [e for e in events if e["type"] == "tool_call"]
            with server.client(user) as client:
                stored = client.put(f"/v1/tenants/{tenant}/secrets/weather_key",
                                    json={"value": KEY})
                assert stored.status_code == 204, stored.text
                direct = client.post(f"/v1/sessions/{session}/exec", json={
                    "tool": "weather_now",
                    "args": {"city": "Oslo",
                             "endpoint": f"http://127.0.0.1:{port}/v1/current"}})
            assert direct.status_code == 200, direct.text
            assert direct.json()["ok"] is True, direct.text
            records = audit_of(server, auditor, session)
        finally:
            stop_server(server)  # the server flushes its spans as it stops
    deadline = time.monotonic() + 10
    while len(receiver.spans()) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    spans = receiver.spans()
    by_id = {s.span_id: s for s in spans}

    turn = one_named(spans, "invoke_agent ")
    assert turn.parent_id == "" and turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["navi.turn_id"] == turn_id
    assert turn.attributes["navi.session"] == session
    assert turn.attributes["navi.tenant"] == tenant
    assert turn.attributes["navi.stop_reason"] == "stop"
    chats = [s for s in spans if s.name == "chat gemma3:270m"]
    assert len(chats) == 2 and all(c.parent_id == turn.span_id for c in chats)
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "ollama"
        assert chat.attributes["gen_ai.request.model"] == "gemma3:270m"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0

    tools = {s.attributes["gen_ai.tool.name"]: s for s in spans
             if s.name.startswith("execute_tool ")}
    assert set(tools) == {"code_exec", "weather_now"}
    agent_call, direct_call = tools["code_exec"], tools["weather_now"]
    assert agent_call.name == "execute_tool code_exec"
    assert agent_call.parent_id == turn.span_id
    assert agent_call.attributes["gen_ai.tool.call.id"] == call["call_id"]
    assert agent_call.attributes["navi.exec_id"] == call["exec_id"]
    assert direct_call.parent_id == "" and "gen_ai.tool.call.id" not in direct_call.attributes

    execs = [s for s in spans if s.name.startswith("navi.exec ")]
    assert {by_id[e.parent_id].name for e in execs} == {"execute_tool code_exec",
                                                         "execute_tool weather_now"}
    outcomes = {r["exec_id"]: r for r in records if r["kind"] == "outcome"}
    given = [r["secrets"] for r in records if r["kind"] == "intent" and r["tool"] == "weather_now"]
    assert given == [["weather_key"]]  # the direct exec held the secret
    for run in execs:
        a = run.attributes
        record = outcomes[a["navi.exec_id"]]  # linked to the audit record by its seq
        assert a["navi.audit_seq"] == record["seq"] == by_id[run.parent_id].attributes[
            "navi.audit_seq"]
        assert a["navi.exit_code"] == record["exit_code"] == 0
        assert a["navi.tenant"] == tenant and a["navi.session"] == session
        assert a["navi.runtime"] == "runc" and a["navi.tool"] in ("code_exec", "weather_now")
        assert by_id[run.parent_id].trace_id == run.trace_id

    raw = receiver.raw()
    for never in (KEY, CODE_MARK, code, MESSAGE, user, auditor, server.admin_token,
                  "it printed 42"):
        assert never.encode() not in raw, never


def test_unset_nothing_is_exported(tmp_path: Path, receiver: Receiver) -> None:
    # the SDK's own variable points at the collector: without NAVI_OTEL_ENDPOINT, still nothing
    server = start_server(tmp_path, extra_env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                                               "NAVI_OTEL_ENDPOINT": ""})
    try:
        _, user = server.tenant_with_user()
        with server.client(user) as client:
            session = client.post("/v1/sessions", json={}).json()["id"]
            done = client.post(f"/v1/sessions/{session}/exec",
                               json={"tool": "todo", "args": {"action": "list"}})
        assert done.status_code == 200, done.text
    finally:
        stop_server(server)
    assert receiver.paths == []
    assert "tracing_on" not in server.log()
