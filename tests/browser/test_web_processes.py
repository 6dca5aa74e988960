"""The open session's background processes in Chromium: listed beside its files, their
output arriving live, a Stop button that ends them; a reload reads the output log again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import POLICY, Tenant
from tests.browser.ui import new_session, sign_in, snap
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = [pytest.mark.browser, pytest.mark.docker]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The browser tests' server (no agent needed here), given time to start on a busy
    machine."""
    srv = start_server(tmp_path_factory.mktemp("web-processes"), policy=POLICY, ready_s=120)
    yield srv
    stop_server(srv)


def test_processes_show_live_output_and_stop(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    sid = new_session(page)
    with server.client(tenant.user) as client:
        resp = client.post(f"/v1/sessions/{sid}/processes", json={
            "command": "echo first; sleep 2; echo 'second <b>not bold</b>'; sleep 600",
            "name": "ticker"})
        assert resp.status_code == 201, resp.text
        pid = resp.json()["id"]
    item = page.locator(f".process[data-process-id='{pid}']")
    item.wait_for(timeout=30_000)
    assert item.locator(".file-name").inner_text() == "ticker"
    out = item.locator(".process-output")
    page.wait_for_function(
        "el => el.textContent.includes('second <b>not bold</b>')", arg=out.element_handle(),
        timeout=30_000)  # arrived live, as text (never markup)
    assert out.inner_text().startswith("first\n")
    assert item.locator("b").count() == 0
    assert item.get_attribute("data-state") == "running"
    snap(page, "process_running")
    page.reload()
    page.locator("#conn[data-state=open]").wait_for()
    again = page.locator(f".process[data-process-id='{pid}'] .process-output")
    page.wait_for_function("el => el.textContent.includes('second')",
                           arg=again.element_handle(), timeout=30_000)  # from the log
    page.get_by_role("button", name="Stop ticker").click()
    page.locator(f".process[data-process-id='{pid}'][data-state='exited']").wait_for(
        timeout=30_000)
    state = page.locator(f".process[data-process-id='{pid}'] .process-state").inner_text()
    assert "stopped" in state
    assert page.get_by_role("button", name="Stop ticker").is_hidden()
    with server.client(tenant.user) as client:
        got = client.get(f"/v1/sessions/{sid}/processes/{pid}").json()
        assert got["reason"] == "stopped"
    snap(page, "process_stopped")
