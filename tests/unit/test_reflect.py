"""`reflect` in a real agent turn (store, audit, policy, the fake model over HTTP): the tool
makes one extra model call with the turn's transcript under the reviewer's prompt and no
tools, and its answer is the tool's result the agent sees next."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.agent.reflect import REVIEW_PROMPT
from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

REVIEW = "- the plot is done\n- the axis labels are missing: add them"


def review(req: dict[str, Any]) -> Reply:
    system, user = req["messages"][0], req["messages"][-1]
    assert system["role"] == "system" and system["content"] == REVIEW_PROMPT
    assert not req.get("tools"), "the review call offers no tools"
    assert "user: plot the sales" in user["content"]
    assert "[called reflect]" in user["content"]
    return Reply(content=REVIEW)


async def test_reflect_returns_the_models_review_of_the_turn(tmp_path: Path,
                                                           ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("reflect", {})]), review,
                     lambda req: Reply(content="noted: " + req["messages"][-1]["content"]))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("plot the sales")
    result = next(e.data for e in events if e.type == "tool_result")
    assert result["success"], result
    assert result["output"] == REVIEW
    assert events[-1].type == "stream_end"
    assert events[-1].data["content"].startswith("noted: " + REVIEW)  # the model saw it
    assert len(ollama.model.requests) == 3


async def test_reflect_without_an_answer_fails_the_call(tmp_path: Path,
                                                        ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("reflect", {})]), Reply(content=""),
                     Reply(content="ok"))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("anything")
    result = next(e.data for e in events if e.type == "tool_result")
    assert not result["success"] and "no review" in (result["error"] or "")
