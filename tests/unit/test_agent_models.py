"""An agent profile's `models` list against the real fake-Ollama HTTP server: a model the
server does not have, or one that answers 5xx, is skipped (with a `notice`) for
NAVI_MODEL_BLACKLIST_S and the next model answers; with none left the turn ends
`llm_unavailable`."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.fakes.agent_harness import AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Reply


def profiles_with(tmp: Path, **profile: object) -> Path:
    directory = tmp / "profiles"
    directory.mkdir(exist_ok=True)
    (directory / "developer.yaml").write_text(yaml.safe_dump({
        "system_prompt": "You are the test agent.", "tools": [], **profile}))
    return directory


def asked_models(fake: FakeOllama) -> list[str]:
    return [r["model"] for r in fake.model.requests]


async def test_a_missing_model_is_skipped_and_blacklisted(tmp_path: Path) -> None:
    with FakeOllama(models=("small:1b", "big:8b")) as fake:
        fake.model.add(Reply(content="from small"), Reply(content="again small"))
        profiles = profiles_with(tmp_path, models=["gone:70b", "small:1b", "big:8b"])
        async with AgentHarness(tmp_path / "run", ollama=fake.url,
                                profiles_dir=profiles) as h:
            first = await h.turn("hello")
            calls_after_first = fake.chat_calls
            second = await h.turn("hello again")
        assert first[-1].type == "stream_end" and first[-1].data["content"] == "from small"
        (notice,) = [e.data for e in first if e.type == "notice"]
        assert notice["phase"] == "model_fallback" and "gone:70b" in notice["message"]
        assert "300 s" in notice["message"]
        assert calls_after_first == 2  # gone:70b (404), then small:1b
        # blacklisted: the next turn does not ask gone:70b at all, and says nothing
        assert fake.chat_calls == calls_after_first + 1
        assert second[-1].data["content"] == "again small"
        assert [e for e in second if e.type == "notice"] == []
        assert asked_models(fake) == ["small:1b", "small:1b"]


async def test_a_5xx_model_is_skipped_and_none_left_is_llm_unavailable(tmp_path: Path
                                                                       ) -> None:
    with FakeOllama(models=("flaky:1b", "steady:1b")) as fake:
        def by_model(request: dict) -> Reply:
            if request["model"] == "flaky:1b":
                return Reply(status=500, error="CUDA out of memory")
            return Reply(content="steady answers")
        fake.model.fallback = by_model
        profiles = profiles_with(tmp_path, model="flaky:1b", models=["steady:1b"])
        async with AgentHarness(tmp_path / "run", ollama=fake.url, profiles_dir=profiles,
                                model_blacklist_s=0.0) as h:
            events = await h.turn("hi")
            notices = [e.data for e in events if e.type == "notice"]
            assert events[-1].data["content"] == "steady answers"
            assert len(notices) == 1 and "flaky:1b" in notices[0]["message"]
            assert "CUDA out of memory" in notices[0]["message"]
            fake.models = ("flaky:1b",)  # steady:1b is gone too now
            failed = await h.turn("hi again")
    end = failed[-1]
    assert end.type == "error" and end.data["code"] == "llm_unavailable", end.data
    assert "flaky:1b" in end.data["message"] and "steady:1b" in end.data["message"]
    assert len([e for e in failed if e.type == "notice"]) == 2
