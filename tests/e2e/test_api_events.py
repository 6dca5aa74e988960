"""Session events over SSE (ids, Last-Event-ID resume) and WebSocket (header or first-message
auth), with runs that need no container (the `todo` tool) so they hold without an engine."""

from __future__ import annotations

import json

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.e2e.conftest import Server
from tests.e2e.sse import frames


@pytest.fixture(scope="module")
def user(server: Server) -> str:
    return server.tenant_with_user()[1]


def _session(server: Server, token: str) -> str:
    with server.client(token) as client:
        return str(client.post("/v1/sessions", json={}).json()["id"])


def _todo(server: Server, token: str, session: str, title: str) -> None:
    with server.client(token) as client:
        resp = client.post(f"/v1/sessions/{session}/exec",
                           json={"tool": "todo", "args": {"action": "add", "title": title}})
        assert resp.status_code == 200, resp.text


def _collect(server: Server, token: str, session: str, count: int,
             last_event_id: int | None = None) -> list[tuple[int | None, dict]]:
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
    got = []
    with server.client(token) as client, client.stream(
        "GET", f"/v1/sessions/{session}/events", headers=headers, timeout=10
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for frame in frames(resp):
            got.append(frame)
            if len(got) == count:
                break
    return got


def test_sse_replays_and_resumes_by_last_event_id(server: Server, user: str) -> None:
    session = _session(server, user)
    for i in range(3):
        _todo(server, user, session, f"item {i}")  # tool_call + tool_result each: ids 1..6
    everything = _collect(server, user, session, 6, last_event_id=0)
    ids = [i for i, _ in everything]
    assert ids == [1, 2, 3, 4, 5, 6]
    assert [d["type"] for _, d in everything] == ["tool_call", "tool_result"] * 3
    assert all(d["id"] == i for i, d in everything)
    resumed = _collect(server, user, session, 2, last_event_id=4)  # "reconnect" after id 4
    assert [i for i, _ in resumed] == [5, 6]
    assert resumed[1][1]["type"] == "tool_result" and resumed[1][1]["success"] is True


def test_sse_without_last_event_id_follows_live(server: Server, user: str) -> None:
    import threading
    import time

    session = _session(server, user)
    _todo(server, user, session, "before")  # not replayed to a fresh subscriber

    def later() -> None:
        time.sleep(0.5)
        _todo(server, user, session, "after")

    thread = threading.Thread(target=later)
    thread.start()
    got = _collect(server, user, session, 2)
    thread.join()
    assert [d["type"] for _, d in got] == ["tool_call", "tool_result"]
    assert got[0][1]["args"]["title"] == "after"


def _ws_url(server: Server, session: str) -> str:
    return server.url.replace("http://", "ws://") + f"/v1/sessions/{session}/ws"


def test_ws_streams_with_header_token(server: Server, user: str) -> None:
    session = _session(server, user)
    with connect(_ws_url(server, session) + "?after=0",
                 additional_headers={"Authorization": f"Bearer {user}"}) as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "ready"
        _todo(server, user, session, "over ws")
        call = json.loads(ws.recv(timeout=5))
        result = json.loads(ws.recv(timeout=5))
    assert call["type"] == "tool_call" and call["args"]["title"] == "over ws"
    assert result["type"] == "tool_result" and result["exec_id"] == call["exec_id"]


def test_ws_first_message_token(server: Server, user: str) -> None:
    session = _session(server, user)
    _todo(server, user, session, "earlier")
    with connect(_ws_url(server, session) + "?after=0") as ws:
        ws.send(json.dumps({"token": user}))
        assert json.loads(ws.recv(timeout=5))["type"] == "ready"
        assert json.loads(ws.recv(timeout=5))["type"] == "tool_call"  # replayed after id 0


@pytest.mark.parametrize("first", [{"token": "navi_wrong"}, {"nothing": 1}, "not json"])
def test_ws_bad_auth_is_refused(server: Server, user: str, first: object) -> None:
    session = _session(server, user)
    with connect(_ws_url(server, session)) as ws:
        ws.send(first if isinstance(first, str) else json.dumps(first))
        message = json.loads(ws.recv(timeout=5))
        assert message["type"] == "error" and message["code"] == "unauthorized"
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)


def test_ws_other_tenants_session_refused(server: Server, user: str) -> None:
    _, other = server.tenant_with_user()
    session = _session(server, other)
    with connect(_ws_url(server, session),
                 additional_headers={"Authorization": f"Bearer {user}"}) as ws:
        message = json.loads(ws.recv(timeout=5))
        assert message["type"] == "error" and message["code"] == "not_found"
