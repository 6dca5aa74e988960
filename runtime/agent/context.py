"""What the model sees each step: stored rows turned into chat messages, kept under its window.

The context is rebuilt from the database before every model call: the newest summary (if
any), then every row after it. Before it gets near the window (`COMPRESS_AT` of it), older
turns are summarised by the model and the summary stored (`role = summary`,
`meta.covers_until`); the latest turns stay verbatim, as many as fit in `KEEP_RECENT` of the
window beside the system prompt and the tool schemas (at least the current turn). If the
current turn alone is too big, its older tool outputs are shortened in the copy sent (the
database keeps them). If the model cannot summarise, an extract of the old rows stands in,
so compression never fails a turn. Token counts are estimates (about four characters a token).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from runtime.agent.caps import MODEL_TOOL_OUTPUT, clip
from runtime.agent.history import MessageStore, StoredMessage
from runtime.agent.llm.types import (
    ChatMessage,
    ChatRequest,
    Done,
    ImageInput,
    LLMBackend,
    TextDelta,
    ToolCallRequest,
)
from runtime.errors import NaviError
from runtime.logging import get_logger

log = get_logger(__name__)

COMPRESS_AT = 0.75
KEEP_RECENT = 0.4
SUMMARY_CHARS = 6000
ELIDED_TOOL_CHARS = 600
SUMMARY_PROMPT = (
    "Summarise the conversation below for your own later use. Keep: the user's goals and "
    "preferences, facts learned, files created or changed, commands that worked, decisions, "
    "and open tasks. At most 300 words. Output only the summary."
)


def estimate_tokens(messages: list[ChatMessage], tools: list[dict[str, Any]] | None = None
                    ) -> int:
    chars = sum(len(m.content) + 16 for m in messages)
    chars += sum(len(json.dumps(c.arguments or c.raw_arguments)) + len(c.name)
                 for m in messages for c in m.tool_calls)
    chars += sum(1000 for m in messages for _ in m.images)
    if tools:
        chars += len(json.dumps(tools))
    return chars // 4 + 1


def to_chat(summary: StoredMessage | None, rows: list[StoredMessage],
            images: dict[str, list[ImageInput]] | None = None) -> list[ChatMessage]:
    """Stored rows as chat messages; images of this turn's tool results follow their batch,
    this turn's message carries its own (`user:<row id>`); earlier ones are named only."""
    out: list[ChatMessage] = []
    if summary is not None:
        out.append(ChatMessage(role="user", content="[Summary of the earlier conversation]\n"
                               + summary.content))
        out.append(ChatMessage(role="assistant", content="Understood."))
    pending: list[ImageInput] = []
    unanswered: list[ToolCallRequest] = []
    for row in rows:
        if row.role != "tool":
            out.extend(_no_result(unanswered))
            unanswered = []
            if pending:
                out.append(_image_message(pending))
                pending = []
        if row.role == "user":
            sent = (images or {}).get(f"user:{row.id}")
            content = row.content
            paths = [i.get("path") for i in row.meta.get("images", []) if isinstance(i, dict)]
            if paths and not sent:
                content += "\n[image(s) attached: " + ", ".join(map(str, paths)) + "]"
            out.append(ChatMessage(role="user", content=content, images=list(sent or [])))
        elif row.role == "assistant":
            calls = [ToolCallRequest.model_validate(c) for c in row.tool_calls]
            out.append(ChatMessage(role="assistant", content=row.content, tool_calls=calls))
            unanswered = list(calls)
        elif row.role == "tool":
            unanswered = [c for c in unanswered if c.id != row.tool_call_id]
            content = row.content
            paths = [i.get("path") for i in row.meta.get("images", []) if isinstance(i, dict)]
            if paths and not (images and row.tool_call_id in images):
                content += "\n[image(s) shown earlier: " + ", ".join(map(str, paths)) + "]"
            out.append(ChatMessage(role="tool", content=clip(content, MODEL_TOOL_OUTPUT),
                                   tool_call_id=row.tool_call_id, tool_name=row.tool_name))
            if images and row.tool_call_id in images:
                pending.extend(images[row.tool_call_id])
    out.extend(_no_result(unanswered))
    if pending:
        out.append(_image_message(pending))
    return out


def _no_result(calls: list[ToolCallRequest]) -> list[ChatMessage]:
    """Calls that never got a result (the turn was cancelled or stopped): say so, since
    OpenAI-compatible servers refuse a tool call without its answer."""
    return [ChatMessage(role="tool", content="(no result: the turn ended before this call ran)",
                        tool_call_id=c.id, tool_name=c.name) for c in calls]


def _image_message(images: list[ImageInput]) -> ChatMessage:
    return ChatMessage(role="user", content="[Image(s) returned by the tool above]",
                       images=list(images))


