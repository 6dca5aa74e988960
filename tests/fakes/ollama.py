"""A fake Ollama on loopback: `/api/chat` (streaming NDJSON with thinking and tool calls, or
one JSON answer), `/api/tags`, `/api/show`, `/api/version`, answering from a `ScriptedModel`.

    with FakeOllama([Reply(thinking="hm", calls=[Call("code_exec", {...})]),
                     Reply(content="done")]) as fake:
        ... NAVI_OLLAMA_HOST=fake.url ...
        fake.model.requests  # what the runtime sent

Run standalone (auto replies, see `script.auto_reply`):
`python -m tests.fakes.ollama --port 11434`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

from tests.fakes.script import Reply, Responder, ScriptedModel, dumps, pieces
from tests.fakes.server import Answer, FakeServer, Pause

CONTEXT_LENGTH = 32768


class FakeOllama(FakeServer):
    def __init__(self, replies: list[Responder] | None = None, *,
                 models: tuple[str, ...] = ("gemma3:270m",),
                 context_length: int = CONTEXT_LENGTH, can_think: bool = True,
                 vision: bool = False, port: int = 0) -> None:
        super().__init__(port)
        self.can_think = can_think
        self.vision = vision
        self.model = ScriptedModel(replies)
        self.models = models
        self.context_length = context_length
        self.chat_calls = 0

    def route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Answer:
        if method == "GET" and path == "/api/version":
            return Answer(body={"version": "0.12.0-fake"})
        if method == "GET" and path == "/api/tags":
            return Answer(body={"models": [
                {"name": m, "model": m, "size": 1, "digest": "0" * 64,
                 "modified_at": "2025-01-01T00:00:00Z", "details": {"family": "fake"}}
                for m in self.models]})
        if method == "POST" and path == "/api/show":
            name = (body or {}).get("model") or (body or {}).get("name")
            if name not in self.models:
                return Answer(404, {"error": f"model '{name}' not found"})
            return Answer(body={
                "modelfile": "", "parameters": "", "template": "{{ .Prompt }}",
                "details": {"family": "fake", "parameter_size": "270M"},
                "model_info": {"general.architecture": "fake",
                               "fake.context_length": self.context_length},
                "capabilities": ["completion", "tools"]
                + (["thinking"] if self.can_think else []) + (["vision"] if self.vision else [])})
        if method == "POST" and path == "/api/chat":
            return self._chat(body or {})
        return Answer(404, {"error": "not found"})

    def _chat(self, request: dict[str, Any]) -> Answer:
        self.chat_calls += 1
        model = request.get("model", "")
        if model not in self.models:
            return Answer(404, {"error": f"model '{model}' not found, try pulling it first"})
        if request.get("think") and not self.can_think:
            return Answer(400, {"error": f'"{model}" does not support thinking'})
        reply = self.model.next_reply(request)
        if reply.status != 200:
            return Answer(reply.status, {"error": reply.error})
        if request.get("stream") is False:
            return Answer(body=_final(model, reply, {
                "role": "assistant", "content": reply.content, "thinking": reply.thinking or None,
                "tool_calls": _calls(reply) or None}))
        return Answer(stream=_stream(model, reply), content_type="application/x-ndjson")


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"function": {"name": c.name, "arguments": c.args}} for c in reply.calls]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


def _part(model: str, message: dict[str, Any]) -> bytes:
    return dumps({"model": model, "created_at": _now(), "message": message,
                  "done": False}) + b"\n"


def _final(model: str, reply: Reply, message: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"model": model, "created_at": _now(),
            "message": {k: v for k, v in (message or {"role": "assistant", "content": ""}
                                          ).items() if v is not None},
            "done": True, "done_reason": "stop", "total_duration": 1000,
            "prompt_eval_count": reply.prompt_tokens, "eval_count": reply.completion_tokens}


def _stream(model: str, reply: Reply) -> Iterator[bytes | Pause]:
    for piece in pieces(reply.thinking, reply.chunk):
        yield _part(model, {"role": "assistant", "content": "", "thinking": piece})
        if reply.delay_s:
            yield Pause(reply.delay_s)
    for piece in pieces(reply.content, reply.chunk):
        yield _part(model, {"role": "assistant", "content": piece})
        if reply.delay_s:
            yield Pause(reply.delay_s)
    if reply.calls:
        yield _part(model, {"role": "assistant", "content": "", "tool_calls": _calls(reply)})
    if reply.hang_s:
        yield Pause(reply.hang_s)
    if not reply.truncate:
        yield dumps(_final(model, reply)) + b"\n"


def main() -> None:
    parser = argparse.ArgumentParser(description="fake Ollama with demo replies")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", action="append", help="model names it serves")
    args = parser.parse_args()
    fake = FakeOllama(models=tuple(args.model or ("gemma3:270m",)), port=args.port)
    print(fake.url, flush=True)
    try:
        fake.httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
