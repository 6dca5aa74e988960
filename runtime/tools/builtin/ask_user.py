"""`ask_user`: the agent asks its user a question mid-turn and waits for the answer.

Only an agent turn has a user waiting on the other side of the session's event stream: a call
from `/exec` or MCP (no turn) is refused (400). The question is audited (`question.ask`: its
digest and size, never the text) before it is shown; the answer arrives through
`POST /v1/sessions/{id}/questions/{question_id}` (audited `question.answer` there). Unanswered
at the deadline, the tool says so and the model goes on without it.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import Field, field_validator

from runtime.audit.records import sha256_hex
from runtime.errors import InvalidInput, NotFound
from runtime.questions import (
    MAX_OPTION_CHARS,
    MAX_OPTIONS,
    MAX_QUESTION_CHARS,
    Question,
    new_question_id,
)
from runtime.tools.base import BuiltinTool, ToolContext, ToolParams, ToolResult, record_change


class Asker(Protocol):
    async def ask(self, *, tenant: str, session: str, question: str,
                  options: list[str] | None = None, turn_id: str | None = None,
                  asked_by: str | None = None, timeout_s: float | None = None,
                  question_id: str | None = None) -> Question: ...


class AskUserParams(ToolParams):
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS,
                          description="what you need to know, in one clear question")
    options: list[str] | None = Field(
        None, min_length=1, max_length=MAX_OPTIONS,
        description="answers to choose from (the user must pick one); omit for free text")

    @field_validator("options")
    @classmethod
    def _options(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for option in value:
            if not option.strip() or len(option) > MAX_OPTION_CHARS:
                raise ValueError(f"each option is 1-{MAX_OPTION_CHARS} characters")
        if len(set(value)) != len(value):
            raise ValueError("options must differ")
        return value


class AskUserTool(BuiltinTool[AskUserParams]):
    name = "ask_user"
    description = (
        "Ask the user a question and wait for the answer (only when you cannot go on "
        "without it: a choice, a missing fact, a confirmation). With options, the user "
        "picks one of them."
    )
    group = "group:meta"
    Params = AskUserParams

    def __init__(self, broker: Asker | None = None) -> None:
        self.broker = broker

    async def execute(self, params: AskUserParams, ctx: ToolContext) -> ToolResult:
        if self.broker is None:
            raise NotFound("questions are not available here")
        if ctx.origin.turn_id is None:
            raise InvalidInput("ask_user works only inside an agent turn (a user must be "
                               "there to answer); here, ask in your own reply instead")
        question_id = new_question_id()
        await record_change(ctx, "question.ask", question_id, detail=(
            f"sha256:{sha256_hex(params.question.encode())} chars:{len(params.question)} "
            f"options:{len(params.options or [])}"))
        item = await self.broker.ask(
            tenant=ctx.tenant, session=ctx.session, question=params.question,
            options=params.options, turn_id=ctx.origin.turn_id, asked_by=ctx.subject.user,
            question_id=question_id)
        if item.status != "answered" or item.answer is None:
            return ToolResult.ok(
                "(no answer: the user did not answer in time; go on with what you know, "
                "or say what you need in your reply)", question_id=item.id,
                status=item.status, answered=False)
        return ToolResult.ok(item.answer, question_id=item.id, status=item.status,
                             answered=True)
