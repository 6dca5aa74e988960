"""`SessionToolCall` on its own (as a third caller, e.g. the MCP server, would use it): the
typed result, the events it publishes for announced and unannounced calls, the closed-set
metric labels; and the typed event models' wire form."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.calls import CallOrigin, CallRequest, Execution
from runtime.errors import InvalidInput, NotFound, PolicyDenied
from runtime.events import Event, ExecOutput, Notice, ToolResultEvent
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.sandbox.models import OutputChunk
from tests.fakes.agent_harness import AgentHarness

PY = {"language": "python", "code": "print(42)"}


def counted(h: AgentHarness, tool: str, outcome: str) -> float:
    value = h.services.metrics.registry.get_sample_value(
        "navi_executions_total", {"tenant": h.subject.tenant, "tool": tool, "outcome": outcome})
    return value or 0.0


async def test_a_call_returns_its_typed_execution_and_publishes_its_events(
        tmp_path: Path) -> None:
    chunks = (OutputChunk(stream="stdout", data=b"4"), OutputChunk(stream="stdout", data=b"2\n"))
    sandbox = FakeBackend(default=FakeResponse(stdout=b"42\n", chunks=chunks))
    async with AgentHarness(tmp_path, backend=sandbox) as h:
        request = CallRequest(tool="code_exec", args=PY)
        result = await h.services.calls(h.subject, request)
        events = [e.as_json() for e in h.bus.replay]
        ok = counted(h, "code_exec", "ok")
    assert isinstance(result.execution, Execution)
    assert result.execution.ok and result.execution.exit_code == 0
    assert result.execution.exec_id == request.exec_id and result.execution.stdout == "42\n"
    assert [e["type"] for e in events] == ["tool_call", "exec_output", "exec_output",
                                           "tool_result"]
    assert "".join(e["data"] for e in events if e["type"] == "exec_output") == "42\n"
    end = events[-1]
    assert end["ok"] is True and end["audit_seq"] == result.execution.audit_seq
    assert end["rule"] and "turn_id" not in end and ok == 1


async def test_a_tool_that_runs_no_code_is_handed_and_reports_the_rule_that_allowed_it(
        tmp_path: Path) -> None:
    """`ToolRegistry.run` decides a tool that runs no code and hands it a context naming the
    rule (its audited change carries it); the `ToolOutcome`'s rule reaches `tool_result`.
    Nothing is written back into the caller's context: it carries inputs only."""
    async with AgentHarness(tmp_path) as h:
        result = await h.services.calls(h.subject, CallRequest(
            tool="todo", args={"action": "add", "title": "ship it"}))
        events = [e.as_json() for e in h.bus.replay]
        actions = [r for r in await h.audit() if r["kind"] == "action"]
    end = events[-1]
    assert result.success and result.execution is None and end["type"] == "tool_result"
    assert end["rule"] and end["rule"] != "none"
    assert [(a["action"], a["rule"]) for a in actions] == [("note.write", end["rule"])]


async def test_an_announced_call_gets_one_result_even_when_refused(tmp_path: Path) -> None:
    async with AgentHarness(tmp_path) as h:
        origin = CallOrigin(turn_id="tu_1", call_id="tu_1_1_1", iteration=1)
        request = CallRequest(tool="code_exec", args={"language": "cobol"}, origin=origin,
                              announced=True)
        with pytest.raises(InvalidInput):
            await h.services.calls(h.subject, request)
        events = [e.as_json() for e in h.bus.replay]
    (result,) = events  # the caller announced it: no second tool_call, one tool_result
    assert result["type"] == "tool_result" and result["success"] is False
    assert result["code"] == "invalid_input" and result["turn_id"] == "tu_1"
    assert result["call_id"] == "tu_1_1_1" and "ok" not in result


async def test_an_unannounced_refusal_publishes_nothing_and_counts_unknown(
        tmp_path: Path) -> None:
    async with AgentHarness(tmp_path) as h:
        with pytest.raises(NotFound):
            await h.services.calls(h.subject, CallRequest(tool="t_random123", args={}))
        assert list(h.bus.replay) == []
        assert counted(h, "unknown", "not_found") == 1


async def test_a_denial_is_counted_with_its_rule(tmp_path: Path) -> None:
    async with AgentHarness(tmp_path) as h:
        with pytest.raises(PolicyDenied) as denied:
            await h.services.calls(h.subject, CallRequest(
                tool="code_exec", args={"language": "bash", "code": "id"}))
        denials = h.services.metrics.registry.get_sample_value(
            "navi_policy_denials_total",
            {"tenant": h.subject.tenant, "tool": "code_exec", "rule": denied.value.rule})
        (call, result) = [e.as_json() for e in h.bus.replay]
    assert denials == 1 and call["type"] == "tool_call"
    assert result["rule"] == denied.value.rule and "denied by policy" in result["error"]


def test_event_models_are_typed_and_their_wire_leaves_out_what_is_absent() -> None:
    with pytest.raises(ValidationError):
        ExecOutput(exec_id="e", stream="stdin", data="x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Notice(message="m", colour="red")  # type: ignore[call-arg]
    wire = Event.make(7, Notice(message="installing"), ts=1.5).as_json()
    assert wire == {"type": "notice", "message": "installing", "id": 7, "ts": 1.5}
    plain = ToolResultEvent(tool="todo", success=True, output="done", exec_id="e").payload()
    assert plain == {"type": "tool_result", "tool": "todo", "success": True, "output": "done",
                     "error": None, "exec_id": "e"}
    ran = ToolResultEvent(tool="code_exec", success=False, exec_id="e", ok=False, exit_code=None,
                          timed_out=True).payload()
    assert ran["ok"] is False and ran["exit_code"] is None and ran["timed_out"] is True
