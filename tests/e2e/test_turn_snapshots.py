"""Agent turns snapshot the session before their first file change (`turn-<turn id>`, the
last 10 kept): a real `navi serve`, the fake Ollama scripting the tool calls, real Docker for
`code_exec`; everything observed over the public API."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_agent_api import send, watch
from tests.fakes.agent_harness import POLICY, PROFILES
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ollama: FakeOllama) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("turns"), policy=POLICY, extra_env={
        "NAVI_OLLAMA_HOST": ollama.url, "NAVI_PROFILES_DIR": str(PROFILES),
        "NAVI_MODEL": "gemma3:270m", "NAVI_OPENAI_BASE_URL": "", "NAVI_EMBEDDED_MODEL": "off"})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def user(server: Server) -> str:
    return server.tenant_with_user()[1]


@pytest.fixture()
def session(server: Server, user: str) -> str:
    with server.client(user) as client:
        resp = client.post("/v1/sessions")
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])


SEEN: dict[str, int] = {}  # session -> the last event id a test has read


def turn(server: Server, user: str, session: str, ollama: FakeOllama, *calls: Call
         ) -> tuple[str, list[dict[str, Any]]]:
    """One turn making ``calls`` (one step), then answering; its id and events."""
    ollama.model.add(Reply(calls=list(calls)), Reply(content="done"))
    turn_id = send(server, user, session, "go")
    events = watch(server, user, session, after=SEEN.get(session, 0), timeout=120)
    SEEN[session] = int(events[-1]["_id"])
    assert events[-1]["type"] == "stream_end" and events[-1]["turn_id"] == turn_id, events[-1]
    return turn_id, events


def snapshots(server: Server, user: str, session: str) -> list[dict[str, Any]]:
    with server.client(user) as client:
        resp = client.get(f"/v1/sessions/{session}/snapshots")
    assert resp.status_code == 200, resp.text
    return list(resp.json())


def read(server: Server, user: str, session: str, path: str) -> bytes | None:
    with server.client(user) as client:
        resp = client.get(f"/v1/sessions/{session}/files/{path}")
    if resp.status_code == 404:
        return None
    assert resp.status_code == 200, resp.text
    return resp.content


def write(path: str, content: str) -> Call:
    return Call("filesystem", {"action": "write", "path": path, "content": content})


def test_a_turn_that_writes_is_undone_by_its_snapshot(server: Server, user: str, session: str,
                                                     ollama: FakeOllama) -> None:
    with server.client(user) as client:
        assert client.put(f"/v1/sessions/{session}/files/keep.txt",
                          content=b"before").status_code == 201
    reader, events = turn(server, user, session, ollama,
                          Call("filesystem", {"action": "read", "path": "keep.txt"}),
                          Call("code_exec", {"language": "bash", "code": "touch x"}))
    results = [e for e in events if e["type"] == "tool_result"]
    assert [r.get("code") for r in results] == [None, "policy_denied"], results
    # reading changes nothing, a call the policy denies neither: no snapshot
    assert snapshots(server, user, session) == []
    turn_id, events = turn(server, user, session, ollama, write("keep.txt", "after"),
                           write("new/made.txt", "new"),
                           Call("filesystem", {"action": "delete", "path": "keep.txt"}),
                           write("keep.txt", "after again"))
    assert [e["success"] for e in events if e["type"] == "tool_result"] == [True] * 4
    taken = snapshots(server, user, session)
    assert [s["name"] for s in taken] == [f"turn-{turn_id}"]  # one per turn, not per call
    assert read(server, user, session, "keep.txt") == b"after again"
    assert read(server, user, session, "new/made.txt") == b"new"
    with server.client(user) as client:
        resp = client.post(f"/v1/sessions/{session}/snapshots/{taken[0]['id']}/restore")
        assert resp.status_code == 200, resp.text
    assert read(server, user, session, "keep.txt") == b"before"  # the turn is undone
    assert read(server, user, session, "new/made.txt") is None
    assert reader != turn_id


def test_code_exec_counts_as_a_file_change(server: Server, user: str, session: str,
                                          ollama: FakeOllama) -> None:
    turn_id, events = turn(server, user, session, ollama, Call("code_exec", {
        "language": "python", "code": "open('out.txt', 'w').write('from code')"}))
    assert [e["success"] for e in events if e["type"] == "tool_result"] == [True]
    assert [s["name"] for s in snapshots(server, user, session)] == [f"turn-{turn_id}"]
    assert read(server, user, session, "out.txt") == b"from code"
    with server.client(user) as client:
        sid = snapshots(server, user, session)[0]["id"]
        assert client.post(f"/v1/sessions/{session}/snapshots/{sid}/restore").status_code \
            == 200
    assert read(server, user, session, "out.txt") is None


def test_eleven_turns_keep_the_last_ten(server: Server, user: str, session: str,
                                        ollama: FakeOllama) -> None:
    with server.client(user) as client:  # a snapshot of the user's own is never pruned
        own = client.post(f"/v1/sessions/{session}/snapshots", json={"name": "mine"})
        assert own.status_code == 201, own.text
    turns = [turn(server, user, session, ollama, write(f"f{n}.txt", str(n)))[0]
             for n in range(11)]
    names = [s["name"] for s in snapshots(server, user, session)]
    assert sorted(names) == sorted(["mine"] + [f"turn-{t}" for t in turns[1:]])
