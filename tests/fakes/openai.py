"""A fake OpenAI-compatible server on loopback: `/v1/chat/completions` streaming SSE
(`reasoning_content`, content, tool-call fragments by index, usage) and `/v1/models`.

Tool-call arguments are streamed as fragments of their JSON text; a `Call` whose `args` is a
string is sent verbatim, so a test can make the model emit arguments that are not JSON.
With `api_key` set, requests without `Authorization: Bearer <key>` get 401.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from tests.fakes.script import Reply, Responder, ScriptedModel, pieces
from tests.fakes.server import Answer, FakeServer, Pause


class FakeOpenAI(FakeServer):
    def __init__(self, replies: list[Responder] | None = None, *,
                 models: tuple[str, ...] = ("fake-model",), api_key: str | None = None,
                 context_length: int = 16384, port: int = 0) -> None:
        super().__init__(port)
        self.model = ScriptedModel(replies)
        self.models = models
        self.api_key = api_key
        self.context_length = context_length
        self.headers: list[dict[str, str]] = []

    def route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Answer:
        self.headers.append(headers)
        if self.api_key is not None and headers.get("Authorization") != f"Bearer {self.api_key}":
            return Answer(401, {"error": {"message": "invalid api key", "type": "auth"}})
        if method == "GET" and path == "/v1/models":
            return Answer(body={"object": "list", "data": [
                {"id": m, "object": "model", "owned_by": "fake",
                 "context_length": self.context_length} for m in self.models]})
        if method == "POST" and path == "/v1/chat/completions":
            return self._chat(body or {})
        return Answer(404, {"error": {"message": "not found"}})

    def _chat(self, request: dict[str, Any]) -> Answer:
        model = request.get("model", "")
        if model not in self.models:
            return Answer(404, {"error": {"message": f"model {model!r} does not exist"}})
        reply = self.model.next_reply(request)
        if reply.status != 200:
            return Answer(reply.status, {"error": {"message": reply.error}})
        return Answer(stream=_stream(model, reply, bool(
            (request.get("stream_options") or {}).get("include_usage"))),
            content_type="text/event-stream")


def _event(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
             "created": int(time.time()), "model": model,
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _stream(model: str, reply: Reply, usage: bool) -> Iterator[bytes | Pause]:
    yield _event(model, {"role": "assistant", "content": ""})
    for piece in pieces(reply.thinking, reply.chunk):
        yield _event(model, {"reasoning_content": piece})
        if reply.delay_s:
            yield Pause(reply.delay_s)
    for piece in pieces(reply.content, reply.chunk):
        yield _event(model, {"content": piece})
        if reply.delay_s:
            yield Pause(reply.delay_s)
    for index, call in enumerate(reply.calls):
        text = call.args if isinstance(call.args, str) else json.dumps(call.args)
        yield _event(model, {"tool_calls": [{"index": index, "id": f"call_fake_{index}",
                                             "type": "function",
                                             "function": {"name": call.name, "arguments": ""}}]})
        for piece in pieces(text, 10):
            yield _event(model, {"tool_calls": [{"index": index,
                                                 "function": {"arguments": piece}}]})
    if reply.hang_s:
        yield Pause(reply.hang_s)
    yield _event(model, {}, "tool_calls" if reply.calls else "stop")
    if usage:
        yield b"data: " + json.dumps({
            "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
            "choices": [], "usage": {"prompt_tokens": reply.prompt_tokens,
                                     "completion_tokens": reply.completion_tokens,
                                     "total_tokens": reply.prompt_tokens
                                     + reply.completion_tokens}}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"
