"""The whole app in-process (`create_app` through httpx's `ASGITransport`) with the agent loop
talking to a fake model server on loopback, a real SQLite store and audit log, and the
scripted `FakeBackend` sandbox: for agent features whose contract is an HTTP endpoint.

    async with agent_app(tmp_path, ollama.url) as app:
        token, session = await app.user_session()
        await app.post(token, f"/v1/sessions/{session}/messages", json={"content": "hi"})
        events = await app.until(session, "stream_end")
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from runtime.api.app import create_app
from runtime.api.services import Services
from runtime.config import Settings
from runtime.events import Event
from runtime.sandbox.fake import FakeBackend
from tests.fakes.agent_harness import POLICY, PROFILES

END = {"stream_end", "error"}


class InProcessApi:
    """An app built by `create_app`, called through httpx's `ASGITransport` (no socket)."""

    def __init__(self, app: Any, admin_token: str) -> None:
        self.app = app
        self.admin_token = admin_token

    @property
    def services(self) -> Services:
        return self.app.state.services  # type: ignore[no-any-return]

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                 base_url="http://navi.test", headers=headers, timeout=30)

    async def call(self, token: str | None, method: str, url: str, **kw: Any
                   ) -> httpx.Response:
        async with self.client(token) as client:
            return await client.request(method, url, **kw)


class AgentApp(InProcessApi):
    def __init__(self, app: Any, admin_token: str, sandbox: FakeBackend) -> None:
        super().__init__(app, admin_token)
        self.sandbox = sandbox

    async def post(self, token: str | None, url: str, **kw: Any) -> httpx.Response:
        return await self.call(token, "POST", url, **kw)

    async def get(self, token: str | None, url: str, **kw: Any) -> httpx.Response:
        return await self.call(token, "GET", url, **kw)

    async def tenant(self) -> str:
        resp = await self.post(self.admin_token, "/v1/tenants",
                               json={"name": f"t{secrets.token_hex(4)}"})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    async def token(self, tenant_id: str, role: str = "user") -> str:
        resp = await self.post(self.admin_token, f"/v1/tenants/{tenant_id}/tokens",
                               json={"role": role})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["token"])

    async def session(self, token: str, profile: str | None = None) -> str:
        resp = await self.post(token, "/v1/sessions",
                               json={"profile": profile} if profile else {})
        assert resp.status_code == 201, resp.text
        return str(resp.json()["id"])

    async def user_session(self, profile: str | None = None) -> tuple[str, str]:
        """A new tenant's user token and a session of it."""
        token = await self.token(await self.tenant())
        return token, await self.session(token, profile)

    async def send(self, token: str, session: str, content: str, **extra: Any) -> str:
        resp = await self.post(token, f"/v1/sessions/{session}/messages",
                               json={"content": content, **extra})
        assert resp.status_code == 202, resp.text
        return str(resp.json()["turn_id"])

    async def until(self, session: str, *types: str, after: int = 0, timeout: float = 20.0,
                    on_event: Callable[[Event], Any] | None = None) -> list[Event]:
        """Events of the session after id `after` up to the first of `types` (default: the
        end of a turn), from the bus itself."""
        wanted = set(types) or END
        out: list[Event] = []
        events = self.services.hub.bus(session).subscribe(after)
        try:
            async with asyncio.timeout(timeout):
                async for event in events:
                    out.append(event)
                    if on_event is not None:
                        result = on_event(event)
                        if asyncio.iscoroutine(result):
                            await result
                    if event.type in wanted:
                        return out
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()
        return out

    async def audit(self, session: str) -> list[dict[str, Any]]:
        records = await self.services.audit.records(session=session)
        return [r.model_dump() for r in records]


@asynccontextmanager
async def agent_app(tmp: Path, ollama: str | None = None, *, openai: str | None = None,
                    sandbox: FakeBackend | None = None, **settings: Any
                    ) -> AsyncIterator[AgentApp]:
    admin_token = "navi_admin_" + secrets.token_urlsafe(24)
    values: dict[str, Any] = {
        "data_dir": tmp / "data", "policy": POLICY, "profiles_dir": PROFILES,
        "model": "gemma3:270m", "ollama_host": ollama, "openai_base_url": openai,
        "persona": None, "admin_token": admin_token, "embedded_model": "off",
        "disk_overcommit": 1000, "disk_reserve_mb": 0, "log_level": "warning", **settings}
    backend = sandbox or FakeBackend()
    app = create_app(Settings(**values), backend=backend)
    async with app.router.lifespan_context(app):
        yield AgentApp(app, admin_token, backend)
