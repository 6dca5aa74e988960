"""Plan mode in a real turn (fake Ollama, real policy engine, audit and approvals): after
`enter_plan_mode` a write is denied with rule `plan_mode` (audited) while reads run;
`exit_plan_mode {plan}` asks a person through the approvals broker; refused, plan mode stays;
approved, the plan's steps become the session's todo list and writes run again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.sandbox.fake import FakeBackend, FakeResponse
from tests.fakes.agent_harness import POLICY, AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

WRITE = {"action": "write", "path": "out.txt", "content": "x"}
PLAN = "## Plan\n1. Read notes.txt\n2. Write out.txt\n"


def results(events: list[Any]) -> list[tuple[str, bool, str | None]]:
    return [(e.data["tool"], e.data["success"], e.data.get("rule"))
            for e in events if e.type == "tool_result"]


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_plan_mode_denies_changes_until_the_plan_is_approved(
        tmp_path: Path, ollama: FakeOllama, decision: str) -> None:
    ollama.model.add(
        Reply(calls=[Call("enter_plan_mode", {})]),
        Reply(calls=[Call("filesystem", WRITE),
                     Call("filesystem", {"action": "read", "path": "notes.txt"})]),
        Reply(calls=[Call("exit_plan_mode", {"plan": PLAN})]),
        Reply(calls=[Call("filesystem", {**WRITE, "content": "y"})]),
        Reply(content="done"))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        h.workspace_file("notes.txt", b"hello")

        async def answer(event: Any) -> None:
            if event.type == "approval_required":
                h.services.approvals.decide(h.subject.tenant, event.data["approval_id"],
                                            decision, by="k_human", role="user")

        events = await h.turn("plan, then write", on_event=answer)
        audit = await h.audit()
        todos = await h.services.tools.notes.todos(h.subject.tenant, h.subject.session)
        still = await h.services.plan_modes.active(h.subject.tenant, h.subject.session)
    got = results(events)
    assert got[0][:2] == ("enter_plan_mode", True)
    assert got[1] == ("filesystem", False, "plan_mode")  # the write: denied
    assert got[2][:2] == ("filesystem", True)           # the read: runs
    required = next(e.data for e in events if e.type == "approval_required")
    assert required["tool"] == "exit_plan_mode" and required["args"] == {"plan": PLAN}
    denied = [r for r in audit if r["kind"] == "denied"]
    assert denied and denied[0]["rule"] == "plan_mode" and denied[0]["tool"] == "filesystem"
    if decision == "approve":
        assert got[3][:2] == ("exit_plan_mode", True) and got[4][:2] == ("filesystem", True)
        assert [t["title"] for t in todos] == ["Read notes.txt", "Write out.txt"]
        assert not still
        assert [r["action"] for r in audit if r["action"] in ("plan.enter", "plan.exit")] == [
            "plan.enter", "plan.exit"]
    else:
        assert got[3][:2] == ("exit_plan_mode", False)
        assert got[4] == ("filesystem", False, "plan_mode")
        assert todos == [] and still


async def test_plan_mode_is_for_agent_turns_only(tmp_path: Path, ollama: FakeOllama) -> None:
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        from runtime.calls import CallRequest
        from runtime.errors import InvalidInput
        with pytest.raises(InvalidInput):
            await h.services.calls(h.subject, CallRequest(tool="enter_plan_mode", args={}))
        assert not await h.services.plan_modes.active(h.subject.tenant, h.subject.session)


def mandatory_policy(tmp: Path) -> Path:
    policy = yaml.safe_load(POLICY.read_text())
    policy["profiles"]["developer"]["planning_mandatory"] = True
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "developer.yaml").write_text(yaml.safe_dump({
        "system_prompt": "You are the test agent.", "max_iterations": 10,
        "tools": ["group:exec", "group:fs", "group:meta", "group:memory"]}))
    return path


async def test_planning_mandatory_runs_the_phases_and_replans(tmp_path: Path,
                                                              ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("filesystem", {"action": "read", "path": "notes.txt"}),
                     Call("filesystem", WRITE)]),
        Reply(content="Analysis: the notes say hello."),
        Reply(content="Review: nothing is missing."),
        Reply(calls=[Call("exit_plan_mode", {"plan": "1. Compute it\n2. Report it"})]),
        Reply(calls=[Call("code_exec", {"language": "python", "code": "1/0"})]),
        Reply(content="done"))
    sandbox = FakeBackend(default=FakeResponse(exit_code=1, stderr=b"ZeroDivisionError\n"))
    async with AgentHarness(tmp_path / "run", ollama=ollama.url, backend=sandbox,
                            policy=mandatory_policy(tmp_path),
                            profiles_dir=tmp_path / "profiles") as h:
        h.workspace_file("notes.txt", b"hello")

        async def answer(event: Any) -> None:
            if event.type == "approval_required":
                h.services.approvals.decide(h.subject.tenant, event.data["approval_id"],
                                            "approve", by="k_human", role="user")

        events = await h.turn("compute something", on_event=answer)
        todos = await h.services.tools.notes.todos(h.subject.tenant, h.subject.session)
    phases = [e.data["phase"] for e in events if e.type == "notice"]
    assert phases == ["analysis", "review", "plan", "execute", "replan"], results(events)
    got = results(events)
    assert got[0][:2] == ("filesystem", True) and got[1] == ("filesystem", False, "plan_mode")
    assert events[-1].type == "stream_end" and events[-1].data["content"] == "done"
    nudges = [m["content"] for m in ollama.model.requests[2]["messages"] if m["role"] == "user"]
    assert any("Phase 2 of 3, review" in n for n in nudges)
    assert "Phase 3 of 3, plan" in ollama.model.requests[3]["messages"][-1]["content"]
    assert "Revise the remaining steps" in ollama.model.requests[5]["messages"][-1]["content"]
    assert [(t["title"], t["status"]) for t in todos] == [("Compute it", "failed"),
                                                          ("Report it", "pending")]