def split_point(rows: list[StoredMessage], budget_tokens: int) -> int:
    """Index of the first row to keep verbatim: whole turns from the end that fit the
    budget, and always the current (last) turn."""
    starts = [i for i, r in enumerate(rows) if r.role == "user"]
    if not starts:
        return 0
    keep = starts[-1]
    for start in reversed(starts[:-1]):
        if estimate_tokens(to_chat(None, rows[start:])) > budget_tokens:
            break
        keep = start
    return keep


def transcript(summary: StoredMessage | None, rows: list[StoredMessage], limit: int) -> str:
    lines = [f"(earlier summary) {summary.content}"] if summary else []
    for row in rows:
        text = row.content
        if row.role == "assistant" and row.tool_calls:
            text += " " + " ".join(f"[called {c.get('name')}]" for c in row.tool_calls)
        lines.append(f"{row.role}: {clip(text, 1500)}")
    return clip("\n".join(lines), limit)


def extract_summary(summary: StoredMessage | None, rows: list[StoredMessage]) -> str:
    """Fallback when the model cannot summarise: the user's requests and the answers, short."""
    lines = [clip(summary.content, 2000)] if summary else []
    for row in rows:
        if row.role in ("user", "assistant") and row.content.strip():
            lines.append(f"{row.role}: {clip(row.content.strip(), 300)}")
    return clip("\n".join(lines), SUMMARY_CHARS)


class ContextBuilder:
    def __init__(self, history: MessageStore, backend: LLMBackend, model: str, window: int,
                 session_id: str, turn_id: str) -> None:
        self.history = history
        self.backend = backend
        self.model = model
        self.window = window
        self.session_id = session_id
        self.turn_id = turn_id

    async def build(self, system: str, tools: list[dict[str, Any]],
                    images: dict[str, list[ImageInput]],
                    annotate: Callable[[list[ChatMessage]], None] | None = None,
                    ) -> list[ChatMessage]:
        summary, rows = await self.history.context(self.session_id)
        messages = self._assemble(system, summary, rows, images, annotate)
        limit = int(self.window * COMPRESS_AT)
        if estimate_tokens(messages, tools) <= limit:
            return messages
        # what every request carries counts against what is kept, so the compressed context
        # is back near KEEP_RECENT of the window and the next turns fit without another one
        carried = estimate_tokens([ChatMessage(role="system", content=system)], tools)
        cut = split_point(rows, max(0, int(self.window * KEEP_RECENT) - carried))
        if cut > 0:
            await self._summarise(summary, rows[:cut])
            summary, rows = await self.history.context(self.session_id)
            messages = self._assemble(system, summary, rows, images, annotate)
        if estimate_tokens(messages, tools) > limit:
            messages = _elide_tool_outputs(messages)
        return messages

    @staticmethod
    def _assemble(system: str, summary: StoredMessage | None, rows: list[StoredMessage],
                  images: dict[str, list[ImageInput]],
                  annotate: Callable[[list[ChatMessage]], None] | None) -> list[ChatMessage]:
        messages = [ChatMessage(role="system", content=system), *to_chat(summary, rows, images)]
        if annotate is not None:
            annotate(messages)
        return messages

    async def _summarise(self, summary: StoredMessage | None, rows: list[StoredMessage]) -> None:
        text = transcript(summary, rows, self.window * 2)
        request = ChatRequest(model=self.model, temperature=0.1, messages=[
            ChatMessage(role="system", content=SUMMARY_PROMPT),
            ChatMessage(role="user", content=text)], num_ctx=self.window)
        parts: list[str] = []
        try:
            async with contextlib.aclosing(self.backend.stream(request)) as chunks:
                async for chunk in chunks:
                    if isinstance(chunk, TextDelta):
                        parts.append(chunk.text)
                        if sum(map(len, parts)) > SUMMARY_CHARS * 2:
                            break
                    elif isinstance(chunk, Done):
                        break
            result = clip("".join(parts).strip(), SUMMARY_CHARS)
        except NaviError as exc:
            log.warning("summary_failed", code=exc.code, message=exc.message)
            result = ""
        source = "model"
        if not result:
            result, source = extract_summary(summary, rows), "extract"
        await self.history.append(self.session_id, self.turn_id, "summary", result,
                                  meta={"covers_until": rows[-1].id, "source": source,
                                        "rows": len(rows)})
        log.info("context_compressed", rows=len(rows), source=source, window=self.window)


def _elide_tool_outputs(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Shorten every tool output but the last two (only in what is sent)."""
    tool_idx = [i for i, m in enumerate(messages) if m.role == "tool"]
    out = list(messages)
    for i in tool_idx[:-2]:
        out[i] = out[i].model_copy(update={"content": clip(out[i].content, ELIDED_TOOL_CHARS)})
    return out
