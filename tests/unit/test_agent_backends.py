"""LLM backends against real fake servers on loopback: streaming, tool calls, failover."""

from __future__ import annotations

import socket
import time

import pytest

from runtime.agent.llm import (
    ChatMessage,
    ChatRequest,
    Done,
    HostPool,
    OllamaBackend,
    OpenAIBackend,
    TextDelta,
    ThinkingDelta,
    ToolCallChunk,
    parse_hosts,
)
from runtime.agent.llm.types import parse_arguments
from runtime.errors import ConfigError, LLMError, LLMUnavailable
from tests.fakes.llama_completions import FakeCompletions
from tests.fakes.ollama import FakeOllama
from tests.fakes.openai import FakeOpenAI
from tests.fakes.script import Call, Reply

MODEL = "gemma3:270m"
TOOLS = [{"name": "code_exec", "description": "run code",
          "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}]


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more


def request(model: str = MODEL, think: bool | None = None) -> ChatRequest:
    return ChatRequest(model=model, messages=[ChatMessage(role="user", content="hi")],
                       tools=TOOLS, think=think, temperature=0.1, num_ctx=4096)


async def collect(backend: object, req: ChatRequest) -> list[object]:
    return [chunk async for chunk in backend.stream(req)]  # type: ignore[attr-defined]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- Ollama ------------------------------------------------------------------------------


async def test_ollama_streams_thinking_text_tool_calls_and_usage(ollama: FakeOllama) -> None:
    ollama.model.add(Reply(thinking="plan it", content="hello there", prompt_tokens=21,
                           completion_tokens=5,
                           calls=[Call("code_exec", {"language": "python", "code": "1"})]))
    backend = OllamaBackend([ollama.url])
    chunks = await collect(backend, request(think=True))
    await backend.close()
    assert "".join(c.text for c in chunks if isinstance(c, ThinkingDelta)) == "plan it"
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "hello there"
    calls = [c.call for c in chunks if isinstance(c, ToolCallChunk)]
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("code_exec", {"language": "python", "code": "1"}, None)]
    done = chunks[-1]
    assert isinstance(done, Done) and done.usage.prompt_tokens == 21
    assert done.usage.completion_tokens == 5 and done.served_by == ollama.url
    sent = ollama.model.requests[0]
    assert sent["think"] is True and sent["options"] == {"temperature": 0.1, "num_ctx": 4096}
    assert sent["tools"][0]["function"]["name"] == "code_exec"


async def test_ollama_fails_over_to_the_next_host_and_blacklists(ollama: FakeOllama) -> None:
    down = closed_port_url()
    clock = Clock()
    backend = OllamaBackend([down, ollama.url], pool=HostPool([down, ollama.url], 60, clock))
    ollama.model.add(Reply(content="from the second host"), Reply(content="again"))
    chunks = await collect(backend, request())
    assert isinstance(chunks[-1], Done) and chunks[-1].served_by == ollama.url
    assert backend.pool.banned() == [down]
    assert backend.pool.candidates() == [ollama.url, down]  # skipped while banned
    await collect(backend, request())
    clock.now += 61
    assert backend.pool.candidates() == [down, ollama.url]  # tried again after the ban
    await backend.close()


async def test_ollama_fails_over_on_5xx_and_missing_model() -> None:
    with FakeOllama([Reply(status=503, error="overloaded")]) as busy, \
            FakeOllama(models=("other:1b",)) as wrong, FakeOllama() as good:
        good.model.add(Reply(content="ok"))
        backend = OllamaBackend([busy.url, wrong.url, good.url])
        chunks = await collect(backend, request())
        await backend.close()
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "ok"
    assert set(backend.pool.banned()) == {busy.url, wrong.url}


async def test_all_hosts_down_is_llm_unavailable() -> None:
    backend = OllamaBackend([closed_port_url(), closed_port_url()])
    with pytest.raises(LLMUnavailable, match="no Ollama host answered"):
        await collect(backend, request())
    await backend.close()


async def test_a_client_error_is_not_failed_over(ollama: FakeOllama) -> None:
    with FakeOllama([Reply(status=400, error="invalid request")]) as bad:
        backend = OllamaBackend([bad.url, ollama.url])
        with pytest.raises(LLMError, match="invalid request"):
            await collect(backend, request())
        await backend.close()
    assert ollama.model.requests == []


async def test_a_stream_cut_short_is_an_error_not_a_silent_answer(ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="half an ans", truncate=True))
    backend = OllamaBackend([ollama.url])
    with pytest.raises(LLMError, match="without finishing"):
        await collect(backend, request())
    await backend.close()


async def test_model_without_thinking_is_asked_again_without_think() -> None:
    with FakeOllama([Reply(content="plain")], can_think=False) as fake:
        backend = OllamaBackend([fake.url])
        chunks = await collect(backend, request(think=True))
        assert isinstance(chunks[-1], Done)
        fake.model.add(Reply(content="again"))
        await collect(backend, request(think=True))  # remembered: no 400 round trip
        await backend.close()
    assert [r.get("think") for r in fake.model.requests] == [None, None]


async def test_ollama_context_window_from_show(ollama: FakeOllama) -> None:
    backend = OllamaBackend([closed_port_url(), ollama.url])
    assert await backend.context_window(MODEL) == 32768
    assert await backend.context_window("missing:1b") is None
    await backend.close()


# ---- OpenAI-compatible -------------------------------------------------------------------


