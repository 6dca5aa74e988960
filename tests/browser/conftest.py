"""A real headless Chromium (Debian's `chromium`, driven by Playwright) against a real
`navi serve` on loopback, with the fake Ollama answering the agent (`ollama`, from
tests/e2e/conftest).

Every test gets a fresh browser context; its page errors, CSP violations and failed script
loads fail the test, and a screenshot of the final state is saved under
`tests/artifacts/browser/` (git-ignored) to be looked at.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.browser.ui import ARTIFACTS
from tests.e2e.conftest import (  # noqa: F401 - `ollama`: the fixture, used by name
    Server,
    ollama,
    start_server,
    stop_server,
)
from tests.fakes.ollama import FakeOllama

CHROMIUM = os.environ.get("NAVI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
POLICY = Path(__file__).resolve().parents[1] / "e2e" / "policies" / "ask_and_quota.yaml"
VIEWPORT = {"width": 1400, "height": 1000}
# API answers such as 401/403/404/429 are logged by Chromium as failed resources; the client
# handles them. A failed page asset is caught by the response check below instead.
API_ANSWER = re.compile(r"Failed to load resource: the server responded with a status of \d+")


def _playwright():  # noqa: ANN202 - the sync_api module
    try:
        from playwright import sync_api
    except ImportError as exc:  # pragma: no cover - dev extras missing
        return None, f"playwright is not installed ({exc})"
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).is_file():
        return None, f"{CHROMIUM} is missing (apt-get install chromium)"
    return sync_api, None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Per module: Playwright's sync API keeps an event loop running in this thread while
    it lives, which would break every asyncio test that runs after the browser tests."""
    sync_api, problem = _playwright()
    if sync_api is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the browser tests cannot run: {problem}")
        pytest.skip(problem or "no browser")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory,
           ollama: FakeOllama) -> Iterator[Server]:  # noqa: F811
    srv = start_server(tmp_path_factory.mktemp("web"), policy=POLICY, extra_env={
        "NAVI_OLLAMA_HOST": ollama.url, "NAVI_MODEL": "gemma3:270m",
        "NAVI_OPENAI_BASE_URL": ""})
    yield srv
    stop_server(srv)


@dataclass
class PageProblems:
    errors: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def allow(self, pattern: str) -> None:
        """Console errors a test causes on purpose (e.g. a dropped connection)."""
        self.allowed.append(re.compile(pattern))

    def check(self) -> None:
        left = [e for e in self.errors if not any(p.search(e) for p in self.allowed)]
        assert not left, "the page reported problems:\n" + "\n".join(left)


@pytest.fixture
def page(browser: object, server: Server, request: pytest.FixtureRequest) -> Iterator[object]:
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True,  # type: ignore[attr-defined]
                                  base_url=server.url)
    page = context.new_page()
    problems = PageProblems()

    def on_console(message: object) -> None:
        text = message.text  # type: ignore[attr-defined]
        if message.type == "error" and not API_ANSWER.search(text):  # type: ignore[attr-defined]
            problems.errors.append(f"console: {text}")

    def on_response(response: object) -> None:
        url = response.url  # type: ignore[attr-defined]
        if response.status >= 400 and "/v1/" not in url:  # type: ignore[attr-defined]
            problems.errors.append(f"asset {url}: HTTP {response.status}")  # type: ignore[attr-defined]

    page.on("console", on_console)
    page.on("response", on_response)
    page.on("pageerror", lambda exc: problems.errors.append(f"page error: {exc}"))
    page.problems = problems  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        try:
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        finally:
            context.close()
    problems.check()


@dataclass
class Tenant:
    id: str
    user: str

    def token(self, server: Server, role: str) -> str:
        return server.token_for(self.id, role)


@pytest.fixture
def tenant(server: Server) -> Tenant:
    """A fresh tenant per test (the policy's per-minute quota is per tenant)."""
    tenant_id, token = server.tenant_with_user()
    return Tenant(tenant_id, token)
