"""Kernel results in the web client, in a real Chromium: a matplotlib figure shows as an
image in the call's card (through a blob URL), a pandas table as a table, and HTML a kernel
displays is sanitized to tables and text (its scripts and handlers stay inert)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import POLICY, Tenant
from tests.browser.ui import last_card, new_session, run_code, sign_in, snap, wait_finished
from tests.e2e.conftest import Server, start_server, stop_server

pytestmark = [pytest.mark.browser, pytest.mark.docker]

HOSTILE = ("<table><tr><th>k</th></tr><tr><td>v</td></tr></table>"
           "<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>"
           "<a href=\"javascript:window.pwned=3\">link</a>")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The browser tests' server (no model needed here), given time to start under load."""
    srv = start_server(tmp_path_factory.mktemp("web-kernels"), policy=POLICY, ready_s=180)
    yield srv
    stop_server(srv)


def test_kernel_figures_and_tables_show_inline(page, server: Server, tenant: Tenant) -> None:
    sign_in(page, tenant.user)
    new_session(page)
    run_code(page, "import matplotlib.pyplot as plt\nimport pandas as pd\n"
                   "plt.plot([1, 4, 9])\nplt.show()\n"
                   "pd.DataFrame({'city': ['Oslo', 'Lima'], 'n': [1, 2]})", tool="kernel",
             timeout_s=60)
    card = last_card(page)
    wait_finished(card, timeout_ms=180_000)
    image = card.locator(".kernel-results img")
    image.wait_for(timeout=15_000)
    page.wait_for_function("img => img.complete && img.naturalWidth > 100",
                           arg=image.element_handle())
    assert image.get_attribute("src").startswith("blob:")
    table = card.locator(".kernel-html table")
    table.wait_for()
    assert "Oslo" in table.inner_text() and "Lima" in table.inner_text()
    snap(page, "kernel_results_in_tool_card")

    run_code(page, f"from IPython.display import HTML, display\ndisplay(HTML({HOSTILE!r}))",
             tool="kernel")
    hostile = last_card(page)
    wait_finished(hostile, timeout_ms=60_000)
    html = hostile.locator(".kernel-html")
    html.wait_for()
    assert html.locator("table td").inner_text() == "v"
    assert html.locator("img, script, a[href], [onerror]").count() == 0
    page.wait_for_timeout(300)
    assert page.evaluate("window.pwned") is None

    run_code(page, "1/0", tool="kernel")
    failed = last_card(page)
    wait_finished(failed, timeout_ms=60_000)
    failed.locator(".kernel-traceback").wait_for()
    assert failed.inner_text().count("Traceback (most recent call last)") == 1  # shown once
    # the error, without the rule that allowed the call (it ran: no policy refused it)
    assert failed.locator(".card-error").inner_text() == "ZeroDivisionError: division by zero"
