"""list_profiles and switch_profile in a real agent turn (real store, audit and policy, the
fake model over HTTP, a FakeBackend sandbox): the switch is audited, stored, announced, and
the next step offers the new profile's tools only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime.sandbox.fake import FakeBackend, FakeResponse
from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


async def test_switching_profile_applies_from_the_next_step(tmp_path: Path,
                                                           ollama: FakeOllama) -> None:
    seen: list[set[str]] = []

    def step(reply: Reply):  # type: ignore[no-untyped-def]
        def answer(request: dict[str, Any]) -> Reply:
            seen.append(offered(request))
            return reply
        return answer

    ollama.model.add(
        step(Reply(calls=[Call("list_profiles", {})])),
        step(Reply(calls=[Call("switch_profile", {"profile": "secretary"})])),
        step(Reply(calls=[Call("code_exec", {"language": "python", "code": "print(1)"})])),
        step(Reply(content="done")))
    sandbox = FakeBackend(default=FakeResponse(stdout=b"1\n"))
    async with AgentHarness(tmp_path, ollama=ollama.url, backend=sandbox) as h:
        events = await h.turn("work as the secretary")
        record = await h.services.store.get_session(h.subject.tenant, h.subject.session)
        audit = await h.audit()
    results = [e.data for e in events if e.type == "tool_result"]
    listed, switched, refused = results
    assert listed["success"] and "* developer" in listed["output"]
    assert "- secretary" in listed["output"]
    assert switched["success"] and "to 'secretary'" in switched["output"]
    assert not refused["success"]  # code_exec is not the secretary's
    assert sandbox.requests == []  # nothing ran
    assert "code_exec" in seen[0] and "switch_profile" in seen[0]
    assert "code_exec" not in seen[2] and "filesystem" in seen[2]
    assert record is not None and record.profile == "secretary"
    changed = [e.data for e in events if e.type == "profile_changed"]
    assert changed == [{"profile": "secretary", "previous": "developer"}]
    [action] = [r for r in audit if r["action"] == "session.profile"]
    assert action["detail"] == "developer -> secretary" and action["object"] == h.subject.session


async def test_a_profile_the_tenant_may_not_use_is_refused(tmp_path: Path,
                                                          ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("switch_profile", {"profile": "server_admin"})]),
                     Reply(content="ok"))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        events = await h.turn("become admin")
        record = await h.services.store.get_session(h.subject.tenant, h.subject.session)
        audit = await h.audit()
    [result] = [e.data for e in events if e.type == "tool_result"]
    assert not result["success"]
    assert "not one this session may use (allowed: developer, secretary)" in result["error"]
    assert record is not None and record.profile == "developer"
    assert not [r for r in audit if r["action"] == "session.profile"]
