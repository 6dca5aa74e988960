"""Scripted model behaviour shared by the fake Ollama and fake OpenAI-compatible servers.

A test queues `Reply`s (or callables `request -> Reply`); each chat request takes the next.
Requests that ask for a conversation summary (context compression) are answered by
`summary` without consuming the script. When the script is empty, `auto_reply` answers like
a tiny demo model: a request containing a ```python block runs it with `code_exec`, a tool
result is quoted back, anything else is echoed. Every request body is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SUMMARY_MARKER = "Summarise the conversation"
_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


@dataclass
class Call:
    name: str
    args: dict[str, Any] | str = field(default_factory=dict)  # str: raw (maybe bad) JSON


@dataclass
class Reply:
    content: str = ""
    thinking: str = ""
    calls: list[Call] = field(default_factory=list)
    chunk: int = 8               # characters per streamed piece
    delay_s: float = 0.0         # pause between pieces
    hang_s: float = 0.0          # pause before the final piece (cancellation tests)
    truncate: bool = False       # end the stream without its final (done) piece
    status: int = 200            # an HTTP error instead of an answer
    error: str = "scripted failure"
    prompt_tokens: int = 11
    completion_tokens: int = 7


Responder = Reply | Callable[[dict[str, Any]], Reply]


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), max(1, size))]


def last_message(request: dict[str, Any], role: str | None = None) -> dict[str, Any]:
    for message in reversed(request.get("messages") or []):
        if role is None or message.get("role") == role:
            return dict(message)
    return {}


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def auto_reply(request: dict[str, Any]) -> Reply:
    last = last_message(request)
    if last.get("role") == "tool":
        return Reply(content=f"The tool said: {text_of(last)[:300]}")
    code = _CODE.search(text_of(last))
    if code and request.get("tools"):
        return Reply(thinking="The user wants this code run.",
                     calls=[Call("code_exec", {"language": "python", "code": code.group(1)})])
    return Reply(content=f"You said: {text_of(last)[:300]}")


class ScriptedModel:
    def __init__(self, replies: list[Responder] | None = None,
                 summary: str = "Summary: the user asked things and got answers.") -> None:
        self._lock = threading.Lock()
        self._script: deque[Responder] = deque(replies or [])
        self.summary = summary
        self.requests: list[dict[str, Any]] = []
        self.summary_requests: list[dict[str, Any]] = []
        self.fallback: Callable[[dict[str, Any]], Reply] = auto_reply

    def add(self, *replies: Responder) -> None:
        with self._lock:
            self._script.extend(replies)

    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def next_reply(self, request: dict[str, Any]) -> Reply:
        first = (request.get("messages") or [{}])[0]
        with self._lock:
            if SUMMARY_MARKER in text_of(first):
                self.summary_requests.append(request)
                return Reply(content=self.summary)
            self.requests.append(request)
            item = self._script.popleft() if self._script else None
        if item is None:
            return self.fallback(request)
        return item(request) if callable(item) else item


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
