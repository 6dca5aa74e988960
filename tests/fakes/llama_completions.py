"""A fake of the embedded llama.cpp server on loopback: `/v1/completions` streaming SSE text.

Each request takes the next scripted step text (what the model would write after `Navi:`,
e.g. `" ```python\\nprint(1)\\n```"` or `" Hello there.\\n"`), streamed in small pieces the
way llama-cpp-python streams tokens. Every request body (prompt, grammar, ...) is recorded.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

from tests.fakes.script import pieces
from tests.fakes.server import Answer, FakeServer, Pause


class FakeCompletions(FakeServer):
    def __init__(self, steps: list[str] | None = None, *, chunk: int = 3,
                 delay_s: float = 0.0, port: int = 0) -> None:
        super().__init__(port)
        self.steps: deque[str] = deque(steps or [])
        self.chunk = chunk
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, step: str) -> None:
        with self._lock:
            self.steps.append(step)

    def route(self, method: str, path: str, headers: dict[str, str], body: Any) -> Answer:
        if method == "GET" and path == "/v1/models":
            return Answer(body={"object": "list", "data": [{"id": "fake", "object": "model"}]})
        if method == "POST" and path == "/v1/completions":
            with self._lock:
                self.requests.append(body or {})
                step = self.steps.popleft() if self.steps else " (no scripted step)\n"
            return Answer(stream=self._stream(step), content_type="text/event-stream")
        return Answer(404, {"error": {"message": "not found"}})

    def _stream(self, step: str) -> Iterator[bytes | Pause]:
        parts = pieces(step, self.chunk)
        for n, piece in enumerate(parts, start=1):
            finish = "stop" if n == len(parts) else None
            yield b"data: " + json.dumps({"object": "text_completion", "choices": [
                {"index": 0, "text": piece, "finish_reason": finish}]}).encode() + b"\n\n"
            if self.delay_s:
                yield Pause(self.delay_s)
        yield b"data: [DONE]\n\n"
