"""What every turn's system prompt says besides the profile: the date and time, the public
URL when set, and the memory sections `user_profile` (per token) and `project` (per session)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply


def system_of(request: dict) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


async def test_date_time_and_public_url(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="hi"))
    async with AgentHarness(tmp_path / "a", ollama=ollama.url,
                            public_url="https://navi.example.org") as h:
        await h.turn("what day is it?")
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    system = system_of(ollama.model.requests[-1])
    assert f"Current date and time: {datetime.now(UTC):%A}, {today}" in system
    assert "public address: https://navi.example.org" in system
    ollama.model.add(Reply(content="hi"))
    async with AgentHarness(tmp_path / "b", ollama=ollama.url) as h:
        await h.turn("again")
    system = system_of(ollama.model.requests[-1])
    assert today in system and "public address" not in system


async def test_memory_sections_reach_every_prompt(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("memory", {"action": "update_section", "section": "user_profile",
                                     "text": "Name: Ada. Prefers short answers."}),
                     Call("memory", {"action": "update_section", "section": "project",
                                     "text": "Porting the parser to Rust."})]),
        Reply(content="noted"),
        Reply(content="second turn"),
        Reply(content="other session, same token"),
        Reply(content="other token"),
        Reply(calls=[Call("memory", {"action": "update_section", "section": "project",
                                     "text": "x" * 4097})]),
        Reply(content="too long"))
    async with AgentHarness(tmp_path, ollama=ollama.url) as h:
        await h.turn("remember me")
        # the same turn's next step already sees them
        assert "Name: Ada" in system_of(ollama.model.requests[1])
        assert "Porting the parser" in system_of(ollama.model.requests[1])
        await h.turn("hello again")
        assert "Name: Ada" in system_of(ollama.model.requests[2])
        audit = await h.audit()
        first = h.subject
        store = h.services.store
        other = await store.create_session(first.tenant, first.profile)
        h.services.workspaces.create(first.tenant, other.id)
        h.subject = first.model_copy(update={"session": other.id})
        await h.turn("new session")
        system = system_of(ollama.model.requests[3])
        assert "Name: Ada" in system and "Porting the parser" not in system
        h.subject = first.model_copy(update={"user": "k_someone_else"})
        await h.turn("another person")
        system = system_of(ollama.model.requests[4])
        assert "Name: Ada" not in system and "Porting the parser" in system
        events = await h.turn("too much")
    sections = [r for r in audit if r["action"] == "memory.section"]
    assert sorted(r["object"] for r in sections) == ["project", "user_profile"]
    assert all("Ada" not in (r["detail"] or "") for r in sections)
    (result,) = [e.data for e in events if e.type == "tool_result"]
    assert result["success"] is False and "4096" in result["error"]