async def test_openai_assembles_streamed_tool_calls_and_reasoning() -> None:
    reply = Reply(thinking="reasoning here", content="text part",
                  calls=[Call("code_exec", {"language": "python", "code": "print('x' * 3)"}),
                         Call("terminal", {"command": "ls -la"})])
    with FakeOpenAI([reply], api_key="sk-test") as fake:
        backend = OpenAIBackend(fake.url + "/v1", "sk-test")
        chunks = await collect(backend, request("fake-model"))
        window = await backend.context_window("fake-model")
        await backend.close()
    assert "".join(c.text for c in chunks if isinstance(c, ThinkingDelta)) == "reasoning here"
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "text part"
    calls = [c.call for c in chunks if isinstance(c, ToolCallChunk)]
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_fake_0", "code_exec", {"language": "python", "code": "print('x' * 3)"}),
        ("call_fake_1", "terminal", {"command": "ls -la"})]
    assert isinstance(chunks[-1], Done) and chunks[-1].usage.prompt_tokens == 11
    assert chunks[-1].reason == "tool_calls"
    assert window == 16384
    sent = fake.model.requests[0]
    assert sent["stream"] is True and sent["tools"][0]["function"]["name"] == "code_exec"


async def test_openai_invalid_argument_json_is_a_call_with_an_error() -> None:
    with FakeOpenAI([Reply(calls=[Call("code_exec", '{"language": "pyth')])]) as fake:
        backend = OpenAIBackend(fake.url + "/v1")
        chunks = await collect(backend, request("fake-model"))
        await backend.close()
    (call,) = [c.call for c in chunks if isinstance(c, ToolCallChunk)]
    assert call.arguments is None and call.error and "not valid JSON" in call.error
    assert call.raw_arguments == '{"language": "pyth'


async def test_openai_errors_are_mapped() -> None:
    with FakeOpenAI(api_key="right") as fake:
        backend = OpenAIBackend(fake.url + "/v1", "wrong")
        with pytest.raises(LLMError, match="HTTP 401: invalid api key"):
            await collect(backend, request("fake-model"))
        await backend.close()
    with FakeOpenAI([Reply(status=500, error="boom")]) as fake:
        backend = OpenAIBackend(fake.url + "/v1")
        with pytest.raises(LLMUnavailable, match="HTTP 500: boom"):
            await collect(backend, request("fake-model"))
        await backend.close()
    backend = OpenAIBackend(closed_port_url() + "/v1")
    with pytest.raises(LLMUnavailable):
        await collect(backend, request("fake-model"))
    await backend.close()


# ---- helpers -----------------------------------------------------------------------------


def test_parse_hosts() -> None:
    assert parse_hosts(" a:1, http://b:2/ ,a:1") == ["http://a:1", "http://b:2"]
    assert parse_hosts(None) == ["http://127.0.0.1:11434"]
    with pytest.raises(ConfigError):
        parse_hosts("ftp://x")
    with pytest.raises(ConfigError):
        parse_hosts(" , ")


@pytest.mark.parametrize("raw,args,bad", [
    ('{"a": 1}', {"a": 1}, False), ({"a": 1}, {"a": 1}, False), ("", {}, False),
    ("[1]", None, True), ("{", None, True), ("x" * 300_000, None, True), (5, None, True),
    ("[" * 100_000, None, True),
])
def test_parse_arguments(raw: object, args: object, bad: bool) -> None:
    parsed, error = parse_arguments(raw)
    assert parsed == args and (error is not None) == bad


# ---- fallback to the embedded model ------------------------------------------------------


class StubEmbedded:
    """Stands in for the llama.cpp server (tests of that are in test_agent_embedded):
    `ensure` hands out a fake `/v1/completions` server's URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ensured = 0

    def installed(self) -> bool:
        return False

    async def ensure(self, on_progress: object = None) -> str:
        self.ensured += 1
        return self.url

    async def close(self) -> None:
        pass


async def test_fallback_serves_with_the_embedded_model_when_nothing_answers() -> None:
    from runtime.agent.llm import FallbackBackend, Notice
    from runtime.agent.llm.embedded import MODEL_ALIAS

    with FakeCompletions([" small model here\n", " still me\n"]) as local, \
            FakeOllama() as ollama:
        embedded = StubEmbedded(local.url + "/v1")
        down = closed_port_url()
        backend = FallbackBackend(OllamaBackend([down]), embedded,  # type: ignore[arg-type]
                                  retry_primary_s=0.5)
        assert backend.name == "ollama" and backend.model_for(MODEL) == MODEL
        chunks = await collect(backend, request())
        notices = [c.text for c in chunks if isinstance(c, Notice)]
        assert len(notices) == 1 and MODEL_ALIAS in notices[0] and "installed first" in notices[0]
        assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "small model here"
        assert backend.name == "embedded" and backend.model_for(MODEL) == MODEL_ALIAS
        assert await backend.context_window(MODEL) == 8192
        chunks = await collect(backend, request())  # while embedded: no new notice
        assert not [c for c in chunks if isinstance(c, Notice)]
        assert local.requests[0]["model"] == MODEL_ALIAS
        assert local.requests[0]["max_tokens"] == 256
        # the primary comes back: after retry_primary_s it is used again
        backend.primary = OllamaBackend([ollama.url])
        ollama.model.add(Reply(content="ollama again"))
        time.sleep(0.6)
        chunks = await collect(backend, request())
        assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "ollama again"
        assert backend.name == "ollama"
        await backend.close()
    assert embedded.ensured == 2


async def test_fallback_does_not_hide_a_model_error() -> None:
    from runtime.agent.llm import FallbackBackend

    with FakeOllama([Reply(status=400, error="bad request")]) as ollama:
        embedded = StubEmbedded("http://127.0.0.1:9/v1")
        backend = FallbackBackend(OllamaBackend([ollama.url]), embedded)  # type: ignore[arg-type]
        with pytest.raises(LLMError, match="bad request"):
            await collect(backend, request())
        await backend.close()
    assert embedded.ensured == 0
