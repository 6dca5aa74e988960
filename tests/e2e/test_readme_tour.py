"""README's first command and its tour, exactly as a new user runs them.

A copy of the checkout (what `git clone` would give, plus uncommitted edits) gets the
project's venv, then `make run` with no arguments (the Makefile's relative `./data`, port
8000) and the tour block is cut out of README.md and run verbatim by bash. The block is read
from README.md by this test, so README and test cannot drift apart. Then the web client's
first steps as README's "The web client" gives them: open the page, sign in with the admin
token `make run` made, create a session, run code directly, see its output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
README_PORT = 8000


def tour_block(readme: str) -> str:
    section = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    assert match, "README's tour has no ```sh block"
    return match.group(1)


def copy_checkout(dest: Path) -> None:
    """Tracked and untracked-but-not-ignored files: a clone of the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if not source.is_file():  # deleted in the work tree
            continue
        target = dest / os.fsdecode(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    (dest / ".venv").symlink_to(ROOT / ".venv")


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture(scope="module")
def make_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp_path = tmp_path_factory.mktemp("readme")
    if not port_free(README_PORT):
        pytest.fail(f"port {README_PORT} is taken: README's `make run` needs it")
    checkout = tmp_path / "navi"
    copy_checkout(checkout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NAVI_")}
    log = (tmp_path / "make-run.log").open("wb")
    process = subprocess.Popen(["make", "run"], cwd=checkout, env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "make-run.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{README_PORT}/v1/healthz", timeout=1).is_success:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            pytest.fail("make run did not serve within 120 s:\n"
                        + (tmp_path / "make-run.log").read_text())
        yield checkout
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_readme_tour_runs_as_written(make_run: Path) -> None:
    checkout = make_run
    assert (checkout / "data" / "admin-token").is_file()
    block = tour_block((checkout / "README.md").read_text())
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=checkout,
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # 2. the upload's listing entry, then 3. the exec answer (each on its own line)
    decoder = json.JSONDecoder()
    upload, end = decoder.raw_decode(out)
    assert upload["path"] == "numbers.txt" and upload["size"] == 6, upload
    exec_result, _ = decoder.raw_decode(out[end:].lstrip())
    assert exec_result["ok"] is True and exec_result["stdout"] == "12\n", exec_result
    # 4. streamed: each step arrives as an exec_output event, then the result
    assert all(f"step {i}" in out for i in (1, 2, 3)), out
    # 5. the file the code wrote, the audit's last rule, a verified chain
    lines = out.splitlines()
    assert "12" in lines, out
    at = next(i for i, line in enumerate(lines) if '"first_bad_seq"' in line)
    verify = json.loads(lines[at])
    assert verify["ok"] is True and verify["first_bad_seq"] is None, verify
    assert lines[at - 1].startswith("profiles.developer"), lines[at - 1]
    # 7. the dev server's answer through Navi (the file step 3 wrote), then a preview link
    assert lines[-2] == "12", out
    assert lines[-1].startswith("http://") and ".localhost:" in lines[-1], out


@pytest.mark.browser
def test_web_client_first_steps(make_run: Path) -> None:
    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, _playwright
    from tests.browser.ui import last_card, new_session, run_code, sign_in, snap, wait_finished

    readme = (make_run / "README.md").read_text()
    assert f"Open `http://127.0.0.1:{README_PORT}/` and sign in with a" in readme
    sync_api, problem = _playwright()
    if sync_api is None:
        pytest.fail(f"the browser check cannot run: {problem}")
    token = (make_run / "data" / "admin-token").read_text().strip()
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = chromium.new_page(base_url=f"http://127.0.0.1:{README_PORT}")
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            sign_in(page, token)
            new_session(page)
            run_code(page, "print(6 * 7)")
            card = last_card(page)
            wait_finished(card)
            assert card.locator(".status").inner_text() == "exit 0"
            assert card.locator(".output .stdout").inner_text().strip() == "42"
            snap(page, "readme-first-steps")
        finally:
            chromium.close()
    assert errors == []
