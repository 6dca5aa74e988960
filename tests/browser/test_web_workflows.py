"""What a person does in the web client, in a real Chromium against a real server with real
containers: run code and watch it stream, approve an `ask`, move files in and out, read the
audit, chat with the (fake) model, and keep the live view across a dropped connection."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from tests.browser.conftest import Tenant
from tests.browser.proxy import CuttableProxy
from tests.browser.ui import last_card, new_session, run_code, sign_in, snap, wait_finished
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = [pytest.mark.browser, pytest.mark.docker]

STREAMING = """import time
print('first line', flush=True)
time.sleep(2)
print('second line', flush=True)
import sys; print('a warning', file=sys.stderr)
"""


def png_bytes(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def test_run_code_streams_into_a_card(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    new_session(page)
    run_code(page, STREAMING)
    card = last_card(page)
    # The first line is on screen while the program still runs: output is live.
    card.locator(".output .stdout", has_text="first line").wait_for(timeout=30_000)
    assert card.locator(".status.running").count() == 1
    assert "second line" not in card.locator(".output").inner_text()
    wait_finished(card)
    assert card.locator(".status").inner_text() == "exit 0"
    assert "second line" in card.locator(".output .stdout").all_inner_texts()[-1]
    assert card.locator(".output .stderr").inner_text() == "a warning\n"
    meta = card.locator(".card-meta").inner_text()
    assert " ms" in meta and "audit #" in meta and "ex_" in meta
    assert card.locator(".args .code").inner_text().startswith("import time")


def test_failure_timeout_and_untrusted_output(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    new_session(page)
    hostile = "<img src=x onerror=\"document.title='pwned'\"><b>bold</b>"
    run_code(page, f"print({hostile!r})\nraise SystemExit(3)")
    card = last_card(page)
    wait_finished(card)
    assert card.locator(".status.fail").inner_text() == "exit 3"
    assert card.locator(".output").inner_text().strip() == hostile  # shown as text
    assert card.locator(".output img, .output b").count() == 0
    assert page.title() == "Navi Runtime"

    run_code(page, "import time\ntime.sleep(30)", timeout_s=1)
    card = last_card(page)
    wait_finished(card)
    assert card.locator(".badge.timed_out").inner_text() == "timed out"
    assert "timeout 1" in card.locator(".card-meta").inner_text()


@pytest.mark.parametrize("decision", ["Approve", "Deny"])
def test_ask_is_approved_or_denied_in_the_page(page, server: Server, tenant: Tenant,
                                               decision: str) -> None:
    sign_in(page, tenant.user)
    new_session(page)
    run_code(page, "echo approved-run", tool="terminal")
    prompt = page.locator(".approval")
    prompt.wait_for(timeout=30_000)
    assert "terminal" in prompt.locator("h3").inner_text()
    assert "echo approved-run" in prompt.locator("pre").inner_text()
    card = last_card(page)
    assert card.locator(".status.running").count() == 1  # waits for a person
    snap(page, f"approval_pending_{decision.lower()}")
    prompt.get_by_role("button", name=decision).click()
    wait_finished(card)
    if decision == "Approve":
        assert card.locator(".status").inner_text() == "exit 0"
        assert card.locator(".output").inner_text() == "approved-run\n"
        prompt.locator(".approval-status", has_text="Approved").wait_for()
    else:
        assert card.locator(".status.fail").count() == 1
        assert "rule" in card.locator(".card-error").inner_text()
        prompt.locator(".approval-status", has_text="Denied").wait_for()
    assert prompt.get_by_role("button", name="Approve").count() == 0


def test_upload_preview_download_delete(page, server: Server, tenant: Tenant,
                                        tmp_path) -> None:  # noqa: ANN001
    sign_in(page, tenant.user)
    new_session(page)
    text = tmp_path / "notes <1>.txt"
    text.write_bytes(b"line one\nline two\n\x00binary tail")
    image = tmp_path / "square.png"
    image.write_bytes(png_bytes(40, 30, (200, 40, 40)))
    page.get_by_label("Upload files").set_input_files([str(text), str(image)])
    page.get_by_label("Into folder (optional)").fill("inbox")
    page.get_by_role("button", name="Upload", exact=True).click()
    rows = page.locator("#file-list .file")
    rows.filter(has_text="inbox/square.png").wait_for()
    rows.filter(has_text="inbox/notes <1>.txt").wait_for()

    preview = rows.filter(has_text="square.png").locator("img.preview")
    preview.wait_for()
    page.wait_for_function("img => img.complete && img.naturalWidth === 40",
                           arg=preview.element_handle())
    assert preview.get_attribute("src").startswith("blob:")
    snap(page, "files_with_image_preview")

    with page.expect_download() as info:
        page.get_by_role("button", name="Download inbox/notes <1>.txt").click()
    download = info.value
    assert download.suggested_filename in ("notes <1>.txt", "notes _1_.txt")  # as Chromium saves
    assert Path(download.path()).read_bytes() == text.read_bytes()

    # The sandbox sees the upload; the card shows what it read.
    run_code(page, "print(open('inbox/notes <1>.txt').read().splitlines()[1])")
    wait_finished(last_card(page))
    assert last_card(page).locator(".output").inner_text() == "line two\n"

    delete = page.get_by_role("button", name="Delete inbox/square.png")
    delete.click()
    assert delete.inner_text() == "Confirm delete"  # asks once more
    delete.click()
    rows.filter(has_text="square.png").wait_for(state="detached")
    assert rows.filter(has_text="notes <1>.txt").count() == 1


def test_bootstrap_admin_token_works_and_audits(page, server: Server) -> None:
    """`make run` on a fresh machine: the NAVI_ADMIN_TOKEN is enough to try everything."""
    sign_in(page, server.admin_token)
    assert page.locator("#role").inner_text() == "Signed in · admin"
    new_session(page)
    run_code(page, "echo hello from bash", tool="bash")
    wait_finished(last_card(page))
    assert last_card(page).locator(".output").inner_text() == "hello from bash\n"
    page.get_by_role("button", name="Audit").click()
    page.locator("#audit-rows tr").first.wait_for()
    page.locator("#verify-status.ok").wait_for()


def test_audit_view_filters_and_verifies(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    session = new_session(page)
    run_code(page, "print('audited')")
    wait_finished(last_card(page))
    run_code(page, "echo x", tool="bash")
    wait_finished(last_card(page))
    page.locator("#signout").click()

    sign_in(page, tenant.token(server, "tenant_admin"))  # its tenant_admin sees both views
    page.get_by_role("button", name="Audit").click()
    page.locator("#verify-status.ok").wait_for()
    assert "Chain verified" in page.locator("#verify-status").inner_text()
    filters = page.locator("#audit-filters")
    filters.get_by_label("Session").fill(session)
    filters.get_by_role("button", name="Apply filters").click()
    rows = page.locator("#audit-rows tr")
    rows.first.wait_for()
    kinds = rows.locator("td:nth-child(3)").all_inner_texts()
    actions = rows.locator("td:nth-child(4)").all_inner_texts()
    tools = rows.locator("td:nth-child(6)").all_inner_texts()
    objects = rows.locator("td:nth-child(7)").all_inner_texts()
    assert {"intent", "outcome", "action"} <= set(kinds)
    assert {t for k, t in zip(kinds, tools, strict=True) if k != "action"} == {"code_exec"}
    assert ("session.create", session) in set(zip(actions, objects, strict=True))
    assert rows.locator("td[title]").first.get_attribute("title") is not None

    filters.get_by_label("Since (seq or ISO time)").fill("yesterday")
    filters.get_by_role("button", name="Apply filters").click()
    page.locator("#audit-status", has_text="since must be").wait_for()


def test_chat_with_the_agent(page, server: Server, tenant: Tenant, ollama: FakeOllama) -> None:
    code = "print('from the agent', flush=True)\nopen('answer.txt', 'w').write('42')"
    ollama.model.add(
        Reply(thinking="The user wants a number. I will compute it in the sandbox.",
              calls=[Call("code_exec", {"language": "python", "code": code})], chunk=6,
              delay_s=0.15),
        Reply(content="The answer is written to answer.txt.", chunk=4, delay_s=0.05),
    )
    sign_in(page, tenant.user)
    new_session(page)
    page.get_by_label("Message to the agent").fill("Compute the answer, please")
    page.keyboard.press("Enter")
    page.locator(".msg.user", has_text="Compute the answer, please").wait_for()

    thinking = page.locator(".msg.assistant details.thinking").first
    thinking.wait_for(timeout=30_000)
    # While the model thinks, its thoughts stream into an open section.
    page.locator(".msg.assistant.streaming details.thinking[open] .thinking-text",
                 has_text="number").wait_for()
    snap(page, "chat_thinking_streams")
    card = last_card(page)
    wait_finished(card)
    assert card.locator(".tool-name").inner_text() == "code_exec"
    assert card.locator(".output").inner_text() == "from the agent\n"
    assert card.locator(".status").inner_text() == "exit 0"
    assert page.locator(".notice", has_text="Model: ").count() == 1  # which model serves
    reply = page.locator(".msg.assistant:not(.streaming)",
                         has_text="The answer is written to answer.txt.")
    reply.wait_for(timeout=30_000)
    snap(page, "chat_answered")
    # Thinking is collapsed once the model moved on, and opens on demand.
    assert thinking.get_attribute("open") is None
    thinking.locator("summary").click()
    assert "compute it in the sandbox" in thinking.locator(".thinking-text").inner_text()
    page.locator("#file-list .file", has_text="answer.txt").wait_for()

    page.reload()  # the conversation is rebuilt from history, nothing doubled
    page.locator(".msg.assistant", has_text="The answer is written").wait_for()
    page.locator("#conn[data-state=open]").wait_for()
    page.wait_for_timeout(500)
    assert page.locator(".tool-card").count() == 1
    assert last_card(page).locator(".output").inner_text() == "from the agent\n"
    assert page.locator(".msg.user").count() == 1


def test_agent_image_shows_inline(page, server: Server, tenant: Tenant,
                                  ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("image_view", {"path": "renders/view.png"})]),
                     Reply(content="I see a red square."))
    sign_in(page, tenant.user)
    session = new_session(page)
    with server.client(tenant.user) as api:
        assert api.put(f"/v1/sessions/{session}/files/renders/view.png",
                       content=png_bytes(40, 30, (200, 40, 40))).status_code == 201
    page.get_by_label("Message to the agent").fill("What does the render show?")
    page.keyboard.press("Enter")
    card = page.locator(".tool-card", has_text="image_view")
    image = card.locator(".card-images img")
    image.wait_for(timeout=30_000)
    page.wait_for_function("img => img.complete && img.naturalWidth === 40",
                           arg=image.element_handle())
    assert card.locator("figcaption").inner_text() == "renders/view.png"
    page.locator(".msg.assistant", has_text="I see a red square.").wait_for()
    page.locator("#file-list img.preview").wait_for()


def test_stop_a_running_turn(page, server: Server, tenant: Tenant, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(content="Counting slowly: one two three four five six seven.",
                           chunk=3, delay_s=0.4))
    sign_in(page, tenant.user)
    new_session(page)
    stop = page.get_by_role("button", name="Stop")
    assert stop.is_hidden()
    page.get_by_label("Message to the agent").fill("Count for me")
    page.keyboard.press("Enter")
    page.locator(".msg.assistant.streaming", has_text="Counting").wait_for(timeout=30_000)
    stop.click()
    page.locator(".msg.assistant:not(.streaming)").last.wait_for()
    stop.wait_for(state="hidden")
    text = page.locator(".msg.assistant .text").last.inner_text()
    assert text.startswith("Counting") and "seven" not in text
    assert page.locator(".stop-reason").last.inner_text() == "Stopped by a person."


def test_live_view_resumes_after_a_dropped_connection(page, server: Server,
                                                      tenant: Tenant) -> None:
    page.problems.allow(r"net::ERR_")
    port = int(server.url.rsplit(":", 1)[1])
    with CuttableProxy(port) as proxy:
        sign_in(page, tenant.user, url=proxy.url + "/")
        session = new_session(page)
        run_code(page, "print('before')")
        wait_finished(last_card(page))

        proxy.cut(refuse=True)  # the live stream drops and cannot come back yet
        page.locator("#conn[data-state=reconnecting]").wait_for(timeout=15_000)
        with server.client(tenant.user) as api:  # meanwhile, elsewhere: a run happens
            resp = api.post(f"/v1/sessions/{session}/exec", json={
                "tool": "code_exec", "args": {"language": "python", "code": "print('missed')"}})
            assert resp.status_code == 200, resp.text
        page.wait_for_timeout(1000)
        assert page.locator(".tool-card", has_text="missed").count() == 0
        proxy.resume()
        page.locator("#conn[data-state=open]").wait_for(timeout=30_000)
        card = page.locator(".tool-card", has_text="missed")
        card.wait_for(timeout=15_000)  # replayed from Last-Event-ID
        wait_finished(card)
        assert card.locator(".output").inner_text() == "missed\n"
        assert page.locator(".tool-card").count() == 2


def test_sub_agent_steps_nest_in_their_card_and_the_profile_shows(
        page, server: Server, tenant: Tenant, ollama: FakeOllama) -> None:
    ollama.model.add(
        Reply(calls=[Call("spawn_agent", {"task": "count to three"})]),       # the agent
        Reply(calls=[Call("code_exec", {"language": "python",                 # its sub-agent
                                        "code": "print(1, 2, 3)"})]),
        Reply(content="counted: 1 2 3"),                                       # its sub-agent
        Reply(calls=[Call("switch_profile", {"profile": "reviewer"})]),       # the agent
        Reply(content="Done, and I am a reviewer now."),
    )
    sign_in(page, tenant.user)
    new_session(page)
    assert page.locator("#session-profile").input_value() == "developer"
    page.get_by_label("Message to the agent").fill("Delegate the counting")
    page.keyboard.press("Enter")
    page.locator(".msg.assistant:not(.streaming)",
                 has_text="Done, and I am a reviewer now.").wait_for(timeout=60_000)
    spawn = page.locator(".tool-card[data-tool=spawn_agent]")
    steps = spawn.locator(".subagent-log li").all_inner_texts()
    assert steps[0].startswith("sub-agent started") and "→ code_exec" in steps
    assert "✓ code_exec" in steps and steps[-1] == "answer: counted: 1 2 3"
    # the sub-agent's own call is inside the spawn card, not a card of its own
    assert page.locator(".tool-card[data-tool=code_exec]").count() == 0
    assert page.locator(".msg.assistant").count() == 1  # its answer is not a second reply
    page.wait_for_function("() => document.querySelector('#session-profile').value === 'reviewer'")
    page.locator(".notice", has_text="Profile: developer → reviewer").wait_for()
    snap(page, "sub_agent_nested")
