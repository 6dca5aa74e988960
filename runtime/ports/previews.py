"""Preview links: a session's port reachable without a bearer token, on an origin of its own.

A link's secret is the first label of its host name (``<secret>.localhost:<port>``, or
``NAVI_PREVIEW_URL``'s ``{link}``): every link is a different origin to a browser, so a
preview's scripts share no storage, cookies or service workers with the web client (on the
API's origin) nor with another preview. A link works until it expires, is revoked, the
process that declared its port ends, or the token that made it stops working (checked at
least every ``TOKEN_RECHECK_S``). Links live in the server's memory: a restart ends them.
"""

from __future__ import annotations

import base64
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from runtime.errors import NotFound, QuotaExceeded

DEFAULT_EXPIRES_S = 3600
MAX_EXPIRES_S = 86400
MAX_LINKS_PER_SESSION = 32
TOKEN_RECHECK_S = 5.0
LABEL_RE = re.compile(r"^[a-z2-7]{26}$")


class PreviewOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    url: str
    port: int
    expires_at: float


@dataclass(eq=False)
class PreviewLink:
    id: str
    label: str
    tenant: str
    session: str
    port: int
    process_id: str
    token_id: str
    expires_at: float
    token_checked_at: float = 0.0


TokenAlive = Callable[[str], Awaitable[bool]]


class PreviewLinks:
    """The live links; ``url_for`` renders a label into the link's origin."""

    def __init__(self, url_template: str) -> None:
        if "{link}" not in url_template:
            raise ValueError("a preview url template needs {link}")
        self.url_template = url_template
        self._by_id: dict[str, PreviewLink] = {}
        self._by_label: dict[str, PreviewLink] = {}

    def url_for(self, label: str) -> str:
        url = self.url_template.replace("{link}", label)
        return url if url.endswith("/") else url + "/"

    def out(self, link: PreviewLink) -> PreviewOut:
        return PreviewOut(id=link.id, url=self.url_for(link.label), port=link.port,
                          expires_at=link.expires_at)

    def create(self, *, tenant: str, session: str, port: int, process_id: str, token_id: str,
               expires_in_s: float, now: float | None = None) -> PreviewLink:
        if len(self.list(session, tenant)) >= MAX_LINKS_PER_SESSION:
            raise QuotaExceeded(f"a session keeps at most {MAX_LINKS_PER_SESSION} preview "
                                "links (preview_links_per_session)", retry_after=60)
        label = base64.b32encode(secrets.token_bytes(16)).decode().rstrip("=").lower()
        link = PreviewLink(id="pv_" + secrets.token_hex(8), label=label, tenant=tenant,
                           session=session, port=port, process_id=process_id,
                           token_id=token_id,
                           expires_at=(now or time.time()) + expires_in_s)
        self._by_id[link.id] = link
        self._by_label[label] = link
        return link

    def list(self, session: str, tenant: str) -> list[PreviewLink]:
        now = time.time()
        return sorted((link for link in list(self._by_id.values())
                       if link.session == session and link.tenant == tenant
                       and self._live(link, now)), key=lambda link: link.expires_at)

    def get(self, session: str, tenant: str, link_id: str) -> PreviewLink:
        link = self._by_id.get(link_id)
        if link is None or link.session != session or link.tenant != tenant \
                or not self._live(link, time.time()):
            raise NotFound("no such preview link")
        return link

    def revoke(self, link: PreviewLink) -> None:
        self._by_id.pop(link.id, None)
        self._by_label.pop(link.label, None)

    def revoke_session(self, session: str) -> None:
        for link in [link for link in self._by_id.values() if link.session == session]:
            self.revoke(link)

    def _live(self, link: PreviewLink, now: float) -> bool:
        if link.expires_at <= now:
            self.revoke(link)
            return False
        return True

    async def resolve(self, host: str, serving: Callable[[str, int], str | None],
                      token_alive: TokenAlive) -> PreviewLink | None:
        """The live link a request's ``Host`` names, or None (unknown, expired, revoked,
        its process ended, its token revoked or expired)."""
        label = host.split(".", 1)[0].lower()
        link = self._by_label.get(label) if LABEL_RE.fullmatch(label) else None
        now = time.time()
        if link is None or not self._live(link, now):
            return None
        if serving(link.session, link.port) != link.process_id:
            self.revoke(link)  # its process ended (another one on that port is not it)
            return None
        if now - link.token_checked_at >= TOKEN_RECHECK_S:
            if not await token_alive(link.token_id):
                self.revoke(link)
                return None
            link.token_checked_at = now
        return link
