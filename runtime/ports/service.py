"""`PortsService`: the hub, the proxy, the preview links and the preview origin of one server.

Built in the app factory (``start``/``close`` with the other services). The preview origin
listens on ``NAVI_PREVIEW_PORT`` (default: the API's port + 1; when that one is taken and
none was set, any free port, logged) unless ``NAVI_PREVIEW_URL`` says where the previews are
served from (a reverse proxy with a wildcard name in front of that port).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.errors import ConfigError
from runtime.logging import get_logger
from runtime.policy.decision import Subject
from runtime.ports.hub import PortsHub
from runtime.ports.origin import OriginServer, PreviewApp, PublishedHook, free_port
from runtime.ports.preview_rows import PreviewRows, preview_key
from runtime.ports.previews import PreviewLink, PreviewLinks
from runtime.ports.proxy import PortProxy
from runtime.sandbox.docker.spec import BindMount

if TYPE_CHECKING:
    from runtime.processes.launch import LaunchExtras
    from runtime.processes.models import ProcessInfo

log = get_logger(__name__)

TokenAlive = Callable[[str], Awaitable[bool]]


class PortsService:
    def __init__(self, root: Path, *, token_alive: TokenAlive,
                 rows: PreviewRows | None = None) -> None:
        """``rows``: where preview links are kept across restarts (None: in memory)."""
        self.root = root
        self.hub = PortsHub(root)
        self.proxy = PortProxy()
        self.token_alive = token_alive
        self.rows = rows
        self.links = PreviewLinks("http://{link}.localhost:0/")
        self.origin: OriginServer | None = None
        self.published: PublishedHook | None = None  # published HTML pages (set by the API)

    async def start(self, *, host: str, api_port: int, preview_port: int | None,
                    preview_url: str | None) -> None:
        if preview_url is not None and "{link}" not in preview_url:
            raise ConfigError("NAVI_PREVIEW_URL must hold {link} (each link's own host name)")
        wanted = preview_port or (api_port + 1 if api_port < 65535 else None)
        try:  # a port the operator chose is that port or nothing
            sock, got = free_port(host, wanted, fallback=preview_port is None)
        except OSError as exc:
            raise ConfigError(f"NAVI_PREVIEW_PORT: {exc}") from exc
        self.origin = OriginServer(PreviewApp(self), sock)
        await self.origin.start()
        if not got:
            log.warning("preview_port_taken", wanted=wanted, port=self.origin.port)
        template = preview_url or f"http://{{link}}.localhost:{self.origin.port}/"
        key = await asyncio.to_thread(preview_key, self.root) if self.rows else None
        self.links = PreviewLinks(template, key, self.rows)
        log.info("preview_origin", port=self.origin.port, url=template)

    async def load_links(self) -> None:
        """The links kept from before a restart, once adopted processes serve again."""
        loaded = await self.links.load(self.hub.running_port)
        if loaded:
            log.info("preview_links_loaded", links=loaded)

    async def resolve_link(self, host: str) -> PreviewLink | None:
        return await self.links.resolve(host, self.hub.running_port, self.token_alive)

    # -- the process service's hooks ---------------------------------------------------------

    async def launch_hook(self, info: ProcessInfo, subject: Subject) -> LaunchExtras | None:
        """Before a process container is created: the relay's mounts and argv prefix."""
        from runtime.processes.launch import LaunchExtras

        if subject.node != "local":
            return None  # the broker's sockets are on this machine
        relay = await self.hub.relay_for_process(subject.session, info.id, info.ports)
        if relay is None:
            return None
        mounts, prefix = relay
        return LaunchExtras(mounts=tuple(BindMount(source=str(m.source), target=m.target)
                                         for m in mounts), argv_prefix=tuple(prefix))

    async def end_hook(self, info: ProcessInfo) -> None:
        """Its container is gone: its ports, and the links to them, with it."""
        await self.hub.process_ended(info.id)

    async def adopt_hook(self, info: ProcessInfo, session: str) -> None:
        await self.hub.adopt(session, info.id, info.ports)

    async def release_session(self, session: str) -> None:
        """The session ended: its links, pools and sockets go."""
        await self.links.revoke_session(session)
        await self.proxy.release(session)
        await self.hub.release_session(session)

    async def close(self) -> None:
        if self.origin is not None:
            await self.origin.close()
        await self.proxy.close()
        await self.hub.close()


def token_checker(get_token: Callable[[str], Awaitable[object | None]]) -> TokenAlive:
    """``token_alive`` over the store: a link dies with the token that made it."""

    async def alive(token_id: str) -> bool:
        record = await get_token(token_id)
        if record is None or getattr(record, "revoked_at", None) is not None:
            return False
        expires = getattr(record, "expires_at", None)
        return expires is None or expires > time.time()

    return alive
