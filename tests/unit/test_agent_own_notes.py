"""Each sub-agent has its own todo and scratchpad (in real turns: fake Ollama, the real
services, notes file and processes table); a server that stops ends its background
sub-agents `interrupted`, and the next one (on the same data directory) still lists them
and is still in plan mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.api.app import start_services
from runtime.calls import CallRequest
from runtime.sandbox.fake import FakeBackend
from runtime.tools.notes_store import owner_key
from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

SUB_CALLS = [Call("todo", {"action": "list"}), Call("scratchpad", {"action": "read"}),
             Call("todo", {"action": "add", "title": "sub step"}),
             Call("scratchpad", {"action": "write", "content": "sub note"})]
PARENT_CALLS = [Call("todo", {"action": "add", "title": "parent step"}),
                Call("scratchpad", {"action": "write", "content": "parent secret"})]


def router(background: bool, sub_hangs: bool = False) -> Any:
    def route(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        first = next(m for m in messages if m["role"] == "user")["content"]
        tools = [m for m in messages if m["role"] == "tool"]
        if "SUBTASK" in first:
            if sub_hangs:
                return Reply(content="never", hang_s=30)
            return Reply(calls=SUB_CALLS) if not tools else Reply(content="sub done")
        if not tools:
            return Reply(calls=[*PARENT_CALLS, Call("spawn_agent", {
                "task": "SUBTASK: keep your own list", "background": background})])
        return Reply(content="parent done")
    return route


async def call(h: AgentHarness, tool: str, args: dict[str, Any]) -> Any:
    return await h.services.calls(h.subject, CallRequest(tool=tool, args=args))


async def test_a_background_sub_agent_has_its_own_todo_and_scratchpad(
        tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.fallback = router(background=True)
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("delegate it")
        assert events[-1].data["content"] == "parent done"
        (agent,) = [i for i in await h.services.processes.list(h.subject) if i.kind == "agent"]
        waited = await call(h, "process_wait", {"process_id": agent.id, "timeout_s": 20})
        transcript = (await call(h, "process_output", {"process_id": agent.id})).output
        notes = h.services.tools.notes
        t, s = h.subject.tenant, h.subject.session
        parent_todo = [i["title"] for i in await notes.todos(t, s)]
        parent_pad = await notes.scratchpad(t, s)
        left = (await notes.todos(t, owner_key(s, agent.id)),
                await notes.scratchpad(t, owner_key(s, agent.id)))
    assert waited.success, waited
    # the sub-agent saw an empty list and pad, not its parent's
    assert "(the todo list is empty)" in transcript, transcript
    assert "(the scratchpad is empty)" in transcript, transcript
    assert "parent step" not in transcript and "parent secret" not in transcript
    assert "1. sub step" in transcript
    # and the parent's stayed its own
    assert parent_todo == ["parent step"] and parent_pad == "parent secret"
    assert left == ([], ""), "a sub-agent's notes go when it ends"


async def test_an_inline_sub_agent_has_its_own_todo_too(tmp_path: Path,
                                                       ollama: FakeOllama) -> None:
    ollama.model.fallback = router(background=False)
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("delegate it")
        notes = h.services.tools.notes
        parent_todo = [i["title"] for i in await notes.todos(h.subject.tenant,
                                                             h.subject.session)]
    seen = "\n".join(m["content"] for r in ollama.model.requests
                     if "SUBTASK" in next(m for m in r["messages"] if m["role"] == "user")[
                         "content"] for m in r["messages"] if m["role"] == "tool")
    assert "(the todo list is empty)" in seen and "1. sub step" in seen, seen
    assert "parent step" not in seen and events[-1].data["content"] == "parent done"
    assert parent_todo == ["parent step"]


async def test_a_stopping_server_ends_background_agents_interrupted_and_keeps_plan_mode(
        tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.fallback = router(background=True, sub_hangs=True)
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        await h.turn("delegate it")
        (agent,) = [i for i in await h.services.processes.list(h.subject) if i.kind == "agent"]
        assert agent.state == "running"
        await h.services.plan_modes.enter(h.subject.tenant, h.subject.session)
    services = await start_services(h.settings, FakeBackend())  # the next server
    try:
        (after,) = [i for i in await services.processes.list(h.subject) if i.id == agent.id]
        output = await services.processes.output(h.subject, agent.id)
        planning = await services.plan_modes.active(h.subject.tenant, h.subject.session)
    finally:
        await services.close()
    assert (after.kind, after.state, after.reason) == ("agent", "exited", "interrupted")
    assert "transcript was lost" in output.output
    assert planning, "a restart must not leave plan mode"
