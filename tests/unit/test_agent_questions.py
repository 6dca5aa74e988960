"""`ask_user`: a real turn (fake Ollama on loopback) pauses on a question that the API lists
and answers; options, a second answer, unknown ids, the timeout, and the tool outside a turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from runtime.events import Event
from tests.fakes.agent_app import agent_app
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply


def tool_text(request: dict) -> str:
    text = str([m for m in request["messages"] if m["role"] == "tool"][-1]["content"])
    return text.split("\n\n[navi]")[0]  # without the loop's step notes


async def test_a_question_pauses_the_turn_until_answered(tmp_path: Path,
                                                        ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("ask_user", {"question": "Which colour?",
                                       "options": ["red", "blue"]})]),
        lambda req: Reply(content="You chose: " + tool_text(req)))
    async with agent_app(tmp_path, ollama.url) as app:
        token, session = await app.user_session()
        other_token, other_session = await app.user_session()
        await app.send(token, session, "paint it")
        asked = await app.until(session, "question")
        question = asked[-1].data
        assert question["question"] == "Which colour?"
        assert question["options"] == ["red", "blue"] and question["turn_id"]
        qid = question["question_id"]
        base = f"/v1/sessions/{session}/questions"
        pending = (await app.get(token, base)).json()
        assert [q["question_id"] for q in pending] == [qid]
        assert pending[0]["status"] == "pending"
        # another tenant sees neither the question nor the session
        assert (await app.get(other_token, base)).status_code == 404
        assert (await app.post(other_token, f"/v1/sessions/{other_session}/questions/{qid}",
                               json={"answer": "red"})).status_code == 404
        assert (await app.post(token, f"{base}/q_unknown", json={"answer": "red"})
                ).status_code == 404
        wrong = await app.post(token, f"{base}/{qid}", json={"answer": "green"})
        assert wrong.status_code == 422, wrong.text
        assert wrong.json()["error"]["options"] == ["red", "blue"]
        assert (await app.post(token, f"{base}/{qid}", json={"answer": ""})).status_code == 422
        ok = await app.post(token, f"{base}/{qid}", json={"answer": "blue"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["status"] == "answered" and ok.json()["answer"] == "blue"
        again = await app.post(token, f"{base}/{qid}", json={"answer": "red"})
        assert again.status_code == 409, again.text
        events = await app.until(session)
        assert (await app.get(token, base)).json() == []
        audit = await app.audit(session)
    end = events[-1]
    assert end.type == "stream_end" and end.data["content"] == "You chose: blue"
    (result,) = [e.data for e in events if e.type == "tool_result"]
    assert result["tool"] == "ask_user" and result["success"] is True
    actions = [(r["action"], r["object"]) for r in audit if r["kind"] == "action"]
    assert ("question.ask", qid) in actions and ("question.answer", qid) in actions
    assert actions.index(("question.ask", qid)) < actions.index(("question.answer", qid))
    assert all("blue" not in (r.get("detail") or "") for r in audit)  # digests, not text


async def test_an_unanswered_question_times_out(tmp_path: Path, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("ask_user", {"question": "Anyone there?"})]),
                     lambda req: Reply(content="Tool: " + tool_text(req)))
    async with agent_app(tmp_path, ollama.url, question_timeout_s=0.5) as app:
        token, session = await app.user_session()
        await app.send(token, session, "ask me")
        events = await app.until(session)
        qid = next(e.data["question_id"] for e in events if e.type == "question")
        late = await app.post(token, f"/v1/sessions/{session}/questions/{qid}",
                              json={"answer": "too late"})
    assert late.status_code == 409, late.text
    assert "no answer" in events[-1].data["content"]
    ended = [e.data for e in events if e.type == "question_answered"]
    assert ended == [{"question_id": qid, "status": "expired", "turn_id": ended[0]["turn_id"]}]


async def test_ask_user_outside_a_turn_is_400(tmp_path: Path, ollama: FakeOllama) -> None:
    async with agent_app(tmp_path, ollama.url) as app:
        token, session = await app.user_session()
        resp = await app.post(token, f"/v1/sessions/{session}/exec",
                              json={"tool": "ask_user", "args": {"question": "hello?"}})
        assert resp.status_code == 400, resp.text
        assert "agent turn" in resp.json()["error"]["message"]
        assert (await app.get(token, f"/v1/sessions/{session}/questions")).json() == []


async def test_cancelling_the_turn_ends_its_question(tmp_path: Path,
                                                     ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("ask_user", {"question": "Wait?"})]))
    async with agent_app(tmp_path, ollama.url) as app:
        token, session = await app.user_session()
        await app.send(token, session, "ask")
        await app.until(session, "question")
        seen: list[Event] = []
        watcher = asyncio.create_task(app.until(session, "question_answered",
                                                on_event=seen.append))
        await asyncio.sleep(0.05)
        assert (await app.call(token, "DELETE", f"/v1/sessions/{session}/turn")
                ).status_code == 200
        await asyncio.wait_for(watcher, 10)
        assert seen[-1].data["status"] == "cancelled"
        assert (await app.get(token, f"/v1/sessions/{session}/questions")).json() == []
