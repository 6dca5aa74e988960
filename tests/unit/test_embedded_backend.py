"""The embedded model's backend without the model: step grammar, transcript, and the
translation of streamed steps into chunks, against a fake `/v1/completions` server on
loopback. The grammar is also parsed by llama.cpp itself when the embedded model is
installed (the real model's behaviour is measured by tests/e2e/test_agent_embedded.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runtime.agent.llm.embedded import EmbeddedServer
from runtime.agent.llm.embedded_backend import EmbeddedBackend
from runtime.agent.llm.embedded_grammar import step_grammar
from runtime.agent.llm.embedded_prompt import render
from runtime.agent.llm.types import (
    ChatMessage,
    ChatRequest,
    Chunk,
    Done,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
)
from runtime.tools.factory import build_tools
from tests.fakes.llama_completions import FakeCompletions

# As root the model runs as a uid of its own, which cannot reach into /root: not ~/.cache
EMBEDDED_DIR = Path(os.environ.get("NAVI_TEST_EMBEDDED_DIR")
                    or (Path("/var/cache/navi/embedded") if os.geteuid() == 0
                        else Path.home() / ".cache" / "navi" / "embedded"))


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    services = build_tools(tmp_path_factory.mktemp("tools"))
    return [{"name": s.name, "description": s.description, "parameters": s.parameters}
            for s in (t.spec() for t in services.registry.builtins())]


def request(tools: list[dict[str, Any]], *messages: ChatMessage) -> ChatRequest:
    return ChatRequest(model="m", messages=[ChatMessage(role="system", content="be nice"),
                                            *messages], tools=tools)


async def steps(fake: FakeCompletions, req: ChatRequest) -> list[Chunk]:
    backend = EmbeddedBackend(fake.url + "/v1")
    try:
        return [c async for c in backend.stream(req)]
    finally:
        await backend.close()


def test_grammar_offers_each_tool_and_a_code_block(tools: list[dict[str, Any]]) -> None:
    grammar = step_grammar(tools)
    assert grammar.startswith('root ::= " " (fence | call | answer)')
    for tool in tools:
        if tool["name"] != "code_exec":  # code_exec is the fenced block
            assert f'\\"tool\\": \\"{tool["name"]}\\"' in grammar
    assert '"```" ("python" | "bash")' in grammar
    assert step_grammar([]).startswith('root ::= " " (answer)')
    only_code = step_grammar([t for t in tools if t["name"] == "code_exec"])
    assert "call ::=" not in only_code and "fence" in only_code


@pytest.mark.skipif(not EmbeddedServer(EMBEDDED_DIR).installed(),
                    reason=f"embedded model not installed in {EMBEDDED_DIR}")
def test_llama_cpp_parses_the_grammar(tools: list[dict[str, Any]], tmp_path: Path) -> None:
    for n, subset in enumerate((tools, tools[:1], [])):
        path = tmp_path / f"g{n}.gbnf"
        path.write_text(step_grammar(subset))
        done = subprocess.run(
            [str(EmbeddedServer(EMBEDDED_DIR).python), "-c",
             "import sys; from llama_cpp import LlamaGrammar; "
             "LlamaGrammar.from_string(open(sys.argv[1]).read(), verbose=False)",
             str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]


def test_transcript_renders_calls_results_and_drops_step_notes(
        tools: list[dict[str, Any]]) -> None:
    call = ToolCallRequest(id="c1", name="code_exec",
                           arguments={"language": "python", "code": "print(6 * 7)"})
    other = ToolCallRequest(id="c2", name="todo", arguments={"action": "list"})
    prompt = render([
        ChatMessage(role="system", content="SYSTEM PROMPT TEXT"),
        ChatMessage(role="user", content="what is\nsix times seven?"),
        ChatMessage(role="assistant", tool_calls=[call]),
        ChatMessage(role="tool", content="42\n\n[navi] Step 2 of 12; 11 left.\n"
                    "[navi] The user's request: what is six times seven?", tool_call_id="c1"),
        ChatMessage(role="assistant", tool_calls=[other]),
        ChatMessage(role="tool", content="", tool_call_id="c2"),
    ], tools)
    tail = prompt[prompt.rindex("User: what is six times seven?"):]
    assert tail == ("User: what is six times seven?\n"
                    "Navi: ```python\nprint(6 * 7)\n```\n"
                    "Result: 42\n"
                    'Navi: {"tool": "todo", "arguments": {"action": "list"}}\n'
                    "Result: (no output)\n"
                    "Navi:")
    assert "SYSTEM PROMPT TEXT" not in prompt and "[navi]" not in prompt
    assert "- todo(action: " in prompt and "- code_exec(" not in prompt
    # without tools (the context summariser) the system text is the task
    assert "SYSTEM PROMPT TEXT" in render([ChatMessage(role="system",
                                                       content="SYSTEM PROMPT TEXT")], [])


async def test_a_code_block_becomes_a_code_exec_call(tools: list[dict[str, Any]]) -> None:
    with FakeCompletions([' ```python\nprint("a`b")\nprint(2**100)\n```']) as fake:
        chunks = await steps(fake, request(tools, ChatMessage(role="user", content="go")))
    (call,) = [c.call for c in chunks if isinstance(c, ToolCallChunk)]
    assert call.name == "code_exec" and call.error is None
    assert call.arguments == {"language": "python", "code": 'print("a`b")\nprint(2**100)'}
    assert not [c for c in chunks if isinstance(c, TextDelta)]
    assert isinstance(chunks[-1], Done) and chunks[-1].usage.completion_tokens > 0
    body = fake.requests[0]
    assert body["prompt"].endswith("User: go\nNavi:") and body["stream"] is True
    assert body["grammar"] == step_grammar(tools) and body["temperature"] == 0.0


async def test_a_json_step_becomes_a_call_of_that_tool(tools: list[dict[str, Any]]) -> None:
    step = ' {"tool": "filesystem", "arguments": {"action": "list", "path": ""}}'
    with FakeCompletions([step]) as fake:
        chunks = await steps(fake, request(tools, ChatMessage(role="user", content="ls")))
    (call,) = [c.call for c in chunks if isinstance(c, ToolCallChunk)]
    assert (call.name, call.arguments, call.error) == (
        "filesystem", {"action": "list", "path": ""}, None)


async def test_an_answer_streams_as_text(tools: list[dict[str, Any]]) -> None:
    with FakeCompletions([" 2**100 is 1267650600228229401496703205376.\n"], chunk=2) as fake:
        chunks = await steps(fake, request(tools, ChatMessage(role="user", content="?")))
    deltas = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) > 5  # streamed, not one piece at the end
    assert "".join(deltas) == "2**100 is 1267650600228229401496703205376."
    assert not [c for c in chunks if isinstance(c, ToolCallChunk)]


@pytest.mark.parametrize("step", [
    ' ```python\nwhile True: print("cut off by max_tokens")',  # never closed
    " ```ruby\nputs 1\n```",                                  # not a language we run
    ' {"tool": "filesystem", "arguments": {"action": "li',      # cut off JSON
    ' {"tool": "todo", "arguments": [1, 2]}',                   # arguments not an object
])
async def test_a_broken_step_is_a_call_with_an_error(tools: list[dict[str, Any]],
                                                     step: str) -> None:
    with FakeCompletions([step]) as fake:
        chunks = await steps(fake, request(tools, ChatMessage(role="user", content="x")))
    (call,) = [c.call for c in chunks if isinstance(c, ToolCallChunk)]
    assert call.error and call.arguments is None
    assert json.dumps(call.model_dump())  # it can be stored and shown
    assert isinstance(chunks[-1], Done)


def test_a_long_conversation_keeps_the_latest_turns(tools: list[dict[str, Any]]) -> None:
    history = [ChatMessage(role="user" if n % 2 == 0 else "assistant", content=f"turn {n} "
                           + "x" * 3000) for n in range(40)]
    prompt = render([*history, ChatMessage(role="user", content="the latest question")],
                    tools)
    assert prompt.endswith("User: the latest question\nNavi:")
    assert "(earlier conversation left out)" in prompt and "turn 0 " not in prompt
    assert "turn 39 " in prompt and len(prompt) < 30000
