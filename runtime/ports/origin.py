"""The preview origin: a second HTTP server in the supervisor, routing by ``Host`` to links.

It serves nothing of the API or the web client: only what a live link's port answers, so a
preview's page can never call the API as its user nor read the web client's storage. Each
link is its own origin (``<secret>.localhost:<port>``). Service-worker scripts are refused
(a worker would outlive the link in the browser), and every answer carries ``nosniff``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import uvicorn
from starlette.types import Receive, Scope, Send

from runtime.errors import NotFound, PortUnreachable
from runtime.logging import get_logger
from runtime.ports.proxy import NOSNIFF

if TYPE_CHECKING:
    from runtime.ports.hub import PortsHub
    from runtime.ports.previews import PreviewLink
    from runtime.ports.proxy import PortProxy

log = get_logger(__name__)


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode() + b"\n"
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), NOSNIFF,
        (b"cache-control", b"no-store"), (b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


PublishedHook = Callable[[str, Scope, Receive, Send], Awaitable[bool]]
"""Answers a host label that is no preview link's when it is a published page's (the API's
``PublishedPages``): True when it answered."""


class PreviewSource(Protocol):
    """What the preview origin needs of the ports service (`PortsService` is one): the
    link a host name stands for, the relay to the session's ports, and the proxy."""

    async def resolve_link(self, host: str, /) -> PreviewLink | None: ...

    @property
    def hub(self) -> PortsHub: ...

    @property
    def proxy(self) -> PortProxy: ...

    @property
    def published(self) -> PublishedHook | None: ...


class PreviewApp:
    """The ASGI app of the preview origin."""

    def __init__(self, ports: PreviewSource) -> None:
        self.ports = ports

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        host = headers.get(b"host", b"").decode("latin-1")
        link = await self.ports.resolve_link(host)
        published = self.ports.published
        if link is None and published is not None and await published(
                host.split(".", 1)[0].lower(), scope, receive, send):
            return  # a published HTML page: each on an origin of its own too
        if link is None:
            if kind == "http":
                await _plain(send, 404, "no such preview (unknown, expired, revoked, or its "
                             "process ended)")
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        path = scope.get("raw_path") or scope["path"].encode()
        target = path.decode("latin-1").split("?", 1)[0] or "/"

        async def opener(port: int) -> Any:
            return await self.ports.hub.open(link.session, port)

        if kind == "websocket":
            await self.ports.proxy.websocket(scope, receive, send, port=link.port,
                                             path=target, opener=opener)
            return
        if headers.get(b"service-worker", b"").strip().lower() == b"script":
            await _plain(send, 403, "service workers are not allowed on previews")
            return
        try:
            await self.ports.proxy.http(scope, receive, send, session=link.session,
                                        port=link.port, path=target, opener=opener)
        except NotFound:
            await _plain(send, 404, "the preview's process has ended")
        except PortUnreachable as exc:
            await _plain(send, 502, f"port_unreachable: {exc.message}")


def free_port(host: str, wanted: int | None, *, fallback: bool = True
              ) -> tuple[socket.socket, bool]:
    """A bound listening socket on ``wanted`` (else, with ``fallback``, any free port); True
    if it is ``wanted``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in ([wanted] if wanted else []) + ([0] if fallback or not wanted else []):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            continue
        sock.listen(128)
        sock.setblocking(False)
        return sock, port == wanted
    raise OSError(f"port {wanted} on {host} is taken" if wanted else f"no free port on {host}")


class OriginServer:
    """uvicorn serving ``PreviewApp`` on one bound socket, in the running event loop."""

    def __init__(self, app: PreviewApp, sock: socket.socket) -> None:
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(
            app, lifespan="off", log_config=None, access_log=False, server_header=False,
            proxy_headers=False, timeout_graceful_shutdown=2))
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # ``_serve``: uvicorn's server without its signal handlers (the API server owns them)
        self._task = asyncio.create_task(self._server._serve(sockets=[self.sock]))  # noqa: SLF001
        for _ in range(200):
            if self._server.started or self._task.done():
                break
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()

    async def close(self) -> None:
        self._server.should_exit = True
        self._server.force_exit = True
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, 5)
        self.sock.close()
