"""The open session's heading and tabs in Chromium (README "The web client"): the profiles it
may switch to with the active one shown, a title from the first message that can be renamed
by keyboard and survives a reload, and the Audit tab with the session's own records."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Tenant
from tests.browser.ui import new_session, run_code, sign_in, snap
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Reply

pytestmark = pytest.mark.browser


def test_profile_switch_shows_the_active_one_and_the_next_call_runs_under_it(
        page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    sid = new_session(page)
    select = page.get_by_label("Runs under")
    page.wait_for_function(
        "() => document.querySelectorAll('#session-profile option').length === 2")
    assert select.locator("option").all_inner_texts() == ["developer", "reviewer"]
    assert select.input_value() == "developer"
    select.select_option("reviewer")
    page.locator(".toast", has_text="now runs under the profile reviewer").wait_for()
    current = page.locator(f".session-open[data-session-id='{sid}'] .session-meta")
    assert current.inner_text().startswith("reviewer ·")
    run_code(page, "print('hi')")  # reviewer may not run code: the policy says so
    page.locator(".toast.error", has_text="not named by profile 'reviewer'").wait_for()
    with server.client(tenant.user) as client:
        assert client.get(f"/v1/sessions/{sid}").json()["profile"] == "reviewer"
    snap(page, "profile_switched")
    page.reload()
    page.locator("#conn[data-state=open]").wait_for()
    page.wait_for_function("() => document.querySelector('#session-profile').value === 'reviewer'")


def test_a_new_session_takes_a_profile_from_the_list_it_may_use(
        page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    choice = page.get_by_label("Profile", exact=True)
    page.wait_for_function("() => document.querySelectorAll('#profile-input option').length === 2")
    assert [o.split(" — ")[0] for o in choice.locator("option").all_inner_texts()] == [
        "developer", "reviewer"]  # the tenant's profiles for this role, not free text
    assert choice.input_value() == "developer"  # the tenant's default, selected
    sid = new_session(page, profile="reviewer")
    with server.client(tenant.user) as client:
        assert client.get(f"/v1/sessions/{sid}").json()["profile"] == "reviewer"
    page.wait_for_function("() => document.querySelector('#session-profile').value === 'reviewer'")


def test_title_from_the_first_message_renamed_by_keyboard_survives_reload(
        page, server: Server, tenant: Tenant, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="It rains a lot in November."))
    sign_in(page, tenant.user)
    sid = new_session(page)
    title = page.locator("#chat-title")
    assert title.inner_text() == f"Session {sid[-6:]}"
    first = "<b>Rainfall</b> in Lisbon, month by month"
    page.get_by_label("Message to the agent").fill(first)
    page.keyboard.press("Enter")  # Enter sends
    page.wait_for_function("t => document.querySelector('#chat-title').textContent === t",
                           arg=first)
    entry = page.locator(f".session-open[data-session-id='{sid}'] .session-title")
    assert entry.inner_text() == first  # untrusted text: shown as text, never as HTML
    assert page.locator("#chat-title b, .session-list b").count() == 0
    # Rename by keyboard: Escape cancels and gives the focus back, Enter saves.
    rename = page.get_by_role("button", name="Rename")
    rename.focus()
    page.keyboard.press("Enter")
    box = page.get_by_label("Session title")
    assert box.evaluate("el => el === document.activeElement")
    box.fill("Thrown away")
    page.keyboard.press("Escape")
    assert box.is_hidden() and title.inner_text() == first
    assert rename.evaluate("el => el === document.activeElement")
    page.keyboard.press("Enter")
    box.fill("Lisbon rainfall study")
    snap(page, "rename_open")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => document.querySelector('#chat-title').textContent === 'Lisbon rainfall study'")
    assert entry.inner_text() == "Lisbon rainfall study"
    # A bad title is refused with the server's reason, and nothing changes.
    rename.click()
    box.fill("   ")
    page.keyboard.press("Enter")
    assert not box.is_hidden()  # an empty title is not sent
    page.keyboard.press("Escape")
    page.reload()
    page.locator("#conn[data-state=open]").wait_for()
    assert title.inner_text() == "Lisbon rainfall study"
    assert entry.inner_text() == "Lisbon rainfall study"


def test_audit_tab_lists_the_sessions_records(page, server: Server, tenant: Tenant) -> None:
    admin = tenant.token(server, "tenant_admin")
    sign_in(page, admin)
    sid = new_session(page)
    other = new_session(page)
    page.get_by_role("button", name="Rename").click()
    page.get_by_label("Session title").fill("Second one")
    page.keyboard.press("Enter")
    page.locator("#chat-title", has_text="Second one").wait_for()
    tab = page.get_by_role("tab", name="Audit")
    tab.click()
    page.locator("#session-audit-status", has_text="records of this session").wait_for()
    rows = page.locator("#session-audit-rows tr")
    actions = rows.locator("td:nth-child(4)").all_inner_texts()
    assert actions == ["session.update", "session.create"]  # newest first, only this one's
    assert page.locator("#composer").is_hidden() and page.locator("#timeline-slot").is_hidden()
    snap(page, "session_audit_tab")
    page.keyboard.press("ArrowLeft")  # the tabs move with the arrow keys
    assert page.get_by_role("tab", name="Chat").get_attribute("aria-selected") == "true"
    assert page.locator("#composer").is_visible()
    page.locator(f".session-open[data-session-id='{sid}']").click()
    page.locator("#conn[data-state=open]").wait_for()
    tab.click()
    page.locator("#session-audit-status", has_text="1 record of this session").wait_for()
    assert rows.locator("td:nth-child(4)").all_inner_texts() == ["session.create"]
    assert other != sid


def focused(page) -> str:  # noqa: ANN001
    return str(page.evaluate("document.activeElement.id || document.activeElement.className"))


def test_audit_tab_tells_a_user_it_may_not_read(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    sid = new_session(page)
    # Tab order through the heading, with a visible focus ring on each stop.
    page.get_by_role("button", name="Rename").focus()
    stops = []
    for _ in range(4):
        page.keyboard.press("Tab")
        stops.append(focused(page))
        ring = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert ring == "solid", (stops[-1], ring)
    assert stops == ["session-profile", "tab-chat", "timeline", "message-input"]
    # Escape takes back an armed "Delete?".
    delete = page.locator(f".session-open[data-session-id='{sid}'] + button")
    delete.focus()
    page.keyboard.press("Enter")
    assert delete.inner_text() == "Delete?"
    page.keyboard.press("Escape")
    assert delete.inner_text() == "✕"
    page.keyboard.press("Enter")
    assert delete.inner_text() == "Delete?"  # asks again: nothing was deleted
    page.keyboard.press("Escape")
    page.get_by_role("tab", name="Audit").click()
    page.locator("#session-audit-status",
                 has_text="role may not read the audit log").wait_for()
    assert page.locator("#session-audit-rows tr").count() == 0
    assert page.locator("#session-audit .table-wrap").is_hidden()
    snap(page, "session_audit_denied")
