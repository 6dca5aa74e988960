"""The agent loop in-process on the real services (store, audit, policy, Executor, tools),
a `FakeBackend` sandbox and a fake model server: for loop tests that need no Docker.

    async with AgentHarness(tmp_path, fake_url) as h:
        events = await h.turn("hello")          # every event of the turn, in order
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from runtime.api.app import start_services
from runtime.api.services import Services
from runtime.config import Settings
from runtime.events import Event
from runtime.policy.decision import Subject
from runtime.sandbox.fake import FakeBackend

HERE = Path(__file__).resolve().parent
POLICY = HERE / "agent_policy.yaml"
PROFILES = HERE / "profiles"
END = {"stream_end", "error"}


class AgentHarness:
    def __init__(self, tmp: Path, *, ollama: str | None = None, openai: str | None = None,
                 backend: FakeBackend | None = None, profile: str = "developer",
                 **settings: Any) -> None:
        values: dict[str, Any] = {
            "data_dir": tmp / "data", "policy": POLICY, "profiles_dir": PROFILES,
            "model": "gemma3:270m", "ollama_host": ollama, "openai_base_url": openai,
            "persona": None, "admin_token": None, "embedded_model": "off", **settings}
        if openai:
            values["model"] = settings.get("model", "fake-model")
        self.settings = Settings(**values)
        self.sandbox = backend or FakeBackend()
        self.profile = profile
        self.services: Services
        self.subject: Subject

    async def __aenter__(self) -> AgentHarness:
        self.services = await start_services(self.settings, self.sandbox)
        store = self.services.store
        tenant = await store.create_tenant("acme")
        session = await store.create_session(tenant.id, self.profile)
        self.services.workspaces.create(tenant.id, session.id)
        self.subject = Subject(tenant=tenant.id, tenant_name="acme", role="user",
                               user="k_tester", profile=self.profile, session=session.id)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.services.close()

    @property
    def bus(self) -> Any:
        return self.services.hub.bus(self.subject.session)

    async def start(self, content: str) -> str:
        turn_id: str = await self.services.agent.start_turn(self.services, self.subject,
                                                            content)
        return turn_id

    async def events_until_end(self, after: int, timeout: float = 20.0,
                               on_event: Any = None) -> list[Event]:
        """Events after id `after` up to and including the turn's end."""
        out: list[Event] = []
        events = self.bus.subscribe(after)
        try:
            async with asyncio.timeout(timeout):
                async for event in events:
                    out.append(event)
                    if on_event is not None:
                        await on_event(event)
                    if event.type in END:
                        return out
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()
        return out

    async def turn(self, content: str, timeout: float = 20.0, on_event: Any = None
                   ) -> list[Event]:
        mark = self.bus.next_id - 1
        await self.start(content)
        return await self.events_until_end(mark, timeout, on_event)

    def workspace_file(self, name: str, data: bytes) -> None:
        workspace = self.services.workspaces.open(self.subject.tenant, self.subject.session)
        try:
            workspace.write_bytes(name, data)
        finally:
            workspace.close()

    async def audit(self) -> list[dict[str, Any]]:
        records = await self.services.audit.records(session=self.subject.session)
        return [r.model_dump() for r in records]


def types(events: list[Event]) -> list[str]:
    """Event types with runs of deltas collapsed (`stream_delta` once per run)."""
    out: list[str] = []
    for event in events:
        if event.type in ("stream_delta", "thinking_delta", "exec_output") and out and \
                out[-1] == event.type:
            continue
        out.append(event.type)
    return out
