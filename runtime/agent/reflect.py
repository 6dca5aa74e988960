"""`reflect`: one extra, bounded model call that reviews the turn so far.

The model is shown the turn's transcript (the request, what it said, the tools it called
and what they answered; the session's last rows when the call belongs to no turn) under a
reviewer's system prompt, with no tools, and its answer (at most `MAX_REVIEW_CHARS`, within
the backend's timeout) is the tool's output. Nothing is stored here: the review reaches the
history as the tool's result, like any other.
"""

from __future__ import annotations

import contextlib

from runtime.agent.caps import clip
from runtime.agent.context import transcript
from runtime.agent.deps import AgentDeps
from runtime.agent.history import MessageStore
from runtime.agent.llm import ChatMessage, ChatRequest, Done, TextDelta
from runtime.errors import NotFound
from runtime.policy.decision import Subject

MAX_TRANSCRIPT_CHARS = 24_000
MAX_REVIEW_CHARS = 4_000
RECENT_ROWS = 20
REVIEW_PROMPT = (
    "You review an AI agent's work in progress. Below is the transcript of its current turn: "
    "the user's request, what the agent said, the tools it called and their results. Answer "
    "in at most 10 short bullet points: what is done, what is wrong or risky (failed calls, "
    "unchecked assumptions, missing steps), and what to do next. Do not call tools."
)


class Reflector:
    """Bound to the app's services once they exist (`services`), like `SubAgents`."""

    def __init__(self) -> None:
        self.services: AgentDeps | None = None

    async def review(self, subject: Subject, turn_id: str | None) -> str:
        services = self.services
        agent = services.agent if services is not None else None
        if services is None or agent is None:
            raise NotFound("reflect is not available here (no agent service)")
        rows = await MessageStore(services.store).list(subject.session)
        mine = [r for r in rows if turn_id is not None and r.turn_id == turn_id]
        text = transcript(None, mine or rows[-RECENT_ROWS:], MAX_TRANSCRIPT_CHARS)
        model = agent.profiles.get(subject.profile).model or agent.settings.model
        request = ChatRequest(model=model, temperature=0.2, max_tokens=1024, messages=[
            ChatMessage(role="system", content=REVIEW_PROMPT),
            ChatMessage(role="user", content=text or "(the turn has no messages yet)")])
        parts: list[str] = []
        async with contextlib.aclosing(agent.backend.stream(request)) as chunks:
            async for chunk in chunks:
                if isinstance(chunk, TextDelta):
                    parts.append(chunk.text)
                    if sum(map(len, parts)) > MAX_REVIEW_CHARS:
                        break
                elif isinstance(chunk, Done):
                    break
        return clip("".join(parts).strip(), MAX_REVIEW_CHARS)
