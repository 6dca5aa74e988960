"""The docs site builds with `mkdocs build --strict` (a broken link, a page missing from the
nav or a nav entry without its page fails it) and loads nothing from elsewhere: no web font,
no script or stylesheet from a CDN, so the pages work offline and tell no third party who
reads them."""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("mkdocs", reason="the dev extra installs mkdocs")

# what a browser fetches by itself when it renders a page (links a reader clicks are fine)
LOADED = {("script", "src"), ("img", "src"), ("iframe", "src"), ("source", "src"),
          ("link", "href")}
LINK_FETCHED = {"stylesheet", "preconnect", "preload", "prefetch", "icon", "modulepreload",
                "dns-prefetch", "manifest", "apple-touch-icon"}


class _Fetched(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        for name in ("src", "href"):
            url = attr.get(name) or ""
            if (tag, name) not in LOADED:
                continue
            if tag == "link" and not LINK_FETCHED & set((attr.get("rel") or "").split()):
                continue
            self.urls.append(url)


def external_loads(html: str) -> list[str]:
    parser = _Fetched()
    parser.feed(html)
    found = [u for u in parser.urls if re.match(r"(https?:)?//", u)]
    found += re.findall(r"@import\s+url\(\s*['\"]?(https?://[^)'\"]+)", html)
    return found


def test_external_loads_are_found() -> None:
    """The check itself: a Google Fonts stylesheet and a CDN script are caught, links are not."""
    page = ('<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
            '<script src="//cdn.jsdelivr.net/x.js"></script><a href="https://example.org">x</a>'
            '<link rel="stylesheet" href="assets/main.css">')
    assert external_loads(page) == ["https://fonts.googleapis.com/css?family=Roboto",
                                    "//cdn.jsdelivr.net/x.js"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        # not --quiet: it hides the warnings that --strict counts, and a broken link passes
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(out)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_the_site_builds_strict(site: Path) -> None:
    for page in ("index", "architecture", "security", "sandbox", "policy", "audit", "api",
                 "sessions", "cluster", "operations", "configuration", "getting-started"):
        assert (site / f"{page}.html").is_file(), page


def test_no_page_loads_anything_from_elsewhere(site: Path) -> None:
    loads = {str(p.relative_to(site)): external_loads(p.read_text())
             for p in site.rglob("*.html")}
    assert {page: urls for page, urls in loads.items() if urls} == {}
    css = "\n".join(p.read_text() for p in site.rglob("*.css"))
    assert "fonts.googleapis" not in css and "fonts.gstatic" not in css


def test_every_page_is_in_the_nav() -> None:
    """A page left out of mkdocs.yml's nav is only a warning to a reader of the log; here it
    is red (strict mode makes it one too, this says which page)."""
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name not in nav]
    assert missing == []
