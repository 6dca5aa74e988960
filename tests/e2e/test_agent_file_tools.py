"""The file tools an agent without code execution has, through a real turn: a real `navi
serve` and the scripted fake model drive the `secretary` profile (the default policy denies
it every exec tool), which surveys and searches the session's files and /tmp with `tree`,
`glob` and `grep`, and reads and edits a notebook. No container runs: each answer comes
from the workspace layer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Server, start_server, stop_server
from tests.e2e.test_agent_api import new_session, send, watch
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ollama: FakeOllama) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("file-tools"), extra_env={
        "NAVI_OLLAMA_HOST": ollama.url, "NAVI_MODEL": "gemma3:270m",
        "NAVI_OPENAI_BASE_URL": "", "NAVI_EMBEDDED_MODEL": "off"}, ready_s=120)
    yield srv
    stop_server(srv)


def turn(server: Server, ollama: FakeOllama, token: str, session: str, message: str,
         *replies: Any) -> list[dict[str, Any]]:
    ollama.model.add(*replies)
    send(server, token, session, message)
    events = watch(server, token, session, timeout=60)
    assert events[-1]["type"] == "stream_end", events[-1]
    assert ollama.model.remaining() == 0, "the scripted replies were not all used"
    return events


def results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["tool"]: e for e in events if e["type"] == "tool_result"}


def upload(server: Server, token: str, session: str, files: dict[str, str]) -> None:
    with server.client(token) as client:
        for path, body in files.items():
            resp = client.put(f"/v1/sessions/{session}/files/{path}", content=body.encode())
            assert resp.status_code == 201, resp.text


def test_the_secretary_searches_files_without_a_container(
        server: Server, ollama: FakeOllama) -> None:
    _, user = server.tenant_with_user()
    session = new_session(server, user, profile="secretary")
    upload(server, user, session, {
        "notes/monday.md": "call the bank\nTODO: pay rent\n",
        "notes/tuesday.md": "nothing pending\n",
        "letters/draft.txt": "Dear landlord, the rent TODO\n",
        "/tmp/scratch/todo.txt": "TODO: tmp item\n"})
    events = turn(
        server, ollama, user, session, "what is still to do?",
        Reply(calls=[Call("tree", {"depth": 2})]),
        Reply(calls=[Call("glob", {"pattern": "*.md"})]),
        Reply(calls=[Call("grep", {"pattern": "^todo:", "ignore_case": True,
                                   "glob": "*.md"})]),
        Reply(calls=[Call("grep", {"pattern": "TODO", "path": "/tmp"})]),
        Reply(content="Pay the rent."))
    done = results(events)
    assert all(r["success"] for r in done.values()), done
    assert done["tree"]["output"].splitlines() == [
        "./", "  letters/", "    draft.txt  (29 B)", "  notes/", "    monday.md  (29 B)",
        "    tuesday.md  (16 B)"]
    assert done["glob"]["output"] == "notes/monday.md\nnotes/tuesday.md"
    assert [e["args"] for e in events if e["type"] == "tool_call" and e["tool"] == "grep"][1] \
        == {"pattern": "TODO", "path": "/tmp"}
    grep_outputs = [e["output"] for e in events
                    if e["type"] == "tool_result" and e["tool"] == "grep"]
    assert grep_outputs[0].startswith("notes/monday.md:2: TODO: pay rent\n")
    assert grep_outputs[1].startswith("/tmp/scratch/todo.txt:1: TODO: tmp item\n")
    assert all(r.get("exit_code") is None for r in done.values())  # no sandboxed run
    assert events[-1]["content"] == "Pay the rent."


def test_the_secretary_reads_and_edits_a_notebook(server: Server, ollama: FakeOllama) -> None:
    _, user = server.tenant_with_user()
    session = new_session(server, user, profile="secretary")
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
          "cells": [{"id": "c1", "cell_type": "code", "metadata": {}, "source": "x = 41",
                     "outputs": [], "execution_count": None}]}
    upload(server, user, session, {"calc.ipynb": json.dumps(nb)})
    events = turn(
        server, ollama, user, session, "fix the notebook",
        Reply(calls=[Call("notebook_read", {"path": "calc.ipynb"})]),
        Reply(calls=[Call("notebook_edit", {"path": "calc.ipynb", "cell": 0,
                                            "action": "replace", "source": "x = 42"})]),
        Reply(calls=[Call("notebook_edit", {"path": "calc.ipynb", "cell": 0,
                                            "action": "insert", "source": "# The answer",
                                            "cell_type": "markdown"})]),
        Reply(content="Fixed."))
    done = [e for e in events if e["type"] == "tool_result"]
    assert [e["success"] for e in done] == [True, True, True], done
    assert "--- cell 0 (code)\nx = 41" in done[0]["output"]
    assert done[2]["output"] == "inserted cell 1 (markdown); calc.ipynb now has 2 cells"
    with server.client(user) as client:
        saved = client.get(f"/v1/sessions/{session}/files/calc.ipynb")
    cells = json.loads(saved.content)["cells"]
    assert [(c["cell_type"], "".join(c["source"])) for c in cells] == [("code", "x = 42"),
                                                                      ("markdown", "# The answer")]
