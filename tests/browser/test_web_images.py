"""Images in the web client's composer: a dropped image shows as a chip and is sent with the
message (the server stores it under uploads/ and names it in the message); a file that is not
an image is refused in the page."""

from __future__ import annotations

import base64

import pytest

from tests.browser.conftest import Tenant
from tests.browser.ui import new_session, sign_in, snap
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Reply

pytestmark = [pytest.mark.browser, pytest.mark.docker]

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()
DROP = """([data, type, name]) => {
  const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name, { type }));
  const form = document.querySelector('#composer');
  form.dispatchEvent(new DragEvent('drop', { dataTransfer: transfer, bubbles: true,
                                             cancelable: true }));
}"""


def test_a_dropped_image_goes_with_the_message(page, server: Server, tenant: Tenant,
                                               ollama: FakeOllama) -> None:
    sign_in(page, tenant.user)
    session = new_session(page)
    ollama.model.add(Reply(content="Got your picture."))
    page.evaluate(DROP, [base64.b64encode(b"plain text").decode(), "text/plain", "a.txt"])
    page.locator(".toast", has_text="only PNG, JPEG, GIF or WebP").wait_for()
    page.evaluate(DROP, [PNG, "image/png", "chart.png"])
    chip = page.locator("#attachments .attachment", has_text="chart.png")
    chip.wait_for()
    snap(page, "image_attached")
    page.get_by_label("Message to the agent").fill("What is in this chart?")
    page.keyboard.press("Enter")
    page.locator(".msg.assistant:not(.streaming)", has_text="Got your picture.").wait_for(
        timeout=60_000)
    assert page.locator("#attachments .attachment").count() == 0
    with server.client(tenant.user) as client:
        rows = client.get(f"/v1/sessions/{session}/messages").json()
    (image,) = rows[0]["meta"]["images"]
    assert image["media_type"] == "image/png" and image["path"].startswith("uploads/")
    assert image["path"].endswith(".png")
