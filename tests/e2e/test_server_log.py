"""`navi serve` with `NAVI_LOG_FORMAT=json` (what the fixture sets) writes JSON lines only —
uvicorn's own lines included — and one `http_request` line per request, after its answer,
with who asked (tenant, token id) and never the token itself."""

from __future__ import annotations

import json
import time

from tests.e2e.conftest import Server


def _lines(server: Server) -> list[dict[str, object]]:
    lines = [line for line in server.log().splitlines() if line.strip()]
    parsed = []
    for line in lines:
        entry = json.loads(line)  # a plain-text line fails here
        assert isinstance(entry, dict), line
        parsed.append(entry)
    return parsed


def _requests(server: Server, path: str) -> list[dict[str, object]]:
    deadline = time.monotonic() + 5  # written once the answer is out
    while True:
        found = [e for e in _lines(server) if e["event"] == "http_request" and e["path"] == path]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_every_line_is_json_and_each_request_is_logged_once(server: Server) -> None:
    tenant, token = server.tenant_with_user()
    with server.client(token) as user:
        session = user.post("/v1/sessions", json={}).json()["id"]
        assert user.get(f"/v1/sessions/{session}").status_code == 200
    with server.client("navi_not_a_real_token_0123456789") as stranger:
        assert stranger.get(f"/v1/sessions/{session}/files").status_code == 401

    (ok,) = _requests(server, f"/v1/sessions/{session}")
    assert ok["method"] == "GET" and ok["status"] == 200 and ok["tenant"] == tenant
    assert str(ok["token"]).startswith("k_") and isinstance(ok["ms"], float)
    (refused,) = _requests(server, f"/v1/sessions/{session}/files")
    assert refused["status"] == 401 and "tenant" not in refused

    entries = _lines(server)
    assert any(e.get("logger") == "uvicorn.error" for e in entries)  # uvicorn's, as JSON
    text = server.log()
    assert token not in text and server.admin_token not in text
