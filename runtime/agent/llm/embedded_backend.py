"""The embedded model as an `LLMBackend`: grammar-constrained steps over `/v1/completions`.

Gemma 3 270M is a base model and never emits tool calls through a chat template. So each
step is a plain completion of a transcript (`embedded_prompt.render`) under a grammar
(`embedded_grammar.step_grammar`) that admits exactly one step: a fenced code block (a
`code_exec` call), a JSON call of another offered tool, or one line of answer text. The
model decides which; this module only translates the step into our chunks:

- an answer is streamed as `TextDelta`s as it arrives (trailing whitespace held back);
- a call is parsed when the step is complete and yielded as one `ToolCallChunk`.

Output is untrusted like any model's: it is bounded, and a step that is not what the
grammar promised (cut off by `max_tokens`, a server that ignored the grammar) becomes a
call with `error` (the loop hands that back to the model) or plain text, never a crash.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from runtime.agent.llm.embedded_grammar import CODE_TOOL, FENCE, TOOL_PREFIX, step_grammar
from runtime.agent.llm.embedded_prompt import render
from runtime.agent.llm.sse import Choices, EventStreamBackend
from runtime.agent.llm.types import (
    MAX_TOOL_ARGS_CHARS,
    ChatRequest,
    Chunk,
    Done,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
    Usage,
)
from runtime.logging import get_logger

log = get_logger(__name__)

STEP_TEMPERATURE = 0.0  # a 270M model's best guess is its most likely one
STOP = ["\nUser:", "\nResult:", "\nNavi:"]  # where a base model goes on with the transcript


class _TextStream:
    """Answer text as it arrives, minus the leading space and any trailing whitespace (held
    back until more text follows: the server cuts the answer before `\nUser:`)."""

    def __init__(self) -> None:
        self.pending = ""
        self.started = False

    def feed(self, piece: str) -> str:
        text = self.pending + piece
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        body = text.rstrip()
        self.pending = text[len(body):]
        return body


def _code_call(step: str) -> ToolCallRequest:
    """`` ```python\n...``` `` as a `code_exec` call (`error` when it was cut off)."""
    head, _, rest = step[len(FENCE):].partition("\n")
    language = head.strip()
    closed = rest.rstrip().endswith(FENCE)
    code = rest.rstrip()[:-len(FENCE)] if closed else rest
    code = code.rstrip("\n")
    raw = json.dumps({"language": language, "code": code})[:4096]
    if not closed or language not in ("python", "bash") or not code.strip():
        return ToolCallRequest(id="call_1", name=CODE_TOOL, raw_arguments=raw,
                               error="the code block was cut off or empty; write a shorter "
                                     "program and close it with ```")
    return ToolCallRequest(id="call_1", name=CODE_TOOL,
                           arguments={"language": language, "code": code}, raw_arguments=raw)


def _json_call(step: str) -> ToolCallRequest:
    """The complete `{"tool": ..., "arguments": ...}` text as a call (`error` if it is not)."""
    try:
        value = json.loads(step) if len(step) <= MAX_TOOL_ARGS_CHARS else None
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict) or not isinstance(value.get("tool"), str):
        name = step[len(TOOL_PREFIX):].split('"', 1)[0] if step.startswith(TOOL_PREFIX) else ""
        return ToolCallRequest(id="call_1", name=name[:64] or "unknown", raw_arguments=step[:4096],
                               error="the tool call was cut off or is not valid JSON")
    arguments = value.get("arguments")
    return ToolCallRequest.parsed("call_1", value["tool"], arguments, json.dumps(arguments))


class EmbeddedBackend(EventStreamBackend):
    """Speaks to the embedded llama-cpp-python server (`base_url` ends in `/v1`)."""

    name = "embedded"
    who = "embedded model server"
    path = "/completions"

    def __init__(self, base_url: str, *, timeout_s: float = 300.0) -> None:
        super().__init__(base_url, timeout_s=timeout_s)

    async def context_window(self, model: str) -> int | None:
        return None

    def body(self, request: ChatRequest) -> dict[str, Any]:
        return {
            "model": request.model, "prompt": render(request.messages, request.tools),
            "grammar": step_grammar(request.tools), "stream": True,
            "max_tokens": request.max_tokens or 512, "temperature": STEP_TEMPERATURE,
            "stop": STOP,
        }

    async def parse(self, events: AsyncIterator[dict[str, Any]]) -> AsyncGenerator[Chunk, None]:
        raw = ""
        answer: _TextStream | None = None
        tokens = 0
        choices = Choices(events)
        async for choice in choices:
            piece = choice.get("text")
            if not isinstance(piece, str) or not piece:
                continue
            tokens += 1
            if len(raw) <= MAX_TOOL_ARGS_CHARS:
                raw += piece
            head = raw.lstrip()
            if answer is None and head and not FENCE.startswith(head[:3]) and not (
                    head.startswith("{")):
                answer = _TextStream()
                piece = raw
            if answer is not None:
                text = answer.feed(piece)
                if text:
                    yield TextDelta(text)
        reason, usage = choices.reason, choices.usage
        step = raw.strip()
        if answer is None and step.startswith(FENCE):
            call = _code_call(step)
        elif answer is None and step.startswith("{"):
            call = _json_call(step)
        else:
            call = None
            log.info("embedded_step", kind="answer", finish=reason)
        if call is not None:
            log.info("embedded_step", kind="tool", tool=call.name, ok=call.error is None,
                     finish=reason)
            yield ToolCallChunk(call)
        if not usage.completion_tokens:
            usage = Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=tokens)
        yield Done(usage=usage, reason=reason, served_by=self.base_url)

