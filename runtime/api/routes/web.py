"""The browser client: `runtime/web/` served at `/` with a strict Content-Security-Policy.

Only files that ship in `runtime/web/` with a known extension are served; the path is
checked against the shipped file list, never joined blindly onto the disk. Every answer
carries a CSP that allows scripts, styles and connections only from this origin (no inline
script, no eval) and images from this origin or `blob:` URLs (file previews are fetched with
the bearer token and shown through blob URLs). The page may frame only this origin and the
preview origin's (published HTML pages are shown there, each on an origin of its own). None
of these routes is in the OpenAPI document.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import Response

from runtime.api.deps import get_services
from runtime.errors import NotFound

router = APIRouter(include_in_schema=False)

WEB_DIR = Path(__file__).resolve().parents[2] / "web"

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
}

CSP = "; ".join((
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' blob:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
))

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-cache",
}


@cache
def shipped_files(root: Path = WEB_DIR) -> dict[str, Path]:
    """Relative POSIX path -> file, for every servable file under the web directory."""
    found: dict[str, Path] = {}
    if not root.is_dir():
        return found
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.suffix in CONTENT_TYPES:
            found[path.relative_to(root).as_posix()] = path
    return found


def _serve(relative: str, frames: str | None = None) -> Response:
    path = shipped_files().get(relative)
    if path is None:
        raise NotFound("no such page")
    headers = SECURITY_HEADERS
    if frames is not None:
        headers = {**headers, "Content-Security-Policy": f"{CSP}; frame-src 'self' {frames}"}
    return Response(path.read_bytes(), media_type=CONTENT_TYPES[path.suffix],
                    headers=headers)


def preview_frames(url_template: str) -> str | None:
    """The CSP source of every preview origin (``http://*.localhost:8101``) from the url
    template (``http://{link}.localhost:8101/``); None when it makes none."""
    parts = urlsplit(url_template.replace("{link}", "*"))
    if parts.scheme not in ("http", "https") or not parts.netloc.startswith("*."):
        return None
    return f"{parts.scheme}://{parts.netloc}"


@router.get("/")
async def index(request: Request) -> Response:
    ports = get_services(request).ports
    frames = None
    if ports is not None and ports.origin is not None:
        frames = preview_frames(ports.links.url_template)
    return _serve("index.html", frames)


@router.get("/web/{path:path}")
async def asset(path: str) -> Response:
    return _serve(path)
