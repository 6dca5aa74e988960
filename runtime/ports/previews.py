"""Preview links: a session's port reachable without a bearer token, on an origin of its own.

A link's secret is the first label of its host name (``<secret>.localhost:<port>``, or
``NAVI_PREVIEW_URL``'s ``{link}``): every link is a different origin to a browser, so a
preview's scripts share no storage, cookies or service workers with the web client (on the
API's origin) nor with another preview. A link works until it expires, is revoked, the
process that declared its port ends, or the token that made it stops working (checked at
least every ``TOKEN_RECHECK_S``). With ``rows`` (the app's), links are kept in the database
(``runtime.ports.preview_rows``, without their secret: a label is derived from the link's id
with the server's key) and ``load`` finds them again after a restart, once the processes
that outlived it are adopted: a link whose process did not is dropped then.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from runtime.errors import NotFound, QuotaExceeded
from runtime.ports.preview_rows import PreviewRows

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
Serving = Callable[[str, int], str | None]  # (session, port) -> the process serving it


def label_of(key: bytes, link_id: str) -> str:
    """A link's secret host label: 130 bits of HMAC-SHA256(key, id), base32, lowercase."""
    digest = hmac.new(key, link_id.encode(), hashlib.sha256).digest()
    return base64.b32encode(digest).decode()[:26].lower()


class PreviewLinks:
    """The live links; ``url_for`` renders a label into the link's origin."""

    def __init__(self, url_template: str, key: bytes | None = None,
                 rows: PreviewRows | None = None) -> None:
        if "{link}" not in url_template:
            raise ValueError("a preview url template needs {link}")
        self.url_template = url_template
        self.key = key or secrets.token_bytes(32)
        self.rows = rows
        self._by_id: dict[str, PreviewLink] = {}
        self._by_label: dict[str, PreviewLink] = {}
        self._stale: list[str] = []  # expired in memory, their rows go with the next write

    def url_for(self, label: str) -> str:
        url = self.url_template.replace("{link}", label)
        return url if url.endswith("/") else url + "/"

    def out(self, link: PreviewLink) -> PreviewOut:
        return PreviewOut(id=link.id, url=self.url_for(link.label), port=link.port,
                          expires_at=link.expires_at)

    async def create(self, *, tenant: str, session: str, port: int, process_id: str,
                     token_id: str, expires_in_s: float, now: float | None = None
                     ) -> PreviewLink:
        if len(self.list(session, tenant)) >= MAX_LINKS_PER_SESSION:
            raise QuotaExceeded(f"a session keeps at most {MAX_LINKS_PER_SESSION} preview "
                                "links (preview_links_per_session)", retry_after=60)
        link_id = "pv_" + secrets.token_hex(8)
        now = now or time.time()
        link = PreviewLink(id=link_id, label=label_of(self.key, link_id), tenant=tenant,
                           session=session, port=port, process_id=process_id,
                           token_id=token_id, expires_at=now + expires_in_s)
        if self.rows is not None:  # on disk before anyone is given it
            stale, self._stale = self._stale, []
            await self.rows.delete(stale)
            await self.rows.insert({"id": link.id, "tenant_id": tenant, "session_id": session,
                                    "port": port, "process_id": process_id,
                                    "token_id": token_id, "created_at": now,
                                    "expires_at": link.expires_at})
        self._add(link)
        return link

    def _add(self, link: PreviewLink) -> None:
        self._by_id[link.id] = link
        self._by_label[link.label] = link

    async def load(self, serving: Serving) -> int:
        """The links kept on disk whose process still serves their port (the others are
        deleted); how many were loaded. Called once the adopted processes are known."""
        if self.rows is None:
            return 0
        gone = []
        for row in await self.rows.live():
            if serving(row["session_id"], row["port"]) != row["process_id"]:
                gone.append(row["id"])
                continue
            self._add(PreviewLink(id=row["id"], label=label_of(self.key, row["id"]),
                                  tenant=row["tenant_id"], session=row["session_id"],
                                  port=row["port"], process_id=row["process_id"],
                                  token_id=row["token_id"], expires_at=row["expires_at"]))
        await self.rows.delete(gone)
        return len(self._by_id)

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

    async def revoke(self, link: PreviewLink) -> None:
        await self.revoke_all([link])

    async def revoke_session(self, session: str) -> None:
        await self.revoke_all([link for link in self._by_id.values() if link.session == session])

    async def revoke_all(self, links: builtins.list[PreviewLink]) -> None:
        for link in links:
            self._by_id.pop(link.id, None)
            self._by_label.pop(link.label, None)
        if self.rows is not None:
            await self.rows.delete([link.id for link in links])

    def _live(self, link: PreviewLink, now: float) -> bool:
        """Not expired (an expired link leaves memory now, its row with the next write)."""
        if link.expires_at <= now:
            if self._by_id.pop(link.id, None) is not None:
                self._stale.append(link.id)
            self._by_label.pop(link.label, None)
            return False
        return True

    async def resolve(self, host: str, serving: Serving, token_alive: TokenAlive
                      ) -> PreviewLink | None:
        """The live link a request's ``Host`` names, or None (unknown, expired, revoked,
        its process ended, its token revoked or expired)."""
        label = host.split(".", 1)[0].lower()
        link = self._by_label.get(label) if LABEL_RE.fullmatch(label) else None
        now = time.time()
        if link is None or not self._live(link, now):
            return None
        if serving(link.session, link.port) != link.process_id:
            await self.revoke(link)  # its process ended (another one on that port is not it)
            return None
        if now - link.token_checked_at >= TOKEN_RECHECK_S:
            if not await token_alive(link.token_id):
                await self.revoke(link)
                return None
            link.token_checked_at = now
        return link
