"""`write_tool` makes the tool callable at once: in one turn the model writes a tool and calls
it by its name at the next step, with no `reload_tools` between (a real turn, fake Ollama)."""

from __future__ import annotations

from pathlib import Path

import yaml

from runtime.sandbox.fake import FakeBackend, FakeResponse
from tests.fakes.agent_harness import POLICY, AgentHarness
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

SHOUT = (
    'name = "shout"\ndescription = "Upper-case a text."\n'
    'parameters = {"type": "object", "properties": {"text": {"type": "string"}}, '
    '"required": ["text"]}\n'
    "async def execute(params):\n    return params['text'].upper()\n"
)


def setup_files(tmp: Path) -> tuple[Path, Path]:
    policy = yaml.safe_load(POLICY.read_text())
    policy["profiles"]["developer"]["allow"].append("group:user_tools")
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    profiles = tmp / "profiles"
    profiles.mkdir()
    (profiles / "developer.yaml").write_text(yaml.safe_dump({
        "system_prompt": "You are the test agent.", "tools": ["*"], "max_iterations": 5}))
    return path, profiles


async def test_a_written_tool_is_callable_in_the_same_turn(tmp_path: Path,
                                                           ollama: FakeOllama) -> None:
    policy, profiles = setup_files(tmp_path)
    ollama.model.add(Reply(calls=[Call("write_tool", {"name": "shout", "code": SHOUT})]),
                     Reply(calls=[Call("shout", {"text": "hi"})]),
                     Reply(content="done"))
    sandbox = FakeBackend(default=FakeResponse(stdout=b'{"ok": true, "result": "HI"}\n'))
    async with AgentHarness(tmp_path / "run", ollama=ollama.url, backend=sandbox,
                            policy=policy, profiles_dir=profiles) as h:
        events = await h.turn("make a shout tool and use it")
    results = [(e.data["tool"], e.data["success"], e.data.get("output"))
               for e in events if e.type == "tool_result"]
    assert results[0][:2] == ("write_tool", True)
    assert results[1] == ("shout", True, "HI"), results
    offered = [[t["function"]["name"] for t in r["tools"]] for r in ollama.model.requests]
    assert "shout" not in offered[0] and "shout" in offered[1]
    assert "reload_tools" not in [e.data["tool"] for e in events if e.type == "tool_call"]
    assert len(sandbox.requests) == 1 and sandbox.requests[0].image.endswith("tools-runner:latest")
