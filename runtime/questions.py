"""Questions the agent asks its user mid-turn (`ask_user`): pending until answered or timed out.

Like approvals, a question pauses the caller (the agent's tool call) on a future; unlike
them, the answer is free text (or one of the offered options) and any token that may post
messages in the session may give it. A question belongs to one session of one tenant: the
API looks it up by both, so another tenant's question is a plain 404. An unanswered question
expires at its deadline (the tool then reports that no answer came); a cancelled turn drops
its question. Each is published on the session's bus as a `question` event when asked and a
`question_answered` event when it ends.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import Literal

from runtime.errors import Conflict, NotFound, Unprocessable
from runtime.events import EventHub, QuestionAnswered, QuestionAsked

MAX_QUESTION_CHARS = 4000
MAX_OPTIONS = 20
MAX_OPTION_CHARS = 200
MAX_ANSWER_CHARS = 8000
KEEP_ENDED = 200

Status = Literal["pending", "answered", "expired", "cancelled"]


@dataclass
class Question:
    id: str
    tenant: str
    session: str
    question: str
    options: list[str] | None
    created_at: float
    expires_at: float
    turn_id: str | None = None
    asked_by: str | None = None
    status: Status = "pending"
    answer: str | None = None
    answered_by: str | None = None
    _future: asyncio.Future[str] | None = field(repr=False, default=None)

    def public(self) -> dict[str, object]:
        return {"question_id": self.id, "session": self.session, "question": self.question,
                "options": self.options, "status": self.status, "answer": self.answer,
                "turn_id": self.turn_id, "created_at": self.created_at,
                "expires_at": self.expires_at, "answered_by": self.answered_by}


class QuestionBroker:
    """Every question of this server, in memory (a restart ends the turns that asked)."""

    def __init__(self, hub: EventHub, timeout_s: float = 600.0) -> None:
        self.hub = hub
        self.timeout_s = timeout_s
        self._items: dict[str, Question] = {}

    async def ask(self, *, tenant: str, session: str, question: str,
                  options: list[str] | None = None, turn_id: str | None = None,
                  asked_by: str | None = None, timeout_s: float | None = None,
                  question_id: str | None = None) -> Question:
        """Publish the question and wait for its answer or its deadline; returns it ended
        (`answered` or `expired`). Cancelling the caller cancels the question."""
        now = time.time()
        wait = self.timeout_s if timeout_s is None else timeout_s
        item = Question(id=question_id or new_question_id(), tenant=tenant, session=session,
                        question=question, options=options, created_at=now,
                        expires_at=now + wait, turn_id=turn_id, asked_by=asked_by)
        item._future = asyncio.get_running_loop().create_future()
        self._items[item.id] = item
        self._trim()
        bus = self.hub.bus(session)
        bus.publish(QuestionAsked(question_id=item.id, question=question, options=options,
                                  turn_id=turn_id, expires_at=item.expires_at))
        try:
            await asyncio.wait_for(asyncio.shield(item._future), timeout=wait)
        except TimeoutError:
            item.status = "expired"
        except asyncio.CancelledError:
            item.status = "cancelled"
            raise
        finally:
            if item.status != "answered":
                bus.publish(QuestionAnswered(question_id=item.id, status=item.status,
                                             turn_id=turn_id))
        return item

    def pending(self, tenant: str, session: str) -> list[Question]:
        return [q for q in self._items.values()
                if q.tenant == tenant and q.session == session and q.status == "pending"]

    def get(self, tenant: str, session: str, question_id: str) -> Question:
        item = self._items.get(question_id)
        if item is None or item.tenant != tenant or item.session != session:
            raise NotFound("no such question")
        return item

    def check_answer(self, tenant: str, session: str, question_id: str, answer: str
                     ) -> Question:
        """The pending question if `answer` may answer it: `NotFound`, `Conflict` (already
        answered, expired or cancelled), `Unprocessable` (not one of its options)."""
        item = self.get(tenant, session, question_id)
        if item.status != "pending":
            raise Conflict(f"question already {item.status}")
        if item.options is not None and answer not in item.options:
            raise Unprocessable("the answer must be one of the question's options",
                                options=list(item.options))
        return item

    def answer(self, tenant: str, session: str, question_id: str, answer: str, by: str
               ) -> Question:
        """Give the answer (the checks of `check_answer` again); the asking tool returns it."""
        item = self.check_answer(tenant, session, question_id, answer)
        item.status = "answered"
        item.answer = answer
        item.answered_by = by
        if item._future is not None and not item._future.done():
            item._future.set_result(answer)
        self.hub.bus(session).publish(QuestionAnswered(
            question_id=item.id, status="answered", turn_id=item.turn_id))
        return item

    def _trim(self) -> None:
        ended = [q for q in self._items.values() if q.status != "pending"]
        for item in ended[: max(0, len(ended) - KEEP_ENDED)]:
            self._items.pop(item.id, None)


def new_question_id() -> str:
    return "q_" + secrets.token_hex(8)
