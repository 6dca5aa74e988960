"""The agent loop on the real services with a FakeBackend sandbox and a fake Ollama."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import pytest

from runtime.errors import Conflict
from runtime.sandbox.fake import FakeBackend, FakeResponse
from runtime.sessions.lifecycle import end_session
from tests.fakes.agent_harness import AgentHarness, types
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

PY = {"language": "python", "code": "print(6 * 7)"}


def tool_messages(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m["role"] == "tool"]


async def test_turn_calls_a_tool_and_answers(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(thinking="I will compute it.", calls=[Call("code_exec", PY)]),
                     Reply(content="The answer is 42."))
    sandbox = FakeBackend(default=FakeResponse(stdout=b"42\n"))
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox) as h:
        events = await h.turn("what is 6*7?")
        audit = await h.audit()
        rows = await h.services.agent.history(h.services, h.subject.session)
    assert types(events) == ["stream_start", "thinking_delta", "thinking_end", "tool_call",
                             "exec_output", "tool_result", "stream_delta", "stream_end"]
    by_type = {e.type: e.data for e in events}
    turn_id = by_type["stream_start"]["turn_id"]
    assert all(e.data.get("turn_id") == turn_id for e in events if e.type != "exec_output")
    call, result, end = by_type["tool_call"], by_type["tool_result"], by_type["stream_end"]
    assert call["tool"] == "code_exec" and call["args"] == PY
    assert result["exec_id"] == call["exec_id"] and result["success"] is True
    assert result["output"] == "42\n" and result["exit_code"] == 0
    assert by_type["exec_output"] == {"exec_id": call["exec_id"], "stream": "stdout",
                                      "data": "42\n"}
    assert end["content"] == "The answer is 42." and end["stop_reason"] == "stop"
    assert end["usage"] == {"prompt_tokens": 22, "completion_tokens": 14}
    thinking = "".join(e.data["content"] for e in events if e.type == "thinking_delta")
    assert thinking == "I will compute it."
    # the sandbox ran exactly the model's program, under the session, audited
    (request,) = sandbox.requests
    assert request.stdin.endswith(b"print(6 * 7)") and request.exec_id == call["exec_id"]
    kinds = [(r["kind"], r["exec_id"]) for r in audit]
    assert ("intent", call["exec_id"]) in kinds and ("outcome", call["exec_id"]) in kinds
    # the model saw the tools, then the result of its call
    first, second = ollama.model.requests
    assert "code_exec" in [t["function"]["name"] for t in first["tools"]]
    assert first["messages"][0]["role"] == "system"
    assert "You are the test agent." in first["messages"][0]["content"]
    assert tool_messages(second)[0]["content"].startswith("42")
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1].tool_calls[0]["name"] == "code_exec" and rows[1].thinking
    assert rows[2].meta["exec_id"] == call["exec_id"] and rows[3].content == "The answer is 42."


async def test_malformed_tool_calls_go_back_to_the_model(tmp_path: Path,
                                                         ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("no_such_tool", {"x": 1}),
                     Call("code_exec", {"language": "cobol", "code": "x"}),
                     Call("code_exec", {"code": "print(1)", "extra": True})]),
        Reply(content="Sorry, fixed."))
    sandbox = FakeBackend()
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox) as h:
        events = await h.turn("go")
    results = [e.data for e in events if e.type == "tool_result"]
    assert [r["success"] for r in results] == [False, False, False]
    assert "unknown tool 'no_such_tool'" in results[0]["error"]
    assert "language" in results[1]["error"] and "extra: unknown argument" in results[2]["error"]
    assert sandbox.requests == []  # nothing ran
    errors = [m["content"] for m in tool_messages(ollama.model.requests[1])]
    assert errors[0].startswith("Error: unknown tool") and "code_exec" in errors[0]
    assert all(e.startswith("Error:") for e in errors)
    assert events[-1].type == "stream_end" and events[-1].data["content"] == "Sorry, fixed."


async def test_policy_denial_is_a_tool_error_and_audited(tmp_path: Path,
                                                         ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("code_exec", {"language": "bash", "code": "id"})]),
                     Reply(content="bash is not allowed here."))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("run id in bash")
        audit = await h.audit()
    (result,) = [e.data for e in events if e.type == "tool_result"]
    assert result["success"] is False and result["code"] == "policy_denied"
    assert result["rule"] and "denied by policy" in result["error"]
    assert [r["kind"] for r in audit] == ["denied"]
    assert audit[0]["exec_id"] == result["exec_id"] and audit[0]["tool"] == "code_exec"
    assert "denied by policy" in tool_messages(ollama.model.requests[1])[0]["content"]
    assert events[-1].data["stop_reason"] == "stop"


async def test_anti_stall_ends_the_turn(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.fallback = lambda request: Reply(calls=[Call("code_exec", PY)])
    sandbox = FakeBackend()
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox) as h:
        events = await h.turn("loop forever")
    end = events[-1]
    assert end.type == "stream_end" and end.data["stop_reason"] == "stalled"
    assert "code_exec" in end.data["content"] and "3 times" in end.data["content"]
    assert len(sandbox.requests) == 2  # the third identical call never ran
    assert len(ollama.model.requests) == 3


async def test_max_iterations_is_honoured(tmp_path: Path, ollama: FakeOllama) -> None:
    counter = iter(range(1000))
    ollama.model.fallback = lambda request: Reply(calls=[Call(
        "code_exec", {"language": "python", "code": f"print({next(counter)})"})])
    sandbox = FakeBackend()
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox) as h:
        events = await h.turn("never finish")
    end = events[-1]
    assert end.data["stop_reason"] == "max_iterations" and end.data["iterations"] == 4
    assert "max_iterations" in end.data["content"]
    assert len(ollama.model.requests) == 4 and len(sandbox.requests) == 4
    # the budget and the goal were shown to the model (thinking mechanics)
    last = ollama.model.requests[-1]["messages"][-1]["content"]
    assert "Step 4 of 4; 1 left" in last and "last step" in last
    assert "The user's request: never finish" in last


async def test_one_turn_at_a_time_and_cancel(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="slow...", hang_s=30))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        mark = h.bus.next_id - 1
        await h.start("first")
        with pytest.raises(Conflict):
            await h.start("second")
        # cancel once the answer has begun to stream (a sleep raced the first model call,
        # which takes longer on a loaded machine with this wave's many tools to offer)
        stream = h.bus.subscribe(mark)
        async with asyncio.timeout(20):
            async for event in stream:
                if event.type == "stream_delta":
                    break
        await stream.aclose()
        t0 = time.monotonic()
        assert await h.services.agent.cancel(h.subject.session, h.services)
        assert time.monotonic() - t0 < 5
        events = await h.events_until_end(mark)
        assert events[-1].data["stop_reason"] == "cancelled"
        assert events[-1].data["content"] == "slow..."
        ollama.model.add(Reply(content="second turn ok"))
        again = await h.turn("again")
    assert again[-1].data["content"] == "second turn ok"


async def test_cancel_kills_the_running_execution(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("code_exec", {"language": "python",
                                                     "code": "import time; time.sleep(60)"})]))
    sandbox = FakeBackend(default=FakeResponse(delay_s=60))

    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox) as h:
        mark = h.bus.next_id - 1
        await h.start("sleep")
        for _ in range(100):
            if sandbox.running:
                break
            await asyncio.sleep(0.05)
        (exec_id,) = sandbox.running
        await h.services.agent.cancel(h.subject.session, h.services)
        events = await h.events_until_end(mark)
        audit = await h.audit()
    assert exec_id in sandbox.killed and sandbox.running == []
    assert events[-1].data["stop_reason"] == "cancelled"
    assert ("interrupted", exec_id) in [(r["kind"], r["exec_id"]) for r in audit]


@pytest.mark.parametrize("decision", ["approve", "deny", "timeout"])
async def test_approval_pauses_the_turn(tmp_path: Path, ollama: FakeOllama,
                                        decision: str) -> None:
    ollama.model.add(Reply(calls=[Call("terminal", {"command": "echo hi"})]),
                     Reply(content="done"))
    sandbox = FakeBackend(default=FakeResponse(stdout=b"hi\n"))
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox,
                            approval_timeout_s=0.5 if decision == "timeout" else 30) as h:

        async def answer(event: object) -> None:
            if event.type == "approval_required" and decision != "timeout":  # type: ignore[attr-defined]
                h.services.approvals.decide(h.subject.tenant, event.data["approval_id"],  # type: ignore[attr-defined]
                                            decision, by="k_human", role="user")

        events = await h.turn("say hi", on_event=answer)
        audit = await h.audit()
    kinds = types(events)
    assert kinds.index("tool_call") < kinds.index("approval_required") < kinds.index(
        "tool_result")
    required = next(e.data for e in events if e.type == "approval_required")
    assert required["tool"] == "terminal" and required["args"]["command"] == "echo hi"
    assert required["args"].get("background") in (None, False)  # terminal's default shown
    (result,) = [e.data for e in events if e.type == "tool_result"]
    (approval,) = [r for r in audit if r["kind"] == "approval"]
    if decision == "approve":
        assert result["success"] is True and len(sandbox.requests) == 1
        assert approval["decision"] == "approved" and approval["detail"] == "decided_by: k_human"
    else:
        assert result["success"] is False and result["code"] == "policy_denied"
        assert sandbox.requests == []
        assert approval["decision"] == "refused"
        assert approval["detail"] == ("decided_by: k_human" if decision == "deny"
                                      else "decided_by: system:expired")
    assert events[-1].data["stop_reason"] == "stop"


async def test_tool_images_reach_the_model_not_the_history(tmp_path: Path,
                                                           ollama: FakeOllama) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    ollama.model.add(Reply(calls=[Call("image_view", {"path": "plot.png"})]),
                     Reply(content="A plot."))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        h.workspace_file("plot.png", png)
        events = await h.turn("look at plot.png")
        rows = await h.services.agent.history(h.services, h.subject.session)
        ollama.model.add(Reply(content="still here"))
        await h.turn("and now?")
    (result,) = [e.data for e in events if e.type == "tool_result"]
    assert result["images"] == [{"path": "plot.png", "media_type": "image/png"}]
    b64 = base64.b64encode(png).decode()
    with_images = [m for m in ollama.model.requests[1]["messages"] if m.get("images")]
    assert [m["images"] for m in with_images] == [[b64]]
    tool_row = next(r for r in rows if r.role == "tool")
    assert b64 not in tool_row.content and tool_row.meta["images"][0]["path"] == "plot.png"
    later = ollama.model.requests[2]["messages"]
    assert not any(m.get("images") for m in later)  # shown once, in its own turn
    assert any("image(s) shown earlier: plot.png" in m.get("content", "") for m in later)


async def test_model_server_down_is_an_error_event(tmp_path: Path) -> None:
    async with AgentHarness(tmp_path, ollama="http://127.0.0.1:9") as h:
        events = await h.turn("hello?")
        assert events[-1].type == "error" and events[-1].data["code"] == "llm_unavailable"
        assert h.services.agent.running(h.subject.session) is None  # not stuck


async def test_policy_wins_over_the_profile(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("code_exec", PY)]), Reply(content="no code here"))
    sandbox = FakeBackend()
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox,
                            profile="secretary") as h:
        events = await h.turn("run code")
    offered = [t["function"]["name"] for t in ollama.model.requests[0]["tools"]]
    assert "code_exec" not in offered and "filesystem" in offered
    assert "todo" in offered and "list_tools" not in offered  # profile narrows too
    (result,) = [e.data for e in events if e.type == "tool_result"]
    assert result["success"] is False and sandbox.requests == []
    system = ollama.model.requests[0]["messages"][0]["content"]
    assert "You are the test secretary." in system and "plan" not in system


async def test_deltas_are_batched(tmp_path: Path, ollama: FakeOllama) -> None:
    text = "word " * 400
    ollama.model.add(Reply(content=text, chunk=2))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("talk")
    deltas = [e for e in events if e.type == "stream_delta"]
    assert "".join(e.data["content"] for e in deltas) == text
    assert len(deltas) < len(text) // 2 // 10


async def test_a_pause_mid_answer_does_not_hold_back_text(tmp_path: Path,
                                                          ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="first words", chunk=4, hang_s=1.5))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        seen: list[tuple[float, str]] = []

        async def note(event: object) -> None:
            seen.append((time.monotonic(), event.type))  # type: ignore[attr-defined]

        t0 = time.monotonic()
        await h.turn("talk", on_event=note)
    first_delta = next(t for t, kind in seen if kind == "stream_delta")
    assert first_delta - t0 < 1.0  # published while the model still had not finished
    assert seen[-1][0] - t0 >= 1.5


async def test_a_flood_of_calls_is_bounded(tmp_path: Path, ollama: FakeOllama) -> None:
    listing = {"action": "list", "path": ""}
    ollama.model.add(Reply(calls=[Call("filesystem", {**listing, "n": i}) for i in range(500)]),
                     Reply(content="ok"))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("flood")
        rows = await h.services.agent.history(h.services, h.subject.session)
    results = [e.data for e in events if e.type == "tool_result"]
    assert len(results) == 8  # MAX_CALLS_PER_STEP ran (each refused: `n` is no argument)
    tool_rows = [r for r in rows if r.role == "tool"]
    assert len(tool_rows) == 32 and "at most 8 tool calls" in tool_rows[-1].content
    assert events[-1].data["stop_reason"] == "stop"


async def test_deleting_the_session_ends_its_turn(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="working", hang_s=30))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        mark = h.bus.next_id - 1
        await h.start("long job")
        await asyncio.sleep(0.3)
        listener = asyncio.create_task(h.events_until_end(mark, timeout=10))
        await asyncio.sleep(0.05)
        record = await h.services.store.get_session(h.subject.tenant, h.subject.session)
        assert record is not None
        await end_session(h.services, record)
        events = await listener
        assert h.services.agent.running(h.subject.session) is None
    assert events[-1].data["stop_reason"] == "cancelled"
