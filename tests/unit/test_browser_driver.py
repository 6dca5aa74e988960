"""The browser driver's parts that need no Chromium: the DOM to readable text (no scripts,
a line per block), and how a failed page load is told from a resource that failed."""

from __future__ import annotations

from runtime.tools.builtin.browser_driver import ERROR_PAGE, Text, chromium


def text_of(html: str) -> tuple[str, str]:
    parser = Text()
    parser.feed(html)
    return "".join(parser.title).strip(), parser.text()


def test_the_dom_becomes_text_without_scripts_or_styles() -> None:
    title, text = text_of(
        "<html><head><title> A  page </title><style>p{color:red}</style></head><body>"
        "<script>var hidden = 1;</script><h1>Head</h1><div id=out><p>Made by "
        "<b>JavaScript</b>: 42</p></div><noscript>enable JS</noscript>"
        "<ul><li>one</li><li>two</li></ul><template><p>never</p></template></body></html>")
    assert title == "A  page"
    assert text == "Head\n\nMade by JavaScript: 42\n\none\n\ntwo"
    assert "hidden" not in text and "color" not in text and "never" not in text


def test_only_the_page_s_own_failure_counts_as_a_failed_load() -> None:
    page = ("[1:1:ERROR:headless_command_handler.cc:403] Page load failed: "
            "net::ERR_TUNNEL_CONNECTION_FAILED")
    found = ERROR_PAGE.search(page)
    assert found is not None and found.group(1) == "ERR_TUNNEL_CONNECTION_FAILED"
    resource = "[1:1:ERROR:network] Failed to load resource: net::ERR_TUNNEL_CONNECTION_FAILED"
    assert ERROR_PAGE.search(resource) is None


def test_chromium_always_goes_through_the_proxy_even_for_loopback(monkeypatch) -> None:  # noqa: ANN001
    job = {"url": "http://localhost:8000/", "width": 1280, "height": 800}
    monkeypatch.setenv("NAVI_EGRESS_SOCKET", "/run/navi/egress.sock")
    argv = chromium(job, ["--dump-dom"])
    assert "--proxy-server=http://127.0.0.1:3128" in argv
    assert "--proxy-bypass-list=<-loopback>" in argv and "--no-sandbox" in argv
    assert argv[-2:] == ["--dump-dom", "http://localhost:8000/"]
    monkeypatch.delenv("NAVI_EGRESS_SOCKET")
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    assert "--proxy-server=http://127.0.0.1:9" in chromium(job, [])  # no egress: nowhere
