"""Published HTML pages on the preview origin, each at an origin of its own.

`GET /v1/published/{token}` answers an HTML page with a 307 to
`<label>.localhost:<NAVI_PREVIEW_PORT>/` (or `NAVI_PREVIEW_URL`'s `{link}`), the label being
the token in base32 (`routes.shares.published_label`): the page's scripts then run on an
origin that is neither the API's (whose storage holds the web client's token, and whose
address a reader trusts: no phishing for tokens there) nor another page's or preview's. The
preview origin hands a host whose label is no preview link's to ``PublishedPages``, which
serves the page as the API did before: streamed, held, capped per link and in all, under the
same sandbox CSP; only `GET`/`HEAD /`, and only HTML (images, PDFs and Markdown stay on the
API's origin, where the web client fetches them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Receive, Scope, Send

from runtime.api.errors import status_for
from runtime.api.routes.shares import (
    BASE_HEADERS,
    GONE,
    open_published,
    published_response,
    token_of_label,
)
from runtime.errors import NaviError, NotFound
from runtime.store.shares import ShareStore

if TYPE_CHECKING:
    from runtime.api.services import Services


async def _plain(send: Send, status: int, text: str, retry_after: int | None = None) -> None:
    body = text.encode() + b"\n"
    headers = [(k.lower().encode(), v.encode()) for k, v in BASE_HEADERS.items()]
    headers += [(b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"%d" % len(body))]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class PublishedPages:
    """The preview origin's hook: serves the published page a host label names."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def __call__(self, label: str, scope: Scope, receive: Receive, send: Send) -> bool:
        """False when ``label`` is not a published page's (the origin answers it)."""
        token = token_of_label(label)
        if token is None:
            return False
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return True
        if scope["method"] not in ("GET", "HEAD"):
            await _plain(send, 405, "a published page is only read (GET)")
            return True
        if scope["path"] != "/":
            await _plain(send, 404, "a published page has nothing but /")
            return True
        try:
            share, held, kind, head = await open_published(self.services, token)
            if kind != "html":
                held.close()
                raise NotFound(GONE)
            try:
                await ShareStore(self.services.store).count_download(share.id)
            except BaseException:
                held.close()
                raise
        except NaviError as exc:
            await _plain(send, status_for(exc), exc.message,
                         getattr(exc, "retry_after", None))
            return True
        await published_response(self.services, held, kind, head)(scope, receive, send)
        return True
