"""Preview links in Chromium: "Open preview" beside a process with a port opens its page in a
new tab on an origin of its own, whose scripts can read neither the web client's token
(kept in the API origin's storage) nor another preview's storage, nor call the API as the
user."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.conftest import Tenant
from tests.browser.ui import new_session, sign_in, snap
from tests.docker.test_processes_api import POLICY, wait_for
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = [pytest.mark.browser, pytest.mark.docker]
APP = (Path(__file__).resolve().parents[1] / "fakes" / "port_app.py").read_text()
PORT = 8188
READ_STORAGE = """() => ({
  session: sessionStorage.getItem("navi.token"), local: localStorage.getItem("navi.token"),
  mine: localStorage.getItem("mine"), cookie: document.cookie, opener: window.opener === null,
  origin: location.origin})"""
CALL_API = """async (api) => {
  try {
    const r = await fetch(api + "/v1/sessions", {credentials: "include"});
    return "status " + r.status;
  } catch (e) { return "blocked"; }
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose policy lets the developer profile declare ports."""
    srv = start_server(tmp_path_factory.mktemp("web-previews"), policy=POLICY, ready_s=120)
    yield srv
    stop_server(srv)


def test_a_preview_is_an_origin_of_its_own(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    sid = new_session(page)
    page.evaluate("t => localStorage.setItem('navi.token', t)", tenant.user)  # as bait
    with server.client(tenant.user) as client:
        assert client.put(f"/v1/sessions/{sid}/files/port_app.py",
                          content=APP.encode()).status_code == 201
        proc = client.post(f"/v1/sessions/{sid}/processes", json={
            "command": f"exec python3 port_app.py {PORT}", "name": "site", "ports": [PORT]})
        assert proc.status_code == 201, proc.text
        pid = proc.json()["id"]
        wait_for(lambda: client.get(f"/v1/sessions/{sid}/ports/{PORT}/x").status_code == 200,
                 60, "the port to answer")
        other = client.post(f"/v1/sessions/{sid}/previews", json={"port": PORT}).json()
    item = page.locator(f".process[data-process-id='{pid}']")
    item.wait_for(timeout=30_000)
    with page.context.expect_page() as opened:
        item.get_by_role("button", name=f"Open preview of port {PORT}").click()
    preview = opened.value
    preview.wait_for_url("**.localhost:*/**", timeout=30_000)
    preview.goto(preview.url.rstrip("/") + "/page")
    preview.locator("#t").wait_for()
    assert page.evaluate("sessionStorage.getItem('navi.token')") == tenant.user  # it is there
    seen = preview.evaluate(READ_STORAGE)
    assert seen["origin"] != server.url and ".localhost:" in seen["origin"], seen
    assert seen["session"] is None and seen["local"] is None, seen  # not the client's token
    assert seen["cookie"] == "" and seen["opener"] is True, seen
    assert preview.evaluate(CALL_API, server.url) in ("blocked", "status 401")
    preview.evaluate("localStorage.setItem('mine', 'one')")
    # another preview of the same port: another origin, its storage apart
    second = page.context.new_page()
    second.goto(other["url"] + "page")
    second.locator("#t").wait_for()
    theirs = second.evaluate(READ_STORAGE)
    assert theirs["origin"] != seen["origin"] and theirs["mine"] is None, theirs
    assert preview.evaluate(READ_STORAGE)["mine"] == "one"
    snap(preview, "preview_page")
    second.close()
    preview.close()
