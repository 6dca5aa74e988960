"""A token revoked while its agent turn runs stops the turn before the next step
(docs/security.md): a scripted model (the fake Ollama over HTTP) that never stops calling tools,
the real services in-process (store, audit, policy, tools), the token revoked in the store
after the first call: at most one more call runs, the turn ends with `error` code
`token_revoked`, and the ending is stored. A sub-agent acting with the same token stops too,
and so does its parent."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from runtime.events import Event
from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply


def busy_model(ollama: FakeOllama, calls_per_step: int) -> None:
    """Every answer asks for more `todo` calls (distinct titles: no stall)."""
    count = itertools.count(1)
    ollama.model.fallback = lambda _req: Reply(calls=[
        Call("todo", {"action": "add", "title": f"item {next(count)}"})
        for _ in range(calls_per_step)])


async def with_token(h: AgentHarness) -> str:
    _, record = await h.services.store.create_token(h.subject.tenant, "user")
    h.subject = h.subject.model_copy(update={"user": record.id})
    return record.id


def todo_results(events: list[Event]) -> list[dict[str, Any]]:
    found = []
    for e in events:
        data = e.data["event"] if e.type == "subagent" else {**e.data, "type": e.type}
        if data["type"] == "tool_result" and data["tool"] == "todo":
            found.append(data)
    return found


async def test_a_revoked_token_stops_its_turn_before_the_next_call(
        tmp_path: Path, ollama: FakeOllama) -> None:
    busy_model(ollama, calls_per_step=3)
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        token = await with_token(h)

        async def revoke_after_the_first_call(event: Event) -> None:
            if event.type == "tool_result":
                await h.services.store.revoke_token(token)

        events = await h.turn("keep busy", on_event=revoke_after_the_first_call)
        todos = await h.services.tools.notes.todos(h.subject.tenant, h.subject.session)
        rows = await h.services.agent.history(h.services, h.subject.session)
    assert 1 <= len(todo_results(events)) <= 2  # the first call, at most one more
    assert len(todos) <= 2
    end = events[-1]
    assert end.type == "error" and end.data["code"] == "token_revoked", end.data
    assert "revoked" in end.data["message"]
    assert rows[-1].role == "assistant" and rows[-1].meta["error"] == "token_revoked"
    assert h.services.agent.running(h.subject.session) is None


async def test_an_expired_token_does_not_start_another_step(
        tmp_path: Path, ollama: FakeOllama) -> None:
    busy_model(ollama, calls_per_step=1)
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        _, record = await h.services.store.create_token(h.subject.tenant, "user",
                                                        expires_at=1.0)  # long past
        h.subject = h.subject.model_copy(update={"user": record.id})
        events = await h.turn("keep busy")
    assert todo_results(events) == [] and len(ollama.model.requests) == 0
    assert events[-1].type == "error" and events[-1].data["code"] == "token_revoked"
    assert "expired" in events[-1].data["message"]


async def test_a_sub_agent_stops_with_its_token_and_so_does_its_parent(
        tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("spawn_agent", {"task": "keep busy"})]))
    busy_model(ollama, calls_per_step=1)
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        token = await with_token(h)

        async def revoke_after_the_first_sub_call(event: Event) -> None:
            if event.type == "subagent" and event.data["event"]["type"] == "tool_result":
                await h.services.store.revoke_token(token)

        events = await h.turn("delegate", on_event=revoke_after_the_first_sub_call)
    assert 1 <= len(todo_results(events)) <= 2
    inner_end = [e.data["event"] for e in events if e.type == "subagent"][-1]
    assert inner_end["type"] == "error" and inner_end["code"] == "token_revoked"
    spawned = next(e.data for e in events if e.type == "tool_result")
    assert spawned["tool"] == "spawn_agent"
    assert events[-1].type == "error" and events[-1].data["code"] == "token_revoked"
    # the parent asked the model once (the spawn), the sub-agent at most twice
    assert len(ollama.model.requests) <= 3
