"""Background sub-agents (`spawn_agent {background: true}`) in a real turn: the parent gets an
agent id at once and ends; the sub-agent is one of the session's processes (`kind: "agent"`),
`process_wait` waits for its answer, `process_output` gives its transcript, `process_stop`
cancels one that hangs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.calls import CallRequest
from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply


def router(sub_reply: Reply) -> Any:
    def route(request: dict[str, Any]) -> Reply:
        users = [m for m in request["messages"] if m["role"] == "user"]
        if "SUBTASK" in users[0]["content"]:
            return sub_reply
        if request["messages"][-1]["role"] == "tool":
            return Reply(content="parent done")
        return Reply(calls=[Call("spawn_agent", {"task": "SUBTASK: add 40 and 2",
                                                 "background": True})])
    return route


async def call(h: AgentHarness, tool: str, args: dict[str, Any]) -> Any:
    return await h.services.calls(h.subject, CallRequest(tool=tool, args=args))


async def test_a_background_sub_agent_is_a_process(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.fallback = router(Reply(content="The sum is 42.", delay_s=0.3))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("delegate it")
        (spawned,) = [e.data for e in events if e.type == "tool_result"]
        assert spawned["success"] and events[-1].data["content"] == "parent done"
        listed = await call(h, "process_list", {})
        agent_id = next(line.split()[0] for line in listed.output.splitlines()
                        if line.startswith("a_"))
        infos = await h.services.processes.list(h.subject)
        (info,) = [i for i in infos if i.id == agent_id]
        assert info.kind == "agent"
        waited = await call(h, "process_wait", {"process_id": agent_id, "timeout_s": 20})
        output = await call(h, "process_output", {"process_id": agent_id})
        (info,) = [i for i in await h.services.processes.list(h.subject) if i.id == agent_id]
    assert waited.success, waited
    assert info.state == "exited" and info.exit_code == 0
    assert "The sum is 42." in output.output and "SUBTASK" in output.output


async def test_process_stop_cancels_a_background_sub_agent(tmp_path: Path,
                                                           ollama: FakeOllama) -> None:
    ollama.model.fallback = router(Reply(content="never", hang_s=30))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        await h.turn("delegate it")
        (info,) = [i for i in await h.services.processes.list(h.subject) if i.kind == "agent"]
        assert info.state == "running"
        stopped = await call(h, "process_stop", {"process_id": info.id})
        (after,) = [i for i in await h.services.processes.list(h.subject) if i.id == info.id]
    assert stopped.success, stopped
    assert after.state == "exited" and after.reason == "stopped"
