"""Code blocks in the web client are highlighted by the vendored highlight.js, in a real
Chromium: known languages get coloured token spans, unknown ones stay plain text, code that
looks like HTML stays text (nothing it says runs), the copy button still copies the code as
written, and no request leaves the server's origin (no CDN)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Tenant
from tests.browser.test_web_rich import ask
from tests.browser.ui import sign_in, snap
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Reply

pytestmark = pytest.mark.browser

PYTHON = 'import os\n\ndef total(n):\n    return sum(range(n))  # the sum\n\nprint("done", 42)\n'
HOSTILE = '<img src=x onerror="window.pwned=1">\n</span><script>window.pwned=2</script>\n'
ANSWER = f"""Here it is:

```python
{PYTHON}```

```html
{HOSTILE}```

```nolang
plain words {{ not highlighted }}
```
"""


def test_code_blocks_are_highlighted_with_the_vendored_highlighter(
        page, server: Server, tenant: Tenant, ollama: FakeOllama) -> None:  # noqa: ANN001
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    ollama.model.add(Reply(content=ANSWER))
    sign_in(page, tenant.user)
    page.get_by_role("button", name="New session").click()
    ask(page, "show me")
    blocks = page.locator(".msg.assistant .markdown .code-block")
    blocks.nth(2).wait_for(timeout=30_000)

    python = blocks.nth(0).locator("pre code")
    assert "hljs" in (python.get_attribute("class") or "")
    keywords = python.locator("span.hljs-keyword").all_inner_texts()
    assert {"import", "def", "return"} <= set(keywords)
    assert python.locator("span.hljs-string").first.inner_text() == '"done"'
    assert python.locator("span.hljs-comment").first.inner_text() == "# the sum"
    assert python.inner_text() == PYTHON  # the text itself is unchanged
    colours = python.evaluate("""code => [
        getComputedStyle(code).color,
        getComputedStyle(code.querySelector('.hljs-keyword')).color,
        getComputedStyle(code.querySelector('.hljs-string')).color]""")
    assert len(set(colours)) == 3, colours  # the stylesheet colours each kind apart

    html = blocks.nth(1).locator("pre code")
    assert html.inner_text() == HOSTILE  # shown as the text it is
    assert html.locator("img, script").count() == 0
    assert page.evaluate("window.pwned") is None
    assert html.locator("span.hljs-tag").count() >= 2

    plain = blocks.nth(2).locator("pre code")
    assert plain.locator("span").count() == 0
    assert plain.inner_text() == "plain words { not highlighted }\n"

    blocks.nth(0).get_by_role("button", name="Copy code").click()
    page.wait_for_function("() => navigator.clipboard.readText().then(t => t.length > 0)")
    assert page.evaluate("navigator.clipboard.readText()") == PYTHON
    snap(page, "code_highlighted")
    foreign = [url for url in requested if not url.startswith(server.url)]
    assert foreign == [], foreign
    assert any(url.endswith("/web/vendor/highlight/highlight.min.js") for url in requested)
