"""Conversation store, context building and compression, profiles, persona, size caps."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.agent import AgentProfile, ProfileSet, load_persona
from runtime.agent.caps import clip, clip_value
from runtime.agent.context import split_point, to_chat
from runtime.agent.history import StoredMessage
from runtime.agent.profiles import load_profile
from runtime.config import PROJECT_ROOT
from runtime.errors import ConfigError
from runtime.policy.engine import PolicyEngine
from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Reply


def small_window_profiles(tmp: Path, window: int = 1024) -> Path:
    folder = tmp / "profiles"
    folder.mkdir()
    (folder / "developer.yaml").write_text(
        f"context_window: {window}\nmax_iterations: 3\ntools: [filesystem]\n"
        "system_prompt: You are small.\n")
    return folder


async def test_old_turns_are_summarised_near_the_window(tmp_path: Path,
                                                        ollama: FakeOllama) -> None:
    ollama.model.summary = "SUMMARY: the user talked about apples."
    async with AgentHarness(tmp_path, ollama=ollama.url,
                            profiles_dir=small_window_profiles(tmp_path)) as h:
        for n in range(6):  # each turn ~ 1200 characters: six of them exceed 75% of 1024 tokens
            ollama.model.add(Reply(content=f"answer {n} " + "a" * 600))
            events = await h.turn(f"question {n} " + "q" * 600)
            assert events[-1].type == "stream_end"
        rows = await h.services.agent.history(h.services, h.subject.session)
    assert ollama.model.summary_requests, "no summary was asked for"
    summaries = [r for r in rows if r.role == "summary"]
    assert summaries and summaries[-1].meta["source"] == "model"
    last = ollama.model.requests[-1]["messages"]
    assert "SUMMARY: the user talked about apples." in last[1]["content"]
    assert last[-1]["content"].startswith("question 5")  # the current turn stays verbatim
    assert sum(len(m.get("content", "")) for m in last) < 1024 * 4 * 0.75
    # the history still has every message
    assert len([r for r in rows if r.role == "user"]) == 6


async def test_a_large_system_prompt_does_not_make_every_turn_summarise(
        tmp_path: Path, ollama: FakeOllama) -> None:
    """What every request carries (system prompt, tool schemas) counts against what is kept
    verbatim, so a compression leaves room for the next turns. With ~40% of the window taken
    by the system prompt and the tools, keeping 40% of the window of old turns left the
    request over the threshold: every later turn asked the model for a summary of just the
    turn before (8 summaries in these 14 turns; a soak saw 1,110 in 1,310 turns)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "developer.yaml").write_text(
        "context_window: 2048\nmax_iterations: 3\ntools: [filesystem]\n"
        f"system_prompt: {'You are careful. ' * 95}\n")  # ~1,600 characters: ~400 tokens
    ollama.model.summary = "SUMMARY: short."
    async with AgentHarness(tmp_path, ollama=ollama.url, profiles_dir=folder) as h:
        for n in range(14):  # each turn ~ 500 characters (~125 tokens)
            ollama.model.add(Reply(content=f"answer {n} " + "a" * 240))
            events = await h.turn(f"question {n} " + "q" * 240)
            assert events[-1].type == "stream_end"
    compressions = len(ollama.model.summary_requests)
    assert 1 <= compressions <= 3, f"{compressions} summaries in 14 turns"
    last = ollama.model.requests[-1]["messages"]
    assert last[-1]["content"].startswith("question 13")


async def test_summary_falls_back_to_an_extract_when_the_model_fails(
        tmp_path: Path, ollama: FakeOllama) -> None:
    async with AgentHarness(tmp_path, ollama=ollama.url,
                            profiles_dir=small_window_profiles(tmp_path)) as h:
        for n in range(5):
            ollama.model.add(Reply(content=f"answer {n} " + "b" * 600))
            await h.turn(f"question {n} " + "q" * 600)
        ollama.model.summary = ""  # an empty summary counts as a failure
        ollama.model.add(Reply(content="fine"))
        await h.turn("question 5 " + "q" * 600)
        rows = await h.services.agent.history(h.services, h.subject.session)
    summary = [r for r in rows if r.role == "summary"][-1]
    assert summary.meta["source"] == "extract" and "question" in summary.content


