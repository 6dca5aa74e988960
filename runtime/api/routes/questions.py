"""The agent's questions to its user (`ask_user`): list a session's pending ones, answer one.

Any token that may post messages in the session may answer (the same check as a message);
the answer is audited (`question.answer`: its digest and size) before the waiting tool gets
it. 404 for an unknown id (or another session's), 409 once answered or expired, 422 for an
answer that is not one of the offered options.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import Field

from runtime.api.deps import SessionUser, actor, get_services, owned_session
from runtime.api.schemas import StrictBody
from runtime.api.services import Services
from runtime.audit.records import sha256_hex
from runtime.errors import NotFound
from runtime.questions import MAX_ANSWER_CHARS, QuestionBroker

router = APIRouter(prefix="/v1/sessions", tags=["agent"])


class AnswerBody(StrictBody):
    answer: str = Field(min_length=1, max_length=MAX_ANSWER_CHARS)


def _broker(services: Services) -> QuestionBroker:
    if services.questions is None:
        raise NotFound("questions are not kept on this server")
    return services.questions


@router.get("/{session_id}/questions")
async def list_questions(session_id: str, request: Request, principal: SessionUser
                         ) -> list[dict[str, Any]]:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    return [q.public() for q in _broker(services).pending(record.tenant_id, record.id)]


@router.post("/{session_id}/questions/{question_id}")
async def answer_question(session_id: str, question_id: str, body: AnswerBody,
                          request: Request, principal: SessionUser) -> dict[str, Any]:
    services = get_services(request)
    record = await owned_session(services, principal, session_id)
    broker = _broker(services)
    broker.check_answer(record.tenant_id, record.id, question_id, body.answer)
    await services.executor.record_action(  # audited before the tool sees it (fail closed)
        actor(principal, record.tenant_id, session=record.id), "question.answer",
        question_id, rule=f"roles.{principal.role}",
        detail=f"sha256:{sha256_hex(body.answer.encode())} chars:{len(body.answer)}")
    item = broker.answer(record.tenant_id, record.id, question_id, body.answer,
                         by=principal.token_id)
    return item.public()
