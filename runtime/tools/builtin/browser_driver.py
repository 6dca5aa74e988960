"""The `browser` tool's driver, run inside the browser sandbox image (python3 -I -c).

It reads one JSON job on stdin ({url, action: "text"|"screenshot", timeout_s, width, height,
max_chars}), runs Debian's Chromium headless on the URL and prints one JSON answer on stdout:
{ok, title, text, truncated} for text (the DOM after the page's scripts ran, `--dump-dom`,
turned into readable text here) or {ok, png_b64} for a screenshot (`--screenshot`). It is
sent by the supervisor at each call (never installed in the image) and imports only the
standard library.

Chromium's own sandbox is off (`--no-sandbox`): it needs user namespaces or a setuid helper,
which the container forbids (no capabilities, no new privileges, seccomp, read-only root,
non-root uid). The container is the sandbox, as for every other call. The only way out is the
egress proxy: when the call has egress, `navi-egress` relays 127.0.0.1:3128 to it and
Chromium is pointed there for every host, loopback names included (the proxy decides).
"""

from __future__ import annotations

import base64
import html.parser
import json
import os
import re
import signal
import subprocess
import sys
from typing import Any

PROFILE = "/tmp/chromium-profile"
SHOT = "/tmp/chromium-shot.png"
SKIPPED = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
BLOCKS = {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt",
          "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5",
          "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "table",
          "tr", "ul", "td", "th"}
# how headless Chromium reports that the page itself (not one of its resources) failed
ERROR_PAGE = re.compile(r"Page load failed: net::(ERR_[A-Z0-9_]+)")


class Text(html.parser.HTMLParser):
    """Readable text of a DOM: visible text, a line break at each block, no scripts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self.skip = 0
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        elif tag in SKIPPED:
            self.skip += 1
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        elif tag in SKIPPED:
            self.skip = max(0, self.skip - 1)
        elif tag in BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
        elif not self.skip:
            self.parts.append(data)

    def text(self) -> str:
        lines = [" ".join(line.split()) for line in "".join(self.parts).split("\n")]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def chromium(job: dict[str, Any], extra: list[str]) -> list[str]:
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking", "--disable-sync",
            "--disable-component-update", "--disable-default-apps", "--mute-audio",
            "--disable-breakpad", "--hide-scrollbars", "--user-data-dir=" + PROFILE,
            f"--window-size={job['width']},{job['height']}",
            f"--virtual-time-budget={int(job.get('settle_ms', 3000))}"]
    if os.environ.get("NAVI_EGRESS_SOCKET") or os.environ.get("HTTPS_PROXY"):
        argv += ["--proxy-server=http://127.0.0.1:3128", "--proxy-bypass-list=<-loopback>"]
    else:  # no egress: nothing to reach, say so fast instead of waiting on a dead network
        argv += ["--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]
    return argv + extra + [job["url"]]


def run(argv: list[str], timeout_s: float) -> tuple[int | None, bytes, bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, b"", b""
    return proc.returncode, out, err


def failure(err: bytes, code: object) -> dict[str, Any]:
    text = err.decode("utf-8", "replace")
    found = ERROR_PAGE.search(text)
    if found:
        return {"ok": False, "error": "load_failed", "message": f"the page did not load "
                f"({found.group(1)}; a host the policy does not allow is refused by the "
                "egress proxy)"}
    tail = " ".join(text.strip().splitlines()[-3:])[-500:]
    return {"ok": False, "error": "browser_failed",
            "message": f"chromium ended with exit code {code}: {tail}"}


def main() -> None:
    job = json.load(sys.stdin)
    answer: dict[str, Any]
    timeout_s = float(job["timeout_s"])
    if job["action"] == "screenshot":
        code, _, err = run(chromium(job, ["--screenshot=" + SHOT]), timeout_s)
        if code is None:
            answer = {"ok": False, "error": "timeout", "message": "the page took too long"}
        elif not os.path.isfile(SHOT) or ERROR_PAGE.search(err.decode("utf-8", "replace")):
            answer = failure(err, code)
        else:
            with open(SHOT, "rb") as f:
                answer = {"ok": True, "png_b64": base64.b64encode(f.read()).decode("ascii")}
    else:
        code, out, err = run(chromium(job, ["--dump-dom"]), timeout_s)
        if code is None:
            answer = {"ok": False, "error": "timeout", "message": "the page took too long"}
        elif code != 0 or not out.strip() or ERROR_PAGE.search(err.decode("utf-8", "replace")):
            answer = failure(err, code)
        else:
            parser = Text()
            parser.feed(out.decode("utf-8", "replace"))
            text = parser.text()
            limit = int(job["max_chars"])
            answer = {"ok": True, "title": " ".join("".join(parser.title).split()),
                      "text": text[:limit], "truncated": len(text) > limit}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