def row(i: int, role: str, content: str = "x", **kw: object) -> StoredMessage:
    return StoredMessage(id=i, turn_id="t", role=role, content=content,  # type: ignore[arg-type]
                         created_at=0.0, **kw)


def test_to_chat_answers_calls_that_never_got_a_result() -> None:
    rows = [row(1, "user"), row(2, "assistant", "", tool_calls=[
        {"id": "c1", "name": "code_exec", "arguments": {}}]), row(3, "user", "next")]
    messages = to_chat(None, rows)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[2].tool_call_id == "c1" and "no result" in messages[2].content


def test_split_point_keeps_the_current_turn() -> None:
    rows = [row(1, "user", "a" * 4000), row(2, "assistant", "b" * 4000), row(3, "user", "c"),
            row(4, "assistant", "d")]
    assert split_point(rows, 100) == 2
    assert split_point(rows, 100_000) == 0


def test_shipped_profiles_match_the_policy_profiles() -> None:
    profiles = ProfileSet.load(PROJECT_ROOT / "policies" / "profiles")
    assert {"developer", "secretary", "server_admin"} <= set(profiles.profiles)
    policy = PolicyEngine.from_file(PROJECT_ROOT / "policies" / "default.yaml")
    assert set(profiles.profiles) <= set(policy.policy.profiles)
    for profile in profiles.profiles.values():
        assert profile.system_prompt.strip() and profile.max_iterations >= 4
    assert not profiles.get("secretary").offers("code_exec", "group:exec")
    assert profiles.get("developer").offers("code_exec", "group:exec")
    assert profiles.get("unknown").tools == ["*"]  # fallback: the policy decides alone


@pytest.mark.parametrize("body,problem", [
    ("max_iterations: 0\n", "max_iterations"),
    ("temperature: 9\n", "temperature"),
    ("surprise: 1\n", "surprise"),
    ("name: other\n", "differs"),
    ("- a list\n", "mapping"),
    ("system_prompt: [unclosed\n", "cannot read"),
])
def test_bad_profiles_are_config_errors(tmp_path: Path, body: str, problem: str) -> None:
    path = tmp_path / "developer.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=problem):
        load_profile(path)


def test_persona_from_text_or_file(tmp_path: Path) -> None:
    assert load_persona(None) is None
    assert load_persona("Be brief.") == "Be brief."
    path = tmp_path / "persona.md"
    path.write_text("  You are Navi.  \n")
    assert load_persona(f"@{path}") == "You are Navi."
    with pytest.raises(ConfigError, match="cannot read"):
        load_persona(f"@{tmp_path / 'missing.md'}")


async def test_persona_leads_the_system_prompt(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="hi"))
    async with AgentHarness(tmp_path, ollama=ollama.url, persona="PERSONA: terse owl") as h:
        await h.turn("hello")
    system = ollama.model.requests[0]["messages"][0]["content"]
    assert system.startswith("PERSONA: terse owl") and "You are the test agent." in system
    assert "plan" in system and "at most 4 steps" in system


def test_caps() -> None:
    text = "h" * 1000 + "t" * 1000
    out = clip(text, 300)
    assert len(out) <= 300 and out.startswith("h") and out.endswith("t") and "cut" in out
    assert clip("short", 10) == "short"
    value = clip_value({"code": "x" * 100_000, "list": list(range(500)), "n": 1}, 100)
    assert len(value["code"]) <= 100 and len(value["list"]) == 100 and value["n"] == 1
    deep: object = "leaf"
    for _ in range(50):
        deep = [deep]
    assert "too deep" in str(clip_value(deep))


def test_fallback_profile_is_valid() -> None:
    profile = AgentProfile.fallback("lab_student")
    assert profile.name == "lab_student" and profile.offers("anything", "group:x")
