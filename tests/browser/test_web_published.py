"""content_publish and share_file in the web client (real Chromium, real `navi serve`, the fake
Ollama driving the agent): published images, Markdown and HTML show inline under their tool
cards; the HTML page's scripts run but reach nothing (their fetches of the API, with and
without credentials, fail and no such request leaves the frame); the shared link is shown
with Copy link, the session's links are listed beside its files and Revoke ends one."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import Tenant
from tests.browser.test_web_workflows import png_bytes
from tests.browser.ui import new_session, sign_in, snap
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = pytest.mark.browser

PAGE = b"""<!doctype html><meta charset="utf-8"><title>report</title>
<style>body{font-family:sans-serif;background:#eef6ee}</style>
<h1>Quarterly report</h1><p id="ran">not run</p><p id="plain">-</p><p id="cred">-</p>
<p id="token">-</p><p id="origin">-</p><p id="storage">-</p>
<script>
document.getElementById('ran').textContent = 'script ran';
const say = (id, text) => { document.getElementById(id).textContent = text; };
say('origin', location.origin);
try { say('storage', 'READ ' + localStorage.getItem('navi.token')); }
catch (e) { say('storage', 'no storage: ' + e.name); }
fetch('/v1/sessions').then(r => say('plain', 'REACHED ' + r.status),
                           e => say('plain', 'blocked: ' + e.name));
fetch('/v1/sessions', {credentials: 'include'}).then(r => say('cred', 'REACHED ' + r.status),
                                                     e => say('cred', 'blocked: ' + e.name));
try { say('token', 'READ ' + parent.sessionStorage.getItem('navi.token')); }
catch (e) { say('token', 'no token: ' + e.name); }
new Image().src = '/v1/sessions?via=img';
</script>"""
MARKDOWN = b"# Findings\n\n| month | total |\n|---|---|\n| May | 42 |\n"


def test_published_content_and_shared_links(page: Any, server: Server, tenant: Tenant,
                                            ollama: FakeOllama) -> None:
    page.problems.allow(r"Refused to (connect|load)|Content Security Policy|"
                        r"sandboxed|Blocked script|Failed to fetch")
    ollama.model.add(
        Reply(calls=[Call("content_publish", {"path": "report/page.html"}),
                     Call("content_publish", {"path": "report/notes.md"}),
                     Call("content_publish", {"path": "report/plot.png"}),
                     Call("share_file", {"path": "report/data.csv"})]),
        Reply(content="Published the report and shared the data."))
    sign_in(page, tenant.user)
    session = new_session(page)
    with server.client(tenant.user) as api:
        for name, data in (("page.html", PAGE), ("notes.md", MARKDOWN),
                           ("plot.png", png_bytes(60, 40, (30, 90, 200))),
                           ("data.csv", b"month,total\nMay,42\n")):
            assert api.put(f"/v1/sessions/{session}/files/report/{name}",
                           content=data).status_code == 201
    seen: list[str] = []  # every request a frame other than the app's began
    page.on("request", lambda req: seen.append(req.url)
            if req.frame != page.main_frame else None)
    failed: list[str] = []
    page.on("requestfailed", lambda req: failed.append(f"{req.url} {req.failure}"))
    page.get_by_label("Message to the agent").fill("Publish the report")
    page.keyboard.press("Enter")
    page.locator(".msg.assistant", has_text="Published the report").wait_for(timeout=30_000)

    html = page.locator(".published-html iframe")
    html.wait_for()
    assert html.get_attribute("sandbox") == "allow-scripts"
    html.scroll_into_view_if_needed()
    frame = page.frame_locator(".published-html iframe")
    frame.locator("#ran", has_text="script ran").wait_for()
    frame.locator("#plain", has_text="blocked").wait_for()
    frame.locator("#cred", has_text="blocked").wait_for()
    assert frame.locator("#token").inner_text().startswith("no token: ")
    # shown from an origin of its own, never the API's (where the client keeps its token)
    own = frame.locator("#origin").inner_text()
    assert own != server.url and own.endswith(".localhost:" + own.rsplit(":", 1)[1]), own
    assert frame.locator("#storage").inner_text().startswith("no storage: ")
    page.wait_for_timeout(300)
    tried = [u for u in seen if "/v1/sessions" in u]
    assert tried and all(f"{u} csp" in failed for u in tried), (seen, failed)  # Chromium
    # stopped them itself; and none reached the server (it would have answered 401)
    assert not [line for line in server.log().splitlines() if '"http_request"' in line
                and '"/v1/sessions"' in line and '"status": 401' in line]
    snap(page, "published_html")
    # opened alone (the Open link): it moves to its own origin too, so a page of the
    # tenant's never shows under the API's address (no phishing for tokens there)
    page.evaluate("t => localStorage.setItem('navi.token', t)", tenant.user)  # bait
    alone = page.context.new_page()
    alone.goto(server.url + str(html.get_attribute("src")))
    alone.locator("#ran", has_text="script ran").wait_for()
    assert alone.url.startswith(own + "/") and not alone.url.startswith(server.url), alone.url
    assert alone.locator("#storage").inner_text().startswith("no storage: ")
    alone.close()

    table = page.locator(".published-markdown table")
    table.wait_for()
    assert page.locator(".published-markdown h1").inner_text() == "Findings"
    image = page.locator(".published-image img")
    page.wait_for_function("img => img.complete && img.naturalWidth === 60",
                           arg=image.element_handle())
    link = page.locator(".shared-link .shared-url")
    href = link.inner_text()
    assert href.startswith(server.url + "/v1/shared/")
    assert page.locator(".shared-link").get_by_role("button", name="Copy link").count() == 1
    with server.client() as anyone:
        assert anyone.get(href).content == b"month,total\nMay,42\n"

    shares = page.locator("#share-list li")
    shares.nth(3).wait_for()
    assert shares.count() == 4
    snap(page, "published_content")
    row = page.locator("#share-list li", has_text="report/data.csv")
    row.get_by_role("button", name="Revoke the link to report/data.csv").click()
    page.wait_for_function("() => document.querySelectorAll('#share-list li').length === 3")
    with server.client() as anyone:
        assert anyone.get(href).status_code == 404
