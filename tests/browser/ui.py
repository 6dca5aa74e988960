"""What a person does in the web client, as small steps shared by the browser tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "browser"
Page = Any  # playwright.sync_api.Page (imported lazily so collection works without it)


def sign_in(page: Page, token: str, url: str = "/") -> None:
    page.goto(url)
    page.get_by_label("Access token").fill(token)
    page.locator("#signin-form button[type=submit]").click()
    page.locator("#signout").wait_for(state="visible")


def new_session(page: Page, profile: str = "") -> str:
    before = page.locator(".session-open").count()
    if profile:  # the list of the profiles a new session may take (GET /v1/profiles)
        page.wait_for_function(
            "p => [...document.querySelectorAll('#profile-input option')]"
            ".some(o => o.value === p)", arg=profile)
        page.get_by_label("Profile", exact=True).select_option(profile)
    page.get_by_role("button", name="New session").click()
    page.wait_for_function(
        "n => document.querySelectorAll('.session-open').length > n", arg=before)
    current = page.locator(".session-open[aria-current=true]")
    current.wait_for()
    page.locator("#conn[data-state=open]").wait_for()
    return str(current.get_attribute("data-session-id"))


def run_code(page: Page, code: str, tool: str = "python", timeout_s: int | None = None) -> None:
    box = page.locator("#runbox")
    if box.get_attribute("open") is None:
        box.locator("summary").click()
    form = page.locator("#run-form")
    form.get_by_label("Tool", exact=True).select_option(tool)
    form.get_by_label("Timeout (s)").fill("" if timeout_s is None else str(timeout_s))
    form.get_by_label("Code or command").fill(code)
    form.get_by_role("button", name="Run", exact=True).click()


def last_card(page: Page) -> Any:
    return page.locator(".tool-card").last


def wait_finished(card: Any, timeout_ms: float = 60_000) -> None:
    card.locator(".status.ok, .status.fail").wait_for(timeout=timeout_ms)


def snap(page: Page, name: str) -> None:
    """A screenshot of a moment worth looking at (the fixture saves the final state too)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
