"""'Undo this turn's file changes' in the web client: a turn that wrote files offers it (one
that only read does not); it asks first, restores the turn's snapshot, and the files view
follows; after a reload the control is there again (from the history and the snapshots)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Tenant
from tests.browser.ui import new_session, sign_in, snap
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = [pytest.mark.browser, pytest.mark.docker]


def ask_agent(page, text: str, answer: str) -> None:  # noqa: ANN001 - a Playwright page
    page.get_by_label("Message to the agent").fill(text)
    page.keyboard.press("Enter")
    page.locator(".msg.assistant:not(.streaming)", has_text=answer).wait_for(timeout=60_000)


def listed(page) -> list[str]:  # noqa: ANN001
    return [str(p) for p in page.locator("#file-list .file").evaluate_all(
        "items => items.map(i => i.dataset.path)")]


def test_undo_a_turns_file_changes(page, server: Server, tenant: Tenant,
                                   ollama: FakeOllama) -> None:
    sign_in(page, tenant.user)
    session = new_session(page)
    with server.client(tenant.user) as client:
        put = client.put(f"/v1/sessions/{session}/files/notes.txt", content=b"before")
        assert put.status_code == 201, put.text
    ollama.model.add(
        Reply(calls=[Call("filesystem", {"action": "read", "path": "notes.txt"})]),
        Reply(content="It says before."),
        Reply(calls=[Call("filesystem", {"action": "write", "path": "notes.txt",
                                         "content": "after"}),
                     Call("filesystem", {"action": "write", "path": "made.txt",
                                         "content": "new"})]),
        Reply(content="Rewrote notes.txt and made made.txt."))
    ask_agent(page, "What do the notes say?", "It says before.")
    ask_agent(page, "Rewrite the notes", "Rewrote notes.txt")
    undo = page.get_by_role("button", name="Undo this turn's file changes")
    undo.wait_for()
    assert undo.count() == 1  # the reading turn changed nothing: no control there
    page.locator("#file-list .file", has_text="made.txt").wait_for()
    # the control sits at the end of the turn that wrote, after its answer
    assert page.locator(".turn-end:not([hidden])").evaluate(
        "el => el.previousElementSibling.textContent").find("Rewrote notes.txt") >= 0
    snap(page, "turn_undo_offered")

    undo.click()  # asks first
    page.locator(".turn-end .undo-question").wait_for()
    snap(page, "turn_undo_asks")
    page.get_by_role("button", name="Undo file changes", exact=True).click()
    page.locator(".turn-end .undo-done").wait_for()
    page.wait_for_function(
        "() => ![...document.querySelectorAll('#file-list .file')]"
        ".some(f => f.dataset.path === 'made.txt')")
    assert listed(page) == ["notes.txt"]
    with server.client(tenant.user) as client:
        assert client.get(f"/v1/sessions/{session}/files/notes.txt").content == b"before"
    snap(page, "turn_undo_done")

    page.reload()  # rebuilt from the history: the turn offers its undo again, once
    page.locator("#conn[data-state=open]").wait_for()
    page.get_by_role("button", name="Undo this turn's file changes").wait_for()
    page.wait_for_timeout(500)
    assert page.get_by_role("button", name="Undo this turn's file changes").count() == 1


def test_cancel_keeps_the_files(page, server: Server, tenant: Tenant,
                                ollama: FakeOllama) -> None:
    sign_in(page, tenant.user)
    session = new_session(page)
    ollama.model.add(
        Reply(calls=[Call("filesystem", {"action": "write", "path": "kept.txt",
                                         "content": "kept"})]),
        Reply(content="Wrote kept.txt."))
    ask_agent(page, "Write a file", "Wrote kept.txt.")
    page.get_by_role("button", name="Undo this turn's file changes").click()
    page.get_by_role("button", name="Cancel").click()
    page.get_by_role("button", name="Undo this turn's file changes").wait_for()
    page.locator("#file-list .file", has_text="kept.txt").wait_for()
    with server.client(tenant.user) as client:
        assert client.get(f"/v1/sessions/{session}/files/kept.txt").content == b"kept"
