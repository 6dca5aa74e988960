"""The model's answer to one step of a turn, streamed to the turn's events as it comes:
thinking and text deltas, tool calls (at most `MAX_CALLS_KEPT`), notices, usage. With a
profile's list of models, a model that fails before its answer starts is skipped for a while
(`ModelBlacklist`, with a notice) and the next one asked."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from runtime import tracing
from runtime.agent.caps import ANSWER_TEXT, STORED_THINKING, clip
from runtime.agent.events import TurnEvents
from runtime.agent.llm import types as llm
from runtime.agent.models import none_left, skippable
from runtime.agent.turn_setup import TurnSetup
from runtime.errors import NaviError
from runtime.events import Notice as NoticeEvent
from runtime.logging import get_logger

log = get_logger(__name__)

MAX_CALLS_KEPT = 32  # calls beyond this in one answer are dropped unseen (untrusted output)


@dataclass
class Answer:
    text: str = ""
    thinking: str = ""
    calls: list[llm.ToolCallRequest] = field(default_factory=list)
    usage: llm.Usage = field(default_factory=llm.Usage)
    too_long: bool = False
    served_by: str | None = None


class ModelAnswers:
    """Asks the turn's model (`setup.model`, or the first usable of `setup.models`) and
    streams its answer to `events`; `live` holds the text of the answer being streamed (what
    a cancelled turn said so far)."""

    def __init__(self, setup: TurnSetup, events: TurnEvents) -> None:
        self.s = setup
        self.events = events
        self.live: list[str] = []
        self._started = False  # the current model call has produced output

    async def ask(self, request: llm.ChatRequest, iteration: int) -> Answer:
        with tracing.span(f"chat {request.model}", {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": self.s.backend.name,
                "gen_ai.system": self.s.backend.name, "gen_ai.request.model": request.model,
                "gen_ai.request.temperature": request.temperature,
                "navi.iteration": iteration}) as span:
            answer = await self._answer(request)
            tracing.annotate(span, {
                "gen_ai.usage.input_tokens": answer.usage.prompt_tokens or None,
                "gen_ai.usage.output_tokens": answer.usage.completion_tokens or None,
                "navi.tool_calls": len(answer.calls), "navi.too_long": answer.too_long})
        return answer

    async def _answer(self, request: llm.ChatRequest) -> Answer:
        """From the first usable model of the profile's list; a model that fails before
        its answer starts is skipped (for a while, with a notice) and the next one asked."""
        s = self.s
        if len(s.models) < 2 or s.blacklist is None:
            return await self._answer_from(request)
        problems: list[str] = []
        for model in s.blacklist.usable(s.models):
            self._started = False
            try:
                answer = await self._answer_from(request.model_copy(update={"model": model}))
            except NaviError as exc:
                if self._started or not skippable(exc):
                    raise
                s.blacklist.failed(model)
                problems.append(f"{model}: {clip(exc.message, 300)}")
                log.warning("model_skipped", model=model, code=exc.code,
                            blacklisted_s=s.blacklist.blacklist_s)
                self.events.emit(NoticeEvent(
                    turn_id=s.turn_id, phase="model_fallback", message=clip(
                        f"Model {model} failed before answering ({exc.message}); it is "
                        f"skipped for {s.blacklist.blacklist_s:g} s.", 2000)))
                continue
            s.blacklist.succeeded(model)
            return answer
        raise none_left(s.models, problems)

    async def _answer_from(self, request: llm.ChatRequest) -> Answer:
        answer = Answer()
        text = self.live = []
        thinking: list[str] = []
        size = 0
        async with contextlib.aclosing(self.s.backend.stream(request)) as chunks:
            async for chunk in chunks:
                if not isinstance(chunk, llm.Notice):
                    self._started = True  # output reached the user: no silent switch now
                if isinstance(chunk, llm.ThinkingDelta | llm.TextDelta):
                    size += len(chunk.text)
                    if size > ANSWER_TEXT:
                        answer.too_long = True
                        break
                if isinstance(chunk, llm.ThinkingDelta):
                    thinking.append(chunk.text)
                    self.events.delta("thinking", chunk.text)
                elif isinstance(chunk, llm.TextDelta):
                    text.append(chunk.text)
                    self.events.delta("text", chunk.text)
                elif isinstance(chunk, llm.ToolCallChunk):
                    self.events.end_thinking()
                    if len(answer.calls) < MAX_CALLS_KEPT:
                        answer.calls.append(chunk.call)
                elif isinstance(chunk, llm.Done):
                    answer.usage = chunk.usage
                    answer.served_by = chunk.served_by
                elif isinstance(chunk, llm.Notice):
                    self.events.emit(NoticeEvent(turn_id=self.s.turn_id,
                                                 message=clip(chunk.text, 2000),
                                                 phase=chunk.phase, progress=chunk.progress))
        self.events.end_thinking()
        self.events.flush()
        answer.text = "".join(text)
        answer.thinking = clip("".join(thinking), STORED_THINKING)
        return answer
