"""Issue 40's agent features, each through a real turn on a real `navi serve` (the scripted
fake Ollama on loopback, everything observed over the public API): a plan approved through
`/v1/approvals` lifts plan mode and becomes the todo; `planning_mandatory` runs its phases and
replans a failed step; the prompt carries the date, `NAVI_PUBLIC_URL` and the memory
sections; images in a message reach the model; a profile's model list skips a missing model
with a notice; a background sub-agent (with its own todo) is followed, waited for and
stopped as a process; `write_tool`'s
tool is callable at once (a real tools-runner container)."""

from __future__ import annotations

import base64
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_agent_api import new_session, send, watch
from tests.fakes.agent_harness import POLICY, PROFILES
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
PUBLIC_URL = "https://navi.example.org"
SHOUT = (
    'name = "shout"\ndescription = "Upper-case a text."\n'
    'parameters = {"type": "object", "properties": {"text": {"type": "string"}}, '
    '"required": ["text"]}\n'
    "async def execute(params):\n    return params['text'].upper()\n"
)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOllama]:
    with FakeOllama(models=("gemma3:270m",), vision=True) as model:
        yield model


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fake: FakeOllama) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("seeds")
    policy = yaml.safe_load(POLICY.read_text())
    developer = policy["profiles"]["developer"]
    developer["allow"].append("group:user_tools")
    policy["profiles"]["planner"] = {**developer, "planning_mandatory": True}
    policy["profiles"]["fallback"] = dict(developer)
    policy["tenants"]["*"]["profiles"] += ["planner", "fallback"]
    (tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    profiles = tmp / "profiles"
    shutil.copytree(PROFILES, profiles)
    base = yaml.safe_load((PROFILES / "developer.yaml").read_text())
    base["tools"] = ["*"]
    base["max_iterations"] = 10
    (profiles / "developer.yaml").write_text(yaml.safe_dump(base))
    (profiles / "planner.yaml").write_text(yaml.safe_dump(base))
    (profiles / "fallback.yaml").write_text(yaml.safe_dump(
        {**base, "models": ["gone:70b", "gemma3:270m"]}))
    srv = start_server(tmp, policy=tmp / "policy.yaml", extra_env={
        "NAVI_OLLAMA_HOST": fake.url, "NAVI_PROFILES_DIR": str(profiles),
        "NAVI_MODEL": "gemma3:270m", "NAVI_OPENAI_BASE_URL": "",
        "NAVI_EMBEDDED_MODEL": "off", "NAVI_PUBLIC_URL": PUBLIC_URL}, ready_s=120)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def approver(server: Server, account: tuple[str, str]) -> str:
    """Another person of the tenant (a token may not approve its own agent's requests)."""
    return server.token_for(account[0], "user")


@pytest.fixture(autouse=True)
def fresh_script(fake: FakeOllama) -> Iterator[None]:
    fake.model.fallback = fake.model.__class__().fallback
    with fake.model._lock:  # what a failed test before left
        fake.model._script.clear()
    yield
    assert fake.model.remaining() == 0, "the scripted turns were not all used"


def approving(server: Server, token: str) -> Any:
    def on_event(event: dict[str, Any]) -> None:
        if event["type"] == "approval_required":
            with server.client(token) as client:
                resp = client.post(f"/v1/approvals/{event['approval_id']}",
                                   json={"decision": "approve"})
            assert resp.status_code == 200, resp.text
    return on_event


def results(events: list[dict[str, Any]]) -> list[tuple[str, bool, str | None]]:
    """(tool, success, the rule that refused it)."""
    return [(e["tool"], e["success"], None if e["success"] else e.get("rule"))
            for e in events if e["type"] == "tool_result"]


def outputs(events: list[dict[str, Any]], tool: str) -> list[str]:
    return [str(e.get("output")) for e in events if e["type"] == "tool_result"
            and e["tool"] == tool]


def system_of(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


def test_an_approved_plan_lifts_plan_mode_and_becomes_the_todo(
        server: Server, user: str, approver: str, fake: FakeOllama) -> None:
    write = {"action": "write", "path": "out.txt", "content": "x"}
    fake.model.add(
        Reply(calls=[Call("enter_plan_mode", {}), Call("filesystem", write)]),
        Reply(calls=[Call("exit_plan_mode", {"plan": "1. Write out.txt\n2. Report"})]),
        Reply(calls=[Call("filesystem", write), Call("todo", {"action": "list"})]),
        Reply(content="done"))
    session = new_session(server, user)
    send(server, user, session, "plan, then write")
    events = watch(server, user, session, on_event=approving(server, approver))
    assert results(events) == [
        ("enter_plan_mode", True, None), ("filesystem", False, "plan_mode"),
        ("exit_plan_mode", True, None), ("filesystem", True, None), ("todo", True, None)]
    assert "1. Write out.txt" in outputs(events, "todo")[0]
    assert events[-1]["content"] == "done"


def test_planning_mandatory_runs_the_phases_and_replans(
        server: Server, user: str, approver: str, fake: FakeOllama) -> None:
    fake.model.add(
        Reply(calls=[Call("filesystem", {"action": "list", "path": "."})]),
        Reply(content="Analysis: the workspace is empty."),
        Reply(content="Review: nothing is missing."),
        Reply(calls=[Call("exit_plan_mode", {"plan": "1. Read data.csv\n2. Report"})]),
        Reply(calls=[Call("filesystem", {"action": "read", "path": "data.csv"})]),
        Reply(content="done"))
    session = new_session(server, user, "planner")
    send(server, user, session, "report on data.csv")
    events = watch(server, user, session, on_event=approving(server, approver))
    phases = [e["phase"] for e in events if e["type"] == "notice"]
    assert phases == ["analysis", "review", "plan", "execute", "replan"], results(events)
    assert "Revise the remaining steps" in fake.model.requests[-1]["messages"][-1]["content"]


def test_the_prompt_has_the_date_the_public_url_and_memory_sections(
        server: Server, user: str, fake: FakeOllama) -> None:
    fake.model.add(
        Reply(calls=[Call("memory", {"action": "update_section", "section": "project",
                                     "text": "Porting the parser to Rust."})]),
        Reply(content="noted"))
    session = new_session(server, user)
    send(server, user, session, "remember the project")
    watch(server, user, session)
    system = system_of(fake.model.requests[-1])
    assert datetime.now(UTC).strftime("%Y-%m-%d") in system
    assert f"public address: {PUBLIC_URL}" in system
    assert "Porting the parser to Rust." in system


def test_an_image_in_a_message_reaches_the_model(server: Server, user: str,
                                                 fake: FakeOllama) -> None:
    fake.model.add(Reply(content="a tiny image"))
    session = new_session(server, user)
    data = base64.b64encode(PNG).decode()
    with server.client(user) as client:
        resp = client.post(f"/v1/sessions/{session}/messages", json={
            "content": "what is this?", "images": [{"data": data, "mime": "image/png"}]})
    assert resp.status_code == 202, resp.text
    events = watch(server, user, session)
    asked = [m for m in fake.model.requests[-1]["messages"] if m["role"] == "user"][-1]
    assert asked["images"] == [data] and events[-1]["content"] == "a tiny image"


def test_a_missing_model_of_the_list_is_skipped_with_a_notice(
        server: Server, user: str, fake: FakeOllama) -> None:
    fake.model.add(Reply(content="from the second"))
    session = new_session(server, user, "fallback")
    send(server, user, session, "hello")
    events = watch(server, user, session)
    (notice,) = [e for e in events if e["type"] == "notice"]
    assert notice["phase"] == "model_fallback" and "gone:70b" in notice["message"]
    assert events[-1]["content"] == "from the second"


def test_a_background_sub_agent_is_followed_and_stopped_as_a_process(
        server: Server, user: str, fake: FakeOllama) -> None:
    def route(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        first = next(m for m in messages if m["role"] == "user")["content"]
        if "SUBTASK" in first:
            if messages[-1]["role"] != "tool":
                return Reply(calls=[Call("todo", {"action": "list"})])
            return Reply(content="still thinking", hang_s=20)
        if messages[-1]["role"] == "tool":
            return Reply(content="parent done")
        return Reply(calls=[Call("todo", {"action": "add", "title": "parent step"}),
                            Call("spawn_agent", {"task": "SUBTASK: think",
                                                 "background": True})])
    fake.model.fallback = route
    session = new_session(server, user)
    send(server, user, session, "delegate")
    events = watch(server, user, session)
    assert events[-1]["content"] == "parent done"
    with server.client(user) as client:
        listed = client.get(f"/v1/sessions/{session}/processes").json()
        (agent,) = [p for p in listed if p["kind"] == "agent"]
        url = f"/v1/sessions/{session}/processes/{agent['id']}"
        deadline = time.monotonic() + 30
        while "(the todo list" not in (output := client.get(f"{url}/output").json())[
                "output"] and time.monotonic() < deadline:
            time.sleep(0.1)  # its first step's todo call
        stopped = client.delete(f"/v1/sessions/{session}/processes/{agent['id']}")
        after = client.get(f"/v1/sessions/{session}/processes/{agent['id']}").json()
    assert agent["state"] == "running" and "SUBTASK: think" in output["output"]
    # its own todo list: empty, though the parent's has an item
    assert "(the todo list is empty)" in output["output"], output
    assert "parent step" not in output["output"]
    assert stopped.status_code in (200, 204), stopped.text
    assert (after["state"], after["reason"]) == ("exited", "stopped")


@pytest.mark.docker
def test_a_written_tool_is_callable_at_once(server: Server, user: str,
                                            fake: FakeOllama) -> None:
    fake.model.add(Reply(calls=[Call("write_tool", {"name": "shout", "code": SHOUT})]),
                   Reply(calls=[Call("shout", {"text": "hi"})]),
                   Reply(content="done"))
    session = new_session(server, user)
    send(server, user, session, "make a shout tool and use it")
    events = watch(server, user, session, timeout=120)
    assert results(events)[:2] == [("write_tool", True, None), ("shout", True, None)], events
    assert outputs(events, "shout") == ["HI"]
    assert "reload_tools" not in [e["tool"] for e in events if e["type"] == "tool_call"]
