"""`navi serve` killed with SIGKILL while a background sub-agent works and the session is in
plan mode: the next server on the same data directory lists the sub-agent (`kind: "agent"`)
ended `interrupted`, and the session is still in plan mode (a write is denied with rule
`plan_mode`), all over the public API."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tests.e2e.conftest import start_server, stop_server
from tests.e2e.test_agent_api import new_session, send, watch
from tests.fakes.agent_harness import POLICY, PROFILES
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

WRITE = {"action": "write", "path": "out.txt", "content": "x"}


def route(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    first = next(m for m in messages if m["role"] == "user")["content"]
    tools = [m for m in messages if m["role"] == "tool"]
    if "SUBTASK" in first:
        return Reply(content="never", hang_s=30)  # still working when the server dies
    if messages[-1]["role"] == "user" and "write it" in messages[-1]["content"]:
        return Reply(calls=[Call("filesystem", WRITE)])
    if "write it" in [m["content"] for m in messages if m["role"] == "user"][-1]:
        return Reply(content="still planning")
    if not tools:
        return Reply(calls=[Call("spawn_agent", {"task": "SUBTASK: look around",
                                                 "background": True}),
                            Call("enter_plan_mode", {})])
    return Reply(content="parent done")


def agents(client: Any, session: str) -> list[dict[str, Any]]:
    resp = client.get(f"/v1/sessions/{session}/processes")
    assert resp.status_code == 200, resp.text
    return [p for p in resp.json() if p["kind"] == "agent"]


def test_kill_9_ends_background_agents_interrupted_and_keeps_plan_mode(
        tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.fallback = route
    env = {"NAVI_OLLAMA_HOST": ollama.url, "NAVI_PROFILES_DIR": str(PROFILES),
           "NAVI_MODEL": "gemma3:270m", "NAVI_OPENAI_BASE_URL": "",
           "NAVI_EMBEDDED_MODEL": "off"}
    first = start_server(tmp_path, policy=POLICY, extra_env=env, ready_s=120)
    try:
        _, token = first.tenant_with_user()
        session = new_session(first, token)
        send(first, token, session, "plan, and delegate a look around")
        events = watch(first, token, session)
        assert events[-1]["type"] == "stream_end", events[-1]
        with first.client(token) as client:
            (running,) = agents(client, session)
        assert running["state"] == "running", running
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(timeout=10)
    finally:
        stop_server(first)
    second = start_server(tmp_path, policy=POLICY, extra_env=env, ready_s=120)
    try:
        with second.client(token) as client:
            (ended,) = agents(client, session)
            output = client.get(f"/v1/sessions/{session}/processes/{running['id']}/output")
        assert (ended["id"], ended["state"], ended["reason"]) == (
            running["id"], "exited", "interrupted"), ended
        assert output.status_code == 200 and "transcript was lost" in output.json()["output"]
        send(second, token, session, "write it")
        later = watch(second, token, session, after=0)
        results = [(e["tool"], e["success"], e.get("rule")) for e in later
                   if e["type"] == "tool_result"]
    finally:
        stop_server(second)
    assert results == [("filesystem", False, "plan_mode")], results
