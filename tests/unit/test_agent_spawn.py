"""spawn_agent in real agent turns (store, audit, policy and the fake model over HTTP; a
FakeBackend sandbox): the answer comes back, the sub-agent's calls are audited with
parent_turn, its events name the parent's call, depth (the policy's
`limits.processes.max_agent_depth`) and width are bounded, and
cancelling the parent stops it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from runtime.errors import InvalidInput
from runtime.sandbox.fake import FakeBackend, FakeResponse
from tests.fakes.agent_harness import POLICY, AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

PY = {"language": "python", "code": "print(6 * 7)"}


async def test_a_sub_agent_answers_and_its_calls_name_the_parent_turn(
        tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("spawn_agent", {"task": "compute 6*7"})]),      # parent
        Reply(calls=[Call("code_exec", PY)]),                              # sub-agent
        Reply(content="the sub-agent found 42"),                           # sub-agent
        lambda req: Reply(content="parent: " + req["messages"][-1]["content"]))
    sandbox = FakeBackend(default=FakeResponse(stdout=b"42\n"))
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox) as h:
        events = await h.turn("delegate it")
        audit = await h.audit()
        rows = await h.services.agent.history(h.services, h.subject.session)
    [start] = [e.data for e in events if e.type == "stream_start"]  # the parent's only
    parent_turn = start["turn_id"]
    spawn_call = next(e.data for e in events if e.type == "tool_call")
    nested = [e.data for e in events if e.type == "subagent"]
    inner = [n["event"] for n in nested]
    assert {n["parent_call"] for n in nested} == {spawn_call["call_id"]}
    child_turn = nested[0]["turn_id"]
    assert inner[0]["type"] == "stream_start" and inner[0]["parent_call"] == spawn_call["call_id"]
    assert inner[-1]["type"] == "stream_end" and inner[-1]["turn_id"] == child_turn
    spawned = next(e.data for e in events if e.type == "tool_result")
    assert spawned["success"] and spawned["output"] == "the sub-agent found 42"
    assert events[-1].type == "stream_end"
    assert events[-1].data["content"].startswith("parent: the sub-agent found 42")
    child_exec = next(i for i in inner if i["type"] == "tool_result")
    assert child_exec["turn_id"] == child_turn
    records = [r for r in audit if r["exec_id"] == child_exec["exec_id"]]
    assert [r["kind"] for r in records] == ["intent", "outcome"]
    assert all(r["parent_turn"] == parent_turn for r in records)
    # the parent's stored conversation holds the task and the answer, not the steps
    assert {r.turn_id for r in rows} == {parent_turn}


async def test_sub_agents_nest_two_levels_deep_at_most(tmp_path: Path,
                                                       ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("spawn_agent", {"task": "level 1"})]),
        Reply(calls=[Call("spawn_agent", {"task": "level 2"})]),
        Reply(calls=[Call("spawn_agent", {"task": "level 3"})]),
        lambda req: Reply(content="g: " + req["messages"][-1]["content"]),
        lambda req: Reply(content="c: " + req["messages"][-1]["content"]),
        lambda req: Reply(content="p: " + req["messages"][-1]["content"]))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("go deep")
    assert [e.type for e in events if e.type in ("stream_start", "stream_end")] == [
        "stream_start", "stream_end"]  # the sub-agents' come wrapped, inside the call
    inner = [e.data["event"] for e in events if e.type == "subagent"]
    refused = [i for i in inner if i["type"] == "tool_result" and not i["success"]]
    assert len(refused) == 1 and "at most 2 levels" in refused[0]["error"]
    assert events[-1].data["content"].startswith("p: c: g: ")


async def test_the_policy_sets_how_deep_sub_agents_go(tmp_path: Path,
                                                      ollama: FakeOllama) -> None:
    policy = yaml.safe_load(POLICY.read_text())
    policy["profiles"]["developer"]["limits"] = {"processes": {"max_agent_depth": 1}}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    ollama.model.add(
        Reply(calls=[Call("spawn_agent", {"task": "level 1"})]),
        Reply(calls=[Call("spawn_agent", {"task": "level 2"})]),
        lambda req: Reply(content="c: " + req["messages"][-1]["content"]),
        lambda req: Reply(content="p: " + req["messages"][-1]["content"]))
    async with AgentHarness(tmp_path / "run", ollama=ollama.url,
                            policy=tmp_path / "policy.yaml") as h:
        events = await h.turn("go deep")
    inner = [e.data["event"] for e in events if e.type == "subagent"]
    refused = [i for i in inner if i["type"] == "tool_result" and not i["success"]]
    assert len(refused) == 1 and "at most 1 levels" in refused[0]["error"], refused
    assert "max_agent_depth" in refused[0]["error"]
    assert events[-1].data["content"].startswith("p: c: ")


async def test_a_wider_or_foreign_profile_is_refused(tmp_path: Path,
                                                     ollama: FakeOllama) -> None:
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        runner = (await h.services.tools.registry.lookup("spawn_agent", h.subject)).runner
        narrow = h.subject.model_copy(update={"profile": "secretary"})
        with pytest.raises(InvalidInput, match="wider than this agent's.*code_exec"):
            await runner.run(narrow, "x", "developer", None, None)
        with pytest.raises(InvalidInput, match="not one this session may use"):
            await runner.run(h.subject, "x", "server_admin", None, None)


async def test_cancelling_the_parent_stops_the_sub_agent(tmp_path: Path,
                                                         ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("spawn_agent", {"task": "slow work"})]),
        Reply(calls=[Call("code_exec", PY)]),
        Reply(calls=[Call("code_exec", PY)]))  # never asked for: the turn is cancelled
    sandbox = FakeBackend(default=FakeResponse(stdout=b"x\n", delay_s=30))
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox) as h:
        await h.start("delegate slow work")
        for _ in range(200):
            if sandbox.running:
                break
            await asyncio.sleep(0.05)
        assert sandbox.running, "the sub-agent's call never started"
        await h.services.agent.cancel(h.subject.session)
        for _ in range(100):
            if not sandbox.running:
                break
            await asyncio.sleep(0.05)
        assert not sandbox.running
        assert len(sandbox.requests) == 1  # the sub-agent made no further call
    assert ollama.model.remaining() == 1  # the script's last step was, rightly, never used
