"""The agent loop end to end: a real `navi serve`, the fake model servers on loopback, real
Docker for the tool calls that run code; everything observed over the public API (SSE)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.sse import frames
from tests.fakes.agent_harness import POLICY, PROFILES
from tests.fakes.ollama import FakeOllama
from tests.fakes.openai import FakeOpenAI
from tests.fakes.script import Call, Reply

END = {"stream_end", "error"}


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def down_host() -> str:
    return closed_port_url()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ollama: FakeOllama,
           down_host: str) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("agent"), policy=POLICY, extra_env={
        "NAVI_OLLAMA_HOST": f"{down_host},{ollama.url}",  # the first host is down: failover
        "NAVI_PROFILES_DIR": str(PROFILES), "NAVI_MODEL": "gemma3:270m",
        "NAVI_APPROVAL_TIMEOUT_S": "3", "NAVI_OPENAI_BASE_URL": "",
        "NAVI_EMBEDDED_MODEL": "off",
        # the cancel test finds the call's container by its navi.exec_id label; a tenant-pool
        # container is labelled before any call is known (docs/sandbox.md), so calls run on
        # the per-session pool here
        "NAVI_WARM_LATE_BIND": "false"})
    yield srv
    stop_server(srv)


@pytest.fixture(autouse=True)
def fresh_script(ollama: FakeOllama) -> Iterator[None]:
    ollama.model.fallback = ollama.model.__class__().fallback
    yield
    assert ollama.model.remaining() == 0, "the scripted turns were not all used"


@pytest.fixture(scope="module")
def auditor(server: Server, account: tuple[str, str]) -> str:
    return server.token_for(account[0], "auditor")


def audit_of(server: Server, auditor: str, session: str) -> list[dict[str, Any]]:
    with server.client(auditor) as client:
        resp = client.get("/v1/audit", params={"session": session})
    assert resp.status_code == 200, resp.text
    return list(resp.json())


def new_session(server: Server, token: str, profile: str | None = None) -> str:
    with server.client(token) as client:
        resp = client.post("/v1/sessions", json={"profile": profile} if profile else {})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])


def send(server: Server, token: str, session: str, content: str) -> str:
    with server.client(token) as client:
        resp = client.post(f"/v1/sessions/{session}/messages", json={"content": content})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["turn_id"])


def watch(server: Server, token: str, session: str, after: int = 0, timeout: float = 60,
          on_event: Any = None, until: set[str] = END) -> list[dict[str, Any]]:
    """SSE events of the session after `after`, up to the end of a turn (or `until`)."""
    seen: list[dict[str, Any]] = []
    with server.client(token) as client, client.stream(
            "GET", f"/v1/sessions/{session}/events", params={"after": after},
            timeout=httpx.Timeout(timeout)) as resp:
        assert resp.status_code == 200
        for event_id, data in frames(resp):
            data["_id"] = event_id
            seen.append(data)
            if on_event is not None:
                on_event(data)
            if data["type"] in until:
                break
    return seen


def kinds(events: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for e in events:
        if e["type"] in ("stream_delta", "thinking_delta", "exec_output") and out and \
                out[-1] == e["type"]:
            continue
        out.append(e["type"])
    return out


def one(events: list[dict[str, Any]], type_: str) -> dict[str, Any]:
    (found,) = [e for e in events if e["type"] == type_]
    return found


# ---- the whole way: message -> tool call -> container -> result -> answer -----------------


@pytest.mark.docker
def test_message_runs_code_in_a_container_and_streams_the_answer(
        server: Server, user: str, auditor: str, ollama: FakeOllama, down_host: str) -> None:
    code = "import os\nprint('uid', os.getuid())\nprint(sum(range(10)))"
    ollama.model.add(Reply(thinking="Run it in the sandbox.",
                           calls=[Call("code_exec", {"language": "python", "code": code})]),
                     lambda req: Reply(content="Result: " + req["messages"][-1]["content"]))
    session = new_session(server, user)
    send(server, user, session, "add the numbers below 10")
    events = watch(server, user, session)
    assert kinds(events) == ["stream_start", "thinking_delta", "thinking_end", "tool_call",
                             "exec_output", "tool_result", "stream_delta", "stream_end"]
    call, result, end = one(events, "tool_call"), one(events, "tool_result"), events[-1]
    assert call["tool"] == "code_exec" and call["args"]["code"] == code
    assert result["exec_id"] == call["exec_id"] and result["success"] is True
    uid_line = result["output"].splitlines()[0]
    assert int(uid_line.split()[1]) >= 200000  # the tenant's own sandbox uid (never 0)
    assert result["output"] == f"{uid_line}\n45\n" and result["exit_code"] == 0
    live = "".join(e["data"] for e in events if e["type"] == "exec_output")
    assert live == f"{uid_line}\n45\n"
    assert end["stop_reason"] == "stop" and end["content"].startswith(f"Result: {uid_line}")
    ids = [e["_id"] for e in events]
    assert ids == sorted(ids)
    # audited: intent before the run, outcome after, same exec_id as the events
    records = [r for r in audit_of(server, auditor, session) if r["exec_id"] == call["exec_id"]]
    assert [r["kind"] for r in records] == ["intent", "outcome"]
    assert records[-1]["exit_code"] == 0 and records[0]["tool"] == "code_exec"
    with server.client(user) as client:
        history = client.get(f"/v1/sessions/{session}/messages").json()
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    # failover: the first Ollama host is down, the second answered, the first is blacklisted
    failed = [json.loads(line) for line in server.log().splitlines()
              if "ollama_host_failed" in line]
    assert failed and failed[0]["host"] == down_host


@pytest.mark.docker
def test_cancel_kills_the_running_container(server: Server, user: str, auditor: str,
                                            ollama: FakeOllama) -> None:
    import docker

    ollama.model.add(Reply(calls=[Call("code_exec", {
        "language": "python", "code": "import time\nprint('started', flush=True)\n"
                                      "time.sleep(120)"})]))
    session = new_session(server, user)
    send(server, user, session, "sleep a long time")
    engine = docker.from_env()
    state: dict[str, Any] = {}

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "exec_output" and "started" in event["data"]:
            state["exec_id"] = event["exec_id"]
            found = engine.containers.list(filters={"label": f"navi.exec_id={event['exec_id']}"})
            state["running"] = len(found)
            t0 = time.monotonic()
            with server.client(user) as client:
                resp = client.delete(f"/v1/sessions/{session}/turn")
            state["cancel"] = (resp.status_code, resp.json(), time.monotonic() - t0)

    try:
        events = watch(server, user, session, on_event=on_event)
        gone = engine.containers.list(all=True,
                                      filters={"label": f"navi.exec_id={state['exec_id']}"})
    finally:
        engine.close()
    assert state["running"] == 1
    status, body, took = state["cancel"]
    assert status == 200 and body["cancelled"] is True and took < 15
    assert gone == []
    assert events[-1]["type"] == "stream_end" and events[-1]["stop_reason"] == "cancelled"
    audit = audit_of(server, auditor, session)
    assert "interrupted" in [r["kind"] for r in audit if r.get("exec_id") == state["exec_id"]]
    with server.client(user) as client:  # nothing runs any more
        assert client.delete(f"/v1/sessions/{session}/turn").status_code == 404


# ---- approvals ---------------------------------------------------------------------------


@pytest.mark.parametrize("decision", [
    pytest.param("approve", marks=pytest.mark.docker), "deny", "timeout"])
def test_approval_approve_deny_timeout(server: Server, user: str, auditor: str,
                                       ollama: FakeOllama, decision: str) -> None:
    ollama.model.add(Reply(calls=[Call("terminal", {"command": "echo approved-run"})]),
                     lambda req: Reply(content="tool said: " + req["messages"][-1]["content"]))
    session = new_session(server, user)
    send(server, user, session, "run echo")

    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "approval_required" and decision != "timeout":
            with server.client(user) as client:
                resp = client.post(f"/v1/approvals/{event['approval_id']}",
                                   json={"decision": decision})
                assert resp.status_code == 200, resp.text

    events = watch(server, user, session, on_event=on_event)
    order = kinds(events)
    assert order.index("tool_call") < order.index("approval_required") < order.index(
        "tool_result")
    asked = one(events, "approval_required")
    assert asked["tool"] == "terminal" and asked["args"]["command"] == "echo approved-run"
    assert asked["args"].get("background") in (None, False)  # terminal's default shown
    result = one(events, "tool_result")
    audit = audit_of(server, auditor, session)
    (approval,) = [r for r in audit if r["kind"] == "approval"]
    if decision == "approve":
        assert result["success"] is True and result["output"] == "approved-run\n"
        assert approval["decision"] == "approved" and approval["detail"].startswith(
            "decided_by: k_")
    else:
        assert result["success"] is False and result["code"] == "policy_denied"
        assert approval["decision"] == "refused"
        assert approval["detail"] == ("decided_by: system:expired" if decision == "timeout"
                                      else approval["detail"])
        assert "denied by policy" in events[-1]["content"]
    assert events[-1]["stop_reason"] == "stop"


# ---- what the model gets wrong -----------------------------------------------------------


def test_malformed_tool_calls_are_tool_errors(server: Server, user: str,
                                              ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("rm_rf", {"path": "/"}),
                     Call("filesystem", {"action": "explode", "path": "x"})]),
        lambda req: Reply(content=" | ".join(m["content"][:60] for m in req["messages"]
                                             if m["role"] == "tool")))
    session = new_session(server, user)
    send(server, user, session, "do something odd")
    events = watch(server, user, session)
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r["success"] for r in results] == [False, False]
    assert "unknown tool 'rm_rf'" in results[0]["error"]
    assert "action" in results[1]["error"]
    assert events[-1]["stop_reason"] == "stop"
    assert events[-1]["content"].count("Error:") == 2


def test_anti_stall_and_max_iterations(server: Server, user: str, ollama: FakeOllama) -> None:
    listing = Call("filesystem", {"action": "list", "path": ""})
    ollama.model.add(*[Reply(calls=[listing]) for _ in range(3)])
    session = new_session(server, user)
    send(server, user, session, "list forever")
    stalled = watch(server, user, session)
    assert stalled[-1]["stop_reason"] == "stalled"
    assert "`filesystem` was called 3 times" in stalled[-1]["content"]
    assert len([e for e in stalled if e["type"] == "tool_result"]) == 2

    ollama.model.add(*[Reply(calls=[Call("filesystem", {"action": "write", "path": f"f{n}.txt",
                                                        "content": str(n)})])
                       for n in range(4)])
    mark = stalled[-1]["_id"]
    send(server, user, session, "write files forever")
    capped = watch(server, user, session, after=mark)
    end = capped[-1]
    assert end["stop_reason"] == "max_iterations" and end["iterations"] == 4
    assert len([e for e in capped if e["type"] == "tool_result" and e["success"]]) == 4
    with server.client(user) as client:
        files = {f["path"] for f in client.get(f"/v1/sessions/{session}/files").json()}
    assert {"f0.txt", "f1.txt", "f2.txt", "f3.txt"} <= files


def test_a_token_revoked_mid_turn_stops_the_turn(server: Server, account: tuple[str, str],
                                                 user: str, ollama: FakeOllama) -> None:
    tenant = account[0]
    with server.client(server.admin_token) as admin:
        made = admin.post(f"/v1/tenants/{tenant}/tokens", json={"role": "user"}).json()
    titles = iter(range(1000))
    ollama.model.fallback = lambda _req: Reply(  # never done: one more item each step
        calls=[Call("todo", {"action": "add", "title": f"item {next(titles)}"})], hang_s=0.3)
    session = new_session(server, made["token"])
    send(server, made["token"], session, "keep busy")

    def revoke_after_the_first_call(event: dict[str, Any]) -> None:
        if event["type"] == "tool_result" and "revoked" not in made:
            with server.client(server.admin_token) as admin:
                made["revoked"] = admin.delete(
                    f"/v1/tenants/{tenant}/tokens/{made['id']}").status_code

    events = watch(server, user, session, on_event=revoke_after_the_first_call)
    assert made["revoked"] == 204
    results = [e for e in events if e["type"] == "tool_result"]
    assert 1 <= len(results) <= 2  # the first call, at most one more
    end = events[-1]
    assert end["type"] == "error" and end["code"] == "token_revoked", end
    with server.client(user) as client:
        history = client.get(f"/v1/sessions/{session}/messages").json()
        todos = client.post(f"/v1/sessions/{session}/exec",
                            json={"tool": "todo", "args": {"action": "list"}}).json()
    assert history[-1]["meta"]["error"] == "token_revoked"
    assert len(todos["metadata"]["items"]) == len(results)


# ---- the messages API --------------------------------------------------------------------


def test_one_turn_at_a_time_and_the_api_edges(server: Server, user: str,
                                              ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="thinking slowly", hang_s=30))
    session = new_session(server, user)
    turn_id = send(server, user, session, "first")
    watch(server, user, session, until={"stream_delta"})
    with server.client(user) as client:
        assert client.get(f"/v1/sessions/{session}/turn").json()["turn_id"] == turn_id
        second = client.post(f"/v1/sessions/{session}/messages", json={"content": "second"})
        assert second.status_code == 409 and second.json()["error"]["code"] == "conflict"
        for bad in ({}, {"content": ""}, {"content": "x" * 70_000}, {"content": "a", "x": 1}):
            resp = client.post(f"/v1/sessions/{session}/messages", json=bad)
            assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_request"
        assert client.delete(f"/v1/sessions/{session}/turn").json()["cancelled"] is True
        assert client.get(f"/v1/sessions/{session}/turn").status_code == 404
    _, other = server.tenant_with_user()
    with server.client(other) as client:  # another tenant sees nothing
        assert client.post(f"/v1/sessions/{session}/messages",
                           json={"content": "hi"}).status_code == 404
        assert client.get(f"/v1/sessions/{session}/messages").status_code == 404
        assert client.delete(f"/v1/sessions/{session}/turn").status_code == 404
    with server.client() as anonymous:
        assert anonymous.get(f"/v1/sessions/{session}/messages").status_code == 401
    with server.client(user) as client:
        history = client.get(f"/v1/sessions/{session}/messages").json()
    assert [(m["role"], m["meta"].get("stop_reason")) for m in history] == [
        ("user", None), ("assistant", "cancelled")]
    assert history[1]["content"] == "thinking slowly"


def test_ws_cancel_message(server: Server, user: str, ollama: FakeOllama) -> None:
    from websockets.sync.client import connect

    ollama.model.add(Reply(content="never ending", hang_s=30))
    session = new_session(server, user)
    url = server.url.replace("http://", "ws://") + f"/v1/sessions/{session}/ws"
    with connect(url, additional_headers={"Authorization": f"Bearer {user}"}) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"
        send(server, user, session, "go")
        seen = []
        while True:
            event = json.loads(ws.recv(timeout=30))
            seen.append(event)
            if event["type"] == "stream_delta":
                ws.send(json.dumps({"type": "cancel"}))
            if event["type"] in END:
                break
    assert seen[-1]["stop_reason"] == "cancelled"


# ---- the OpenAI-compatible backend -------------------------------------------------------


def test_openai_compatible_backend(tmp_path: Path) -> None:
    with FakeOpenAI(api_key="sk-fake") as fake:
        fake.model.add(
            Reply(thinking="let me see", calls=[Call("filesystem", '{"action": "list", "pa'),
                                                Call("todo", {"action": "list"})]),
            lambda req: Reply(content="tool errors: " + str(sum(
                1 for m in req["messages"] if m["role"] == "tool"
                and m["content"].startswith("Error:")))))
        srv = start_server(tmp_path, policy=POLICY, extra_env={
            "NAVI_OPENAI_BASE_URL": fake.url + "/v1", "NAVI_OPENAI_API_KEY": "sk-fake",
            "NAVI_MODEL": "fake-model", "NAVI_PROFILES_DIR": str(PROFILES),
            "NAVI_EMBEDDED_MODEL": "off"})
        try:
            _, token = srv.tenant_with_user()
            session = new_session(srv, token)
            send(srv, token, session, "list my files")
            events = watch(srv, token, session)
        finally:
            stop_server(srv)
    assert kinds(events)[:3] == ["stream_start", "thinking_delta", "thinking_end"]
    assert one(events, "stream_start")["backend"] == "openai"
    results = [e for e in events if e["type"] == "tool_result"]
    assert results[0]["success"] is False and "not valid JSON" in results[0]["error"]
    assert results[1]["tool"] == "todo"
    assert events[-1]["content"] == "tool errors: 1" and events[-1]["stop_reason"] == "stop"
    assert events[-1]["usage"] == {"prompt_tokens": 22, "completion_tokens": 14}
    sent = fake.model.requests[1]["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant")
    tool_ids = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert tool_ids == [c["id"] for c in assistant["tool_calls"]]  # answers match the calls
