"""A JSON body sent without `Content-Type: application/json` (curl's `-d` alone sends form
data) is answered 422 with a message that says what to send, not only pydantic's words."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from runtime.api.errors import install_error_handlers


class Body(BaseModel):
    code: str


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/run")
    async def run(body: Body) -> dict[str, str]:
        return {"code": body.code}

    return app


async def _post(content_type: str | None, content: bytes) -> httpx.Response:
    headers = {"Content-Type": content_type} if content_type else {}
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.post("/run", content=content, headers=headers)


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", None])
async def test_a_json_body_without_the_json_header_is_told_what_to_send(
        content_type: str | None) -> None:
    resp = await _post(content_type, b'{"code": "1"}')
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["code"] == "invalid_request"
    assert "Content-Type: application/json" in error["message"], error


async def test_a_json_body_with_the_header_is_taken_and_its_errors_carry_no_hint() -> None:
    assert (await _post("application/json", b'{"code": "1"}')).json() == {"code": "1"}
    resp = await _post("application/json; charset=utf-8", b'{"code": 5}')
    assert resp.status_code == 422
    assert resp.json()["error"]["message"] == "body.code: Input should be a valid string"
