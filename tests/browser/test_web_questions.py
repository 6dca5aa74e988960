"""The agent's questions in the web client: `ask_user` shows a card with the question and its
options (or a text field); the user's click or text answers it and the turn goes on."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Tenant
from tests.browser.ui import new_session, sign_in, snap
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = [pytest.mark.browser, pytest.mark.docker]


def answered(request: dict) -> str:
    text = str([m for m in request["messages"] if m["role"] == "tool"][-1]["content"])
    return text.split("\n\n[navi]")[0]


def test_the_question_card_answers_the_agent(page, server: Server, tenant: Tenant,
                                             ollama: FakeOllama) -> None:
    sign_in(page, tenant.user)
    new_session(page)
    ollama.model.add(
        Reply(calls=[Call("ask_user", {"question": "Which colour should the chart use?",
                                       "options": ["red", "blue"]})]),
        lambda req: Reply(content="Chart colour: " + answered(req)),
        Reply(calls=[Call("ask_user", {"question": "What title?"})]),
        lambda req: Reply(content="Title set to " + answered(req)))
    page.get_by_label("Message to the agent").fill("Make a chart")
    page.keyboard.press("Enter")
    card = page.get_by_role("region", name="Question from the agent")
    card.wait_for(timeout=60_000)
    assert "Which colour should the chart use?" in card.inner_text()
    snap(page, "question_options")
    card.get_by_role("button", name="blue").click()
    page.locator(".msg.assistant:not(.streaming)", has_text="Chart colour: blue").wait_for(
        timeout=60_000)
    assert "Answered: blue" in card.inner_text()

    page.get_by_label("Message to the agent").fill("Now a title")
    page.keyboard.press("Enter")
    second = page.locator(".card.question:not(.ended)")
    second.wait_for(timeout=60_000)
    second.get_by_label("Your answer").fill("Sales 2026")
    second.get_by_role("button", name="Answer").click()
    page.locator(".msg.assistant:not(.streaming)", has_text="Title set to Sales 2026").wait_for(
        timeout=60_000)
    snap(page, "question_answered")
