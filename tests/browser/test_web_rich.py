"""The web client's richer views in a real Chromium: answers as sanitised Markdown (hostile
HTML stays inert), code blocks with a copy button, a URL per session, images a call writes
shown in its card, long output collapsed, and the "preparing the model" state from the
runtime's `notice` events. Screenshots land in `tests/artifacts/browser/`."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.browser.conftest import Tenant
from tests.browser.test_web_workflows import png_bytes
from tests.browser.ui import last_card, new_session, run_code, sign_in, snap, wait_finished
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = pytest.mark.browser

VENDOR = Path(__file__).resolve().parents[2] / "runtime" / "web" / "vendor"

HOSTILE = ("<img src=x onerror=\"window.pwned=1;document.title='pwned'\">"
           "<script>window.pwned=2;document.title='pwned'</script>")
ANSWER = f"""## Result

The **sum** is `42`, computed in the sandbox:

- first step
- second step, with [a link](https://example.org/docs)
- [a trap](javascript:window.pwned=3)

```python
total = sum(range(7)) * 2
print(total)
```

| n | square |
|---|--------|
| 2 | 4 |

{HOSTILE}

Inline too: {HOSTILE} and ![a picture](https://example.org/x.png).
"""

PNG_WRITER = """import struct, zlib
def png(w, h, rgb):
    raw = b"".join(b"\\x00" + bytes(rgb) * w for _ in range(h))
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    head = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", head)
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
import os
os.makedirs("plots", exist_ok=True)
open("plots/chart.png", "wb").write(png(64, 48, (30, 120, 200)))
open("plots/data.csv", "w").write("x,y\\n1,2\\n")
print("wrote plots/chart.png")
"""


def ask(page, text: str) -> None:  # noqa: ANN001
    page.get_by_label("Message to the agent").fill(text)
    page.keyboard.press("Enter")


def test_vendored_libraries_match_their_pins() -> None:
    """VENDORED.md names every vendored file with its sha256; the files are those bytes."""
    notes = (VENDOR / "VENDORED.md").read_text()
    pins = re.findall(r"^([0-9a-f]{64})  (\S+)$", notes, flags=re.M)
    assert {name for _, name in pins} >= {"marked/marked.esm.js", "marked/LICENSE",
                                          "dompurify/purify.es.js", "dompurify/LICENSE"}
    for digest, name in pins:
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    assert "18.2.1" in notes and "3.4.18" in notes


def test_markdown_answer_renders_and_hostile_html_stays_inert(
        page, server: Server, tenant: Tenant, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content=ANSWER, chunk=40, delay_s=0.02))
    sign_in(page, tenant.user)
    new_session(page)
    ask(page, "What is the sum?")
    answer = page.locator(".msg.assistant:not(.streaming) .markdown", has_text="second step")
    answer.wait_for(timeout=30_000)

    assert answer.locator("h2").inner_text() == "Result"
    assert answer.locator("strong").inner_text() == "sum"
    assert answer.locator("li").count() == 3
    assert answer.locator("table td").all_inner_texts() == ["2", "4"]
    link = answer.locator("a", has_text="a link")
    assert link.get_attribute("href") == "https://example.org/docs"
    assert link.get_attribute("target") == "_blank"
    assert "noopener" in (link.get_attribute("rel") or "")
    assert answer.locator("a", has_text="a trap").get_attribute("href") is None
    # The hostile HTML is shown as text, never as elements; nothing of it ran.
    text = answer.inner_text()
    assert "<img src=x onerror=" in text and "<script>" in text
    assert page.locator(".timeline img, .timeline script, .timeline iframe").count() == 0
    assert answer.locator("[onerror], [onclick]").count() == 0
    assert page.evaluate("window.pwned") is None
    assert page.title() == "Navi Runtime"
    # A Markdown image becomes a link (remote images are not loaded).
    assert answer.locator("a", has_text="image: a picture").count() == 1
    snap(page, "markdown_answer")

    page.reload()  # history renders the same way
    again = page.locator(".msg.assistant .markdown", has_text="second step")
    again.wait_for(timeout=30_000)
    assert again.locator("h2").inner_text() == "Result"
    assert page.locator(".timeline img, .timeline script").count() == 0
    assert page.evaluate("window.pwned") is None


def test_code_block_has_a_copy_button(page, server: Server, tenant: Tenant,
                                      ollama: FakeOllama) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    ollama.model.add(Reply(content=ANSWER))
    sign_in(page, tenant.user)
    new_session(page)
    ask(page, "Show me the code")
    block = page.locator(".msg.assistant .markdown .code-block").first
    block.wait_for(timeout=30_000)
    assert block.locator(".code-lang").inner_text() == "python"
    assert block.locator("pre code").inner_text().startswith("total = sum(range(7)) * 2")
    copy = block.get_by_role("button", name="Copy code")
    copy.click()
    page.wait_for_function("b => b.textContent === 'Copied'", arg=copy.element_handle())
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == "total = sum(range(7)) * 2\nprint(total)\n"
    snap(page, "code_block_copied")
    page.wait_for_function("b => b.textContent === 'Copy'", arg=copy.element_handle())


@pytest.mark.docker
def test_tool_code_has_a_copy_button(page, server: Server, tenant: Tenant) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    sign_in(page, tenant.user)
    new_session(page)
    run_code(page, "echo copied-command", tool="terminal")
    page.locator(".approval").get_by_role("button", name="Approve").click()  # policy: ask
    card = last_card(page)
    wait_finished(card)
    card.locator(".args").get_by_role("button", name="Copy code").click()
    assert page.evaluate("navigator.clipboard.readText()") == "echo copied-command"


SLOW_HISTORY = """() => {  // a session's history arrives 0.5 s late, as on a slow link
  const fetchNow = window.fetch;
  window.fetch = async (url, options) => {
    if (String(url).endsWith("/messages")) await new Promise((done) => setTimeout(done, 500));
    return fetchNow(url, options);
  };
}"""


def test_each_session_has_a_url(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    first = new_session(page)
    assert page.url.endswith(f"#/sessions/{first}")
    page.evaluate(SLOW_HISTORY)
    second = new_session(page)  # ready once the new session is live (not the old one)
    assert page.url.endswith(f"#/sessions/{second}")
    current = page.locator(".session-open[aria-current=true]")

    page.locator(f".session-open[data-session-id='{first}']").click()
    page.wait_for_url(f"**#/sessions/{first}")
    page.go_back()  # back: the session before
    page.wait_for_function("id => document.querySelector("
                           "'.session-open[aria-current=true]').dataset.sessionId === id",
                           arg=second)
    assert page.url.endswith(f"#/sessions/{second}")
    page.go_forward()
    page.wait_for_function("id => document.querySelector("
                           "'.session-open[aria-current=true]').dataset.sessionId === id",
                           arg=first)

    page.reload()  # the URL keeps the session (the newest would be the default)
    page.locator("#conn[data-state=open]").wait_for()
    assert current.get_attribute("data-session-id") == first
    assert page.url.endswith(f"#/sessions/{first}")
    assert first[-6:] in page.locator("#chat-title").inner_text()
    snap(page, "session_url")

    page.goto(f"/#/sessions/{second}")  # a link to a session opens it
    page.wait_for_function("id => document.querySelector("
                           "'.session-open[aria-current=true]')?.dataset.sessionId === id",
                           arg=second)
    page.goto("/#/sessions/se_not_mine")  # unknown: said so, and another session opens
    page.locator(".toast.error", has_text="does not exist").wait_for()
    current.wait_for()
    assert page.evaluate("location.hash") != "#/sessions/se_not_mine"


@pytest.mark.docker
def test_image_written_by_a_call_shows_in_its_card(page, server: Server,
                                                   tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    session = new_session(page)
    with server.client(tenant.user) as api:  # an older image: not this call's
        assert api.put(f"/v1/sessions/{session}/files/old.png",
                       content=png_bytes(10, 10, (0, 0, 0))).status_code == 201
    run_code(page, PNG_WRITER)
    card = last_card(page)
    wait_finished(card)
    image = card.locator(".card-images img")
    image.wait_for(timeout=15_000)
    page.wait_for_function("img => img.complete && img.naturalWidth === 64",
                           arg=image.element_handle())
    assert image.get_attribute("src").startswith("blob:")
    assert card.locator(".card-images figcaption").all_inner_texts() == ["plots/chart.png"]
    snap(page, "image_in_tool_card")

    run_code(page, "print('no pictures here')")  # a later call wrote nothing
    later = last_card(page)
    wait_finished(later)
    page.wait_for_timeout(800)
    assert later.locator(".card-images img").count() == 0

    page.reload()  # replayed events: the same picture in the same card
    first = page.locator(".tool-card", has_text="wrote plots/chart.png")
    first.locator(".card-images img").wait_for(timeout=15_000)
    assert first.locator(".card-images figcaption").all_inner_texts() == ["plots/chart.png"]
    assert page.locator(".tool-card").last.locator(".card-images img").count() == 0


@pytest.mark.docker
def test_image_an_agent_call_wrote_shows_live_and_from_history(
        page, server: Server, tenant: Tenant, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("code_exec", {"language": "python",
                                                     "code": PNG_WRITER})]),
                     Reply(content="The chart is in `plots/chart.png`."))
    sign_in(page, tenant.user)
    new_session(page)
    ask(page, "Plot it")
    card = page.locator(".tool-card", has_text="code_exec")
    card.locator(".card-images img").wait_for(timeout=30_000)
    page.locator(".msg.assistant:not(.streaming) code", has_text="plots/chart.png").wait_for()
    page.reload()  # the stored conversation: the call's start and end come from history
    card = page.locator(".tool-card", has_text="code_exec")
    image = card.locator(".card-images img")
    image.wait_for(timeout=15_000)
    page.wait_for_function("img => img.complete && img.naturalWidth === 64",
                           arg=image.element_handle())
    assert card.locator(".card-images figcaption").all_inner_texts() == ["plots/chart.png"]


@pytest.mark.docker
def test_long_output_is_collapsible(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    new_session(page)
    run_code(page, "print('short')")
    short = last_card(page)
    wait_finished(short)
    assert short.locator(".output-toggle").is_hidden()

    run_code(page, "for i in range(1, 201): print(f'line {i}')")
    card = last_card(page)
    wait_finished(card)
    wrap = card.locator(".output-wrap")
    toggle = card.get_by_role("button", name="Show all 200 lines")
    toggle.wait_for()
    assert "collapsed" in (wrap.get_attribute("class") or "")
    assert toggle.get_attribute("aria-expanded") == "false"
    output = card.locator(".output")
    sizes = output.evaluate("el => [el.clientHeight, el.scrollHeight, el.scrollTop]")
    assert sizes[0] < sizes[1] / 4  # collapsed to a few lines ...
    assert sizes[2] + sizes[0] >= sizes[1] - 2  # ... showing the end
    toggle.scroll_into_view_if_needed()
    snap(page, "long_output_collapsed")

    toggle.click()
    expanded = card.get_by_role("button", name="Collapse output")
    assert expanded.get_attribute("aria-expanded") == "true"
    sizes = output.evaluate("el => [el.clientHeight, el.scrollHeight]")
    assert sizes[0] >= sizes[1] - 2  # everything shows
    expanded.click()
    card.get_by_role("button", name="Show all 200 lines").wait_for()


def sse(*events: dict[str, object], start: int = 1) -> str:
    return "".join(f"id: {start + i}\ndata: {json.dumps(e)}\n\n" for i, e in enumerate(events))


def test_preparing_the_model_is_visible(page, server: Server, tenant: Tenant) -> None:
    """The runtime's `notice` events (as the embedded model is installed and loaded) show as
    one live card with the message, the phase and the progress, until the answer starts.
    The session's event stream is played by the test: no real model is installed here."""
    now = 1_900_000_000.0
    turn = {"turn_id": "tu_prep"}
    first = sse(
        {"type": "stream_start", "model": "gemma3:270m", "backend": "embedded", "ts": now,
         **turn},
        {"type": "notice", "ts": now + 0.1, **turn,
         "message": "No model server answered. Serving with the embedded model on this "
                    "machine. It is installed first (once)."},
        {"type": "notice", "ts": now + 0.2, **turn, "message": "Downloading the model",
         "phase": "download", "progress": 0.42},
    )
    second = sse(
        {"type": "notice", "ts": now + 5, **turn, "message": "Loading the model",
         "phase": "load", "progress": {"done": 3, "total": 4}},
        {"type": "stream_delta", "content": "Ready: **hello**.", "ts": now + 6, **turn},
        {"type": "stream_end", "content": "Ready: **hello**.", "stop_reason": "stop",
         "ts": now + 6.1, **turn},
        start=4)
    stage = {"n": 0, "release": False}

    def events(route) -> None:  # noqa: ANN001
        body = ": idle\n\n"
        if stage["n"] == 0:
            body = first
            stage["n"] = 1
        elif stage["n"] == 1 and stage["release"]:
            body = second
            stage["n"] = 2
        route.fulfill(status=200, body=body, headers={"Content-Type": "text/event-stream"})

    page.route(re.compile(r"/v1/sessions/[^/]+/events$"), events)
    sign_in(page, tenant.user)
    page.get_by_role("button", name="New session").click()  # (its stream is the test's)
    card = page.locator(".notice-card.preparing")
    card.wait_for(timeout=15_000)
    card.locator(".phase", has_text="Download").wait_for()
    # It stands where the answer will begin; the answer's empty block waits out of sight.
    assert page.locator(".msg.assistant").is_hidden()
    assert card.locator(".notice-message").inner_text() == "Downloading the model"
    assert card.locator(".percent").inner_text() == "42%"
    assert card.locator("progress").evaluate("p => p.value") == 42
    assert card.get_attribute("role") == "status"
    assert page.locator(".notice-card").count() == 1  # one card, updated in place
    snap(page, "model_preparing")

    stage["release"] = True
    answer = page.locator(".msg.assistant:not(.streaming) strong", has_text="hello")
    answer.wait_for(timeout=15_000)
    order = page.evaluate("""() => [...document.querySelectorAll('.timeline > *')]
        .map(el => el.className.split(' ')[0])""")
    assert order.index("notice-card") < order.index("msg")
    done = page.locator(".notice-card.ready")
    done.wait_for()
    assert done.locator(".notice-message").inner_text() == "Loading the model"
    assert done.locator(".phase").inner_text() == "Ready"
    assert done.locator("progress").is_hidden()
    assert page.locator(".notice-card.preparing").count() == 0
    snap(page, "model_ready")
