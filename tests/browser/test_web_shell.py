"""The web client's shell in a real Chromium: serving with a strict CSP, token sign-in and
sign-out, roles, keyboard use, labels and visible focus. No sandbox runs here."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.browser.conftest import Tenant
from tests.browser.ui import new_session, sign_in
from tests.e2e.conftest import Server

pytestmark = pytest.mark.browser


def test_index_and_assets_carry_a_strict_csp(server: Server) -> None:
    for path in ("/", "/web/js/app.js", "/web/css/app.css"):
        resp = httpx.get(server.url + path)
        assert resp.status_code == 200, path
        csp = resp.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert resp.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(server.url + "/web/js/app.js").headers["content-type"].startswith(
        "text/javascript")
    html = httpx.get(server.url + "/").text
    assert re.findall(r"<script(?![^>]*\ssrc=)", html) == []  # no inline script
    assert re.findall(r"\son[a-z]+\s*=", html) == []  # no inline event handlers
    assert re.findall(r"\sstyle\s*=", html) == []  # no inline styles


@pytest.mark.parametrize("path", ["/web/../pyproject.toml", "/web/%2e%2e/pyproject.toml",
                                  "/web/js/missing.js", "/web/", "/web/js"])
def test_only_shipped_files_are_served(server: Server, path: str) -> None:
    resp = httpx.get(server.url + path)
    assert resp.status_code == 404
    assert "navi-runtime" not in resp.text


def test_web_routes_stay_out_of_the_api_document(server: Server) -> None:
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    assert all(p.startswith("/v1/") for p in paths)


def test_bad_token_is_refused_then_user_signs_in(page, server: Server, tenant: Tenant) -> None:
    page.goto("/")
    page.get_by_label("Access token").fill("navi_not_a_real_token_0000000000")
    page.locator("#signin-form button[type=submit]").click()
    page.get_by_text("That token was not accepted.").wait_for()
    assert page.evaluate("sessionStorage.length") == 0

    sign_in(page, tenant.user)
    assert page.locator("#role").inner_text() == "Signed in · user"
    assert page.locator("#nav").is_hidden()  # a user has no audit view
    assert tenant.user not in page.url
    assert page.evaluate("sessionStorage.getItem('navi.token')") == tenant.user
    assert page.evaluate("localStorage.length") == 0

    page.reload()  # the token survives a reload of the tab ...
    page.locator("#signout").wait_for(state="visible")
    page.locator("#signout").click()  # ... and is gone after signing out
    page.get_by_label("Access token").wait_for()
    assert page.evaluate("sessionStorage.getItem('navi.token')") is None


def test_keyboard_only_sign_in_and_new_session(page, server: Server, tenant: Tenant) -> None:
    page.goto("/")
    page.get_by_label("Access token").wait_for()
    assert page.evaluate("document.activeElement.id") == "token-input"
    page.keyboard.type(tenant.user)
    page.keyboard.press("Enter")
    page.locator("#signout").wait_for(state="visible")

    new_session_button = page.get_by_role("button", name="New session")
    for _ in range(30):  # Tab through the page until the button has focus
        if page.evaluate("document.activeElement.textContent.trim()") == "New session":
            break
        page.keyboard.press("Tab")
    else:
        pytest.fail("'New session' cannot be reached with Tab")
    outline = new_session_button.evaluate(
        "el => { const s = getComputedStyle(el); return [s.outlineStyle, s.outlineWidth]; }")
    assert outline[0] != "none" and outline[1] != "0px", "focus is not visible"
    page.keyboard.press("Enter")
    page.locator(".session-open[aria-current=true]").wait_for()
    page.locator("#conn[data-state=open]").wait_for()
    page.wait_for_function("() => document.activeElement.id === 'message-input'")  # next step


def test_every_control_has_a_label(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    new_session(page)
    unlabeled = page.evaluate("""() => [...document.querySelectorAll(
        'input, select, textarea, button')].filter(el => el.offsetParent !== null).filter(el => {
          if (el.tagName === 'BUTTON') return !(el.getAttribute('aria-label')
                                                || el.textContent.trim());
          return !(el.labels && el.labels.length) && !el.getAttribute('aria-label');
        }).map(el => el.outerHTML)""")
    assert unlabeled == []


def test_text_has_readable_contrast(page, server: Server, tenant: Tenant) -> None:
    """WCAG AA (4.5:1) for the main text colours against their backgrounds."""
    sign_in(page, tenant.user)
    new_session(page)
    ratios = page.evaluate("""() => {
      const lum = c => { const [r, g, b] = c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number)
        .map(v => v / 255).map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
        return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
      const bg = el => { for (; el; el = el.parentElement) { const c = getComputedStyle(el)
        .backgroundColor; if (c && !c.startsWith('rgba(0, 0, 0, 0)')) return c; }
        return 'rgb(255, 255, 255)'; };
      const out = {};
      for (const sel of ['.brand', '#role', '.session-title', '.session-meta', 'label',
                         '#chat-title', '.muted', 'button.primary', '#conn']) {
        const el = document.querySelector(sel); if (!el) continue;
        const a = lum(getComputedStyle(el).color), b = lum(bg(el));
        out[sel] = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      }
      return out; }""")
    assert len(ratios) >= 8
    low = {sel: round(r, 2) for sel, r in ratios.items() if r < 4.5}
    assert low == {}, f"contrast below 4.5:1: {low}"


def test_auditor_sees_only_the_audit_view(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.token(server, "auditor"))
    assert page.locator("#role").inner_text() == "Signed in · auditor"
    page.locator("#audit").wait_for(state="visible")
    assert page.locator("#workspace").is_hidden()
    page.locator("#verify-status.ok").wait_for()
    assert "Chain verified" in page.locator("#verify-status").inner_text()


def test_sse_parser_handles_split_frames(page, server: Server) -> None:
    """The client's text/event-stream parser, fed the awkward chunkings a network produces."""
    page.goto("/")
    frames = page.evaluate("""async () => {
      const { SseParser } = await import('/web/js/sse.js');
      const out = [];
      const ids = [];
      const parser = new SseParser((data, id) => out.push([id, data]), (id) => ids.push(id));
      const chunks = [': keep-alive\\r', '\\n', 'id: 7\\r\\ndata: {"type":"a",', '"n":1}\\r',
                      '\\n\\r\\n', 'data:{"type":"b"}\\n', 'data: {"x":2}\\n\\n',
                      'id: 9\\n\\n', 'data: not json\\n\\n', 'id: 10\\rdata: {"type":"c"}\\r\\r'];
      for (const c of chunks) parser.feed(c);
      return { out, ids };
    }""")
    assert frames["out"] == [[7, {"type": "a", "n": 1}], [10, {"type": "c"}]]
    assert frames["ids"] == [9]


def test_sse_parser_joins_multiline_data(page, server: Server) -> None:
    page.goto("/")
    out = page.evaluate("""async () => {
      const { SseParser } = await import('/web/js/sse.js');
      const out = [];
      const parser = new SseParser((data, id) => out.push([id, data]));
      parser.feed('id: 3\\ndata: {"type":\\ndata: "multi"}\\n\\n');
      return out;
    }""")
    assert out == [[3, {"type": "multi"}]]
