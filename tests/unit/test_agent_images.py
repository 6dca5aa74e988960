"""Images sent with a message reach the model: Ollama's `images` and OpenAI's `image_url`
parts, through the real API in-process and the fake model servers on loopback; a model
without vision gets a notice instead; bad images are refused before the turn starts."""

from __future__ import annotations

import base64
from pathlib import Path

from tests.fakes.agent_app import agent_app
from tests.fakes.ollama import FakeOllama
from tests.fakes.openai import FakeOpenAI
from tests.fakes.script import Reply

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
GIF = b"GIF89a" + b"\x01" * 40


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def user_message(request: dict) -> dict:
    return [m for m in request["messages"] if m["role"] == "user"][-1]


async def test_images_reach_ollama_and_are_files_of_the_session(tmp_path: Path) -> None:
    with FakeOllama([Reply(content="a tiny image"), Reply(content="later")],
                    vision=True) as fake:
        async with agent_app(tmp_path, fake.url) as app:
            token, session = await app.user_session()
            put = await app.call(token, "PUT", f"/v1/sessions/{session}/files/pic.gif",
                                 content=GIF)
            assert put.status_code in (200, 201), put.text
            await app.send(token, session, "what is this?", images=[
                {"data": b64(PNG), "mime": "image/png"}, {"path": "pic.gif"}])
            events = await app.until(session)
            rows = (await app.get(token, f"/v1/sessions/{session}/messages")).json()
            stored = rows[0]["meta"]["images"]
            listing = (await app.get(token, f"/v1/sessions/{session}/files",
                                     params={"path": "uploads"})).json()
            await app.send(token, session, "and now?")
            await app.until(session, after=events[-1].id)
    assert events[-1].data["content"] == "a tiny image"
    first = user_message(fake.model.requests[0])
    assert first["images"] == [b64(PNG), b64(GIF)]
    assert [i["media_type"] for i in stored] == ["image/png", "image/gif"]
    assert stored[1]["path"] == "pic.gif" and stored[0]["path"].startswith("uploads/")
    assert [e["path"] for e in listing] == [stored[0]["path"]]
    # the next turn does not send them again (its context names them only)
    assert all("images" not in m for m in fake.model.requests[1]["messages"])


async def test_images_reach_an_openai_compatible_server(tmp_path: Path) -> None:
    with FakeOpenAI([Reply(content="seen")]) as fake:
        async with agent_app(tmp_path, openai=fake.url + "/v1", model="fake-model") as app:
            token, session = await app.user_session()
            await app.send(token, session, "look", images=[{"data": b64(PNG),
                                                             "mime": "image/png"}])
            events = await app.until(session)
    assert events[-1].data.get("content") == "seen", events[-1].data
    parts = user_message(fake.model.requests[0])["content"]
    assert parts[0] == {"type": "text", "text": "look"}
    assert parts[1]["image_url"]["url"] == "data:image/png;base64," + b64(PNG)


async def test_a_model_without_vision_gets_a_notice(tmp_path: Path,
                                                    ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="text only"))
    async with agent_app(tmp_path, ollama.url) as app:
        token, session = await app.user_session()
        await app.send(token, session, "look", images=[{"data": b64(PNG), "mime": "image/png"}])
        events = await app.until(session)
    (notice,) = [e.data for e in events if e.type == "notice"]
    assert notice["phase"] == "images" and "cannot see images" in notice["message"]
    assert events[-1].data["content"] == "text only"
    sent = user_message(ollama.model.requests[0])
    assert "images" not in sent and "uploads/" in sent["content"]


async def test_bad_images_are_refused_before_a_turn(tmp_path: Path, ollama: FakeOllama) -> None:
    async with agent_app(tmp_path, ollama.url) as app:
        token, session = await app.user_session()
        url = f"/v1/sessions/{session}/messages"
        for images, status in [
            ([{"data": b64(b"not an image at all"), "mime": "image/png"}], 422),
            ([{"data": "%%%", "mime": "image/png"}], 422),
            ([{"data": b64(PNG)}], 422),                      # no mime
            ([{"path": "a.png", "data": b64(PNG), "mime": "image/png"}], 422),
            ([{"data": b64(PNG), "mime": "image/png"}] * 5, 422),
            ([{"data": b64(PNG), "mime": "text/html"}], 422),
            ([{"path": "missing.png"}], 404),
            ([{"path": "../etc/passwd"}], 400),
        ]:
            resp = await app.post(token, url, json={"content": "x", "images": images})
            assert resp.status_code == status, (images[0], resp.text)
        big = b"\x89PNG\r\n\x1a\n" + b"\x00" * (5 * 1024 * 1024)
        put = await app.call(token, "PUT", f"/v1/sessions/{session}/files/big.png", content=big)
        assert put.status_code in (200, 201), put.text
        resp = await app.post(token, url, json={"content": "x", "images": [{"path": "big.png"}]})
        assert resp.status_code == 413, resp.text
    assert ollama.model.requests == []  # no turn started
